#!/usr/bin/env python3
"""The output of `xfrun train --profile` (driver/xfrun.c print_profile), as
tests/runtime/run_xfrun.sh (CPU) and tests/cuda/run_cli.sh (the device) check it.

Usage: check_profile.py OUT STEPS HEADER LABEL...
  OUT     the printed profile
  STEPS   the steps it covers ("profile of STEPS training steps")
  HEADER  a regular expression the header's text after "ms in kernels" matches
  LABEL   regular expressions, each matching some row's kernel label

The kernels' total is positive and at most the step's time; at least 8 rows,
each parsed; the shares add up to 100 and the rows' ms to the kernels' total
(rounding: 0.0005 ms a row); the rows with runs largest first."""
import re
import sys

out, steps, header, labels_wanted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lines = open(out).read().splitlines()
m = re.match(rf"profile of {steps} training steps: ([0-9.]+) ms per step, ([0-9.]+) ms in kernels", lines[0])
assert m and 0 < float(m.group(2)) <= float(m.group(1)), lines[0]
assert re.match(header, lines[0][m.end():]), lines[0]
rows = [re.match(r" *([0-9.]+)% +([0-9.]+) +([0-9]*) +(.*)", l) for l in lines[2:] if "%" in l]
assert len(rows) >= 8 and all(rows), lines
assert abs(sum(float(r.group(1)) for r in rows) - 100) < 1, "shares do not add up to 100"
assert abs(sum(float(r.group(2)) for r in rows) - float(m.group(2))) <= 0.0005 * (len(rows) + 1)
labels = [r.group(4) for r in rows]
for want in labels_wanted:
    assert any(re.search(want, l) for l in labels), (want, labels)
shares = [float(r.group(1)) for r in rows if r.group(3)]
assert shares == sorted(shares, reverse=True), "not largest first"
