#!/usr/bin/env python3
"""Tests of `xfrun plot`: python3 tests/plot/test_plot.py XFRUN (from the repository root).

Synthetic loss curves go through xfrun plot; the SVG must be well-formed, hold
one median curve per run with its label in the legend, and its points, mapped
back through the axis transform the plot group carries (data-left/top/width/
height, data-xmin/xmax/ymin/ymax, data-log-y), must be the medians of every
non-overlapping window of N steps recomputed here. Bad inputs must fail with
one `xfrun: error:` line and exit status 1; usage errors (options) with
`xfrun plot: error:` and `(see xfrun plot --help)`, exit status 2.
--opt=value is --opt value. Fixtures: tests/plot/*.csv.
Standard library only.
"""
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NS = {"s": "http://www.w3.org/2000/svg"}
HERE = "tests/plot"
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", what, file=sys.stderr)
    return cond


def run(*args):
    p = subprocess.run([XFRUN, "plot", *args], capture_output=True, timeout=120)
    err = p.stderr.decode("utf-8", "replace")
    check(p.returncode in (0, 1, 2), f"exit status 0, 1 or 2, not {p.returncode}: {args}\n{err}")
    check("Sanitizer" not in err and "runtime error" not in err, f"no sanitizer report: {args}\n{err}")
    return p.returncode, p.stdout.decode("utf-8", "replace"), err


def write_csv(path, rows, header="step,loss,tokens_per_s,elapsed_s"):
    with open(path, "w") as f:
        f.write(header + "\n")
        for s, l in rows:
            f.write(f"{s},{l},1000.0,{s * 0.01:.3f}\n")


def block_medians(rows, window):
    """(middle step, median loss) of each window k: steps k*window+1 .. (k+1)*window."""
    out, cur, key = [], [], None
    for s, l in rows:
        k = (s - 1) // window
        if cur and k != key:
            out.append(((cur[0][0] + cur[-1][0]) / 2, statistics.median(v for _, v in cur)))
            cur = []
        key = k
        cur.append((s, l))
    if cur:
        out.append(((cur[0][0] + cur[-1][0]) / 2, statistics.median(v for _, v in cur)))
    return out


class Plot:
    """A parsed SVG of xfrun plot and the inverse of its axis transform."""

    def __init__(self, path):
        self.raw_text = open(path, encoding="utf-8").read()
        self.root = ET.fromstring(self.raw_text)
        g = self.root.find(".//s:g[@class='plot']", NS)
        self.g = g
        f = lambda k: float(g.get("data-" + k))
        self.left, self.top, self.width, self.height = f("left"), f("top"), f("width"), f("height")
        self.xmin, self.xmax, self.ymin, self.ymax = f("xmin"), f("xmax"), f("ymin"), f("ymax")
        self.log_y = g.get("data-log-y") == "1"
        self.window = int(g.get("data-window"))
        self.dx = (self.xmax - self.xmin) / self.width  # data units per SVG unit
        ty = math.log10 if self.log_y else (lambda v: v)
        self.tymin, self.tymax = ty(self.ymin), ty(self.ymax)
        self.dy = (self.tymax - self.tymin) / self.height

    def curves(self, cls):
        return self.g.findall(f"s:polyline[@class='{cls}']", NS)

    def data_points(self, poly):
        pts = []
        for pair in poly.get("points").split():
            px, py = map(float, pair.split(","))
            x = self.xmin + (px - self.left) * self.dx
            t = self.tymin + (self.top + self.height - py) * self.dy
            pts.append((x, 10**t if self.log_y else t))
        return pts

    def matches(self, poly, expected):
        """The polyline's points are `expected` (data units) to the 0.01 SVG units printed."""
        got = self.data_points(poly)
        if len(got) != len(expected):
            return False
        for (gx, gy), (ex, ey) in zip(got, expected):
            ty = (lambda v: math.log10(v)) if self.log_y else (lambda v: v)
            if abs(gx - ex) > 0.006 * self.dx or abs(ty(gy) - ty(ey)) > 0.006 * self.dy:
                return False
        return True

    def legend(self):
        return [t.text for t in self.root.findall(".//s:g[@class='legend']//s:text[@class='legend-label']", NS)]

    def ticks(self, axis):
        return [t.text for t in self.root.findall(f".//s:text[@class='tick {axis}']", NS)]


def is_125_step(d):
    m = d / 10 ** math.floor(math.log10(d) + 1e-9)
    return any(abs(m - c) < 1e-6 for c in (1, 2, 5, 10))


def check_nice_ticks(p, axis):
    v = [float(t) for t in p.ticks(axis)]
    ok = len(v) >= 3 and all(b > a for a, b in zip(v, v[1:]))
    steps = [b - a for a, b in zip(v, v[1:])]
    ok = ok and all(abs(s - steps[0]) < 1e-6 * abs(steps[0]) for s in steps) and is_125_step(steps[0])
    check(ok, f"{axis} ticks are evenly spaced 1-2-5 values: {v}")


def test_two_runs(tmp):
    random.seed(1)
    she, tr = [], []
    for s in range(1, 3001):
        base = 2 + 3 * math.exp(-s / 600)
        l = base + random.gauss(0, 0.15)
        if s % 37 == 0:
            l += 6  # spikes: the medians ignore them, a mean would not
        she.append((s, round(l, 6)))
        tr.append((s, round(base * 1.1 + random.gauss(0, 0.15), 6)))
    a, b = os.path.join(tmp, "she.csv"), os.path.join(tmp, "transformer.csv")
    write_csv(a, she)
    write_csv(b, tr)
    out = os.path.join(tmp, "curves.svg")
    rc, _, err = run(a, b, "-o", out)
    if not check(rc == 0 and os.path.exists(out), f"plot of two runs succeeds: {err}"):
        return
    p = Plot(out)
    r = p.root
    check(r.tag == "{http://www.w3.org/2000/svg}svg", "root is svg in the SVG namespace")
    check(r.get("width") and r.get("height") and r.get("viewBox"), "svg has width, height and viewBox")
    check(r.find("s:rect[@fill='white']", NS) is not None, "white background")
    check(p.window == 100, f"default window: 3000 steps / 30 = 100, got {p.window}")
    med = p.curves("median")
    check([m.get("data-label") for m in med] == ["she", "transformer"], "one median curve per run, labelled")
    check(p.legend() == ["she", "transformer"], f"legend labels: {p.legend()}")
    check(len({m.get("stroke") for m in med}) == 2, "distinct colours")
    exp_she = block_medians(she, 100)
    check(len(exp_she) == 30, "30 windows")
    check(p.matches(med[0], exp_she), "she's points are the medians of every 100 steps")
    check(p.matches(med[1], block_medians(tr, 100)), "transformer's points are the medians of every 100 steps")
    # The test itself would catch a mean, a trailing moving median, or windows aligned at 0.
    means = [(x, statistics.mean(l for s, l in she if (s - 1) // 100 == k)) for k, (x, _) in enumerate(exp_she)]
    check(not p.matches(med[0], means), "the check tells a median from a mean")
    shifted = block_medians([(s + 1, l) for s, l in she], 100)
    check(not p.matches(med[0], [(x - 1, y) for x, y in shifted]), "the check tells windows 1-100 from 0-99")
    # Raw curves: behind the medians, through real rows, keeping the extremes.
    raw = p.curves("raw")
    check([c.get("data-label") for c in raw] == ["she", "transformer"], "one raw curve per run")
    kids = list(p.g)
    check(kids.index(raw[-1]) < kids.index(med[0]), "raw curves drawn under the medians")
    pts = p.data_points(raw[0])
    rows = dict(she)
    on_rows = all(abs(x - round(x)) < 0.006 * p.dx and round(x) in rows for x, _ in pts)
    check(on_rows, "raw points are logged steps")
    check(len(pts) < len(she), "raw curve reduced per pixel column")
    top = max(she, key=lambda r: r[1])
    check(any(abs(x - top[0]) < 0.006 * p.dx and abs(y - top[1]) < 0.006 * p.dy for x, y in pts),
          "the highest raw loss is kept")
    check(abs(pts[0][0] - 1) < 0.006 * p.dx and abs(pts[-1][0] - 3000) < 0.006 * p.dx, "raw curve spans first to last step")
    check(float(p.g.get("data-ymax")) < max(l for _, l in she), "y range from the medians, spikes clipped")
    check(p.g.get("clip-path"), "curves clipped to the plot area")
    check_nice_ticks(p, "x")
    check_nice_ticks(p, "y")
    labels = [t.text for t in r.findall(".//s:text", NS)]
    check("step" in labels and "loss" in labels, "axis labels step and loss")
    check(r.find("s:text[@class='title']", NS).text == "Training loss", "default title")
    # --no-raw
    rc, _, err = run(a, b, "-o", out, "--no-raw")
    check(rc == 0 and not Plot(out).curves("raw") and len(Plot(out).curves("median")) == 2, "--no-raw")


def test_window_and_partial(tmp):
    # Steps with gaps so that windows hold odd and even counts, a partial last one.
    rows = [(s, round(10 - 0.1 * s + (0.5 if s % 3 == 0 else 0), 4)) for s in range(1, 53) if s % 5 != 0]
    f = os.path.join(tmp, "gaps.csv")
    write_csv(f, rows)
    out = os.path.join(tmp, "gaps.svg")
    rc, _, err = run(f, "--window", "7", "-o", out)
    if check(rc == 0, f"--window 7: {err}"):
        p = Plot(out)
        exp = block_medians(rows, 7)
        check(p.window == 7 and len(exp) == 8, "window 7, 8 windows with a partial last")
        check(p.matches(p.curves("median")[0], exp), "medians of odd and even counts, partial last window")
    rc, _, _ = run(f, "--window", "1000", "-o", out)
    if check(rc == 0, "a window longer than the run"):
        p = Plot(out)
        check(len(p.data_points(p.curves("median")[0])) == 1, "one median")
        check(p.root.find(".//s:circle[@class='median-point']", NS) is not None, "a single median drawn as a dot")
    rc, _, _ = run(f, "--window", "1", "-o", out)
    if check(rc == 0, "--window 1"):
        p = Plot(out)
        check(p.matches(p.curves("median")[0], [(float(s), l) for s, l in rows]), "window 1 draws every row")
        check(not p.curves("raw"), "window 1: no separate raw curve")


def test_default_window(tmp):
    f = os.path.join(tmp, "long.csv")
    random.seed(3)
    rows = [(s, round(2 + 4 * math.exp(-s / 9000) + random.gauss(0, 0.1), 5)) for s in range(1, 60001)]
    write_csv(f, rows)
    out = os.path.join(tmp, "long.svg")
    rc, _, err = run(f, "-o", out)
    if check(rc == 0, f"60000 rows: {err}"):
        p = Plot(out)
        check(p.window == 2000, f"60000 steps: the paper's window 2000, got {p.window}")
        check(p.matches(p.curves("median")[0], block_medians(rows, 2000)), "30 medians of 2000 steps")
        check(os.path.getsize(out) < 400_000, f"SVG stays small: {os.path.getsize(out)} bytes")
    rc, _, err = run(f, "--window", "1", "-o", out)
    if check(rc == 0, f"--window 1 on 60000 rows: {err}"):
        p = Plot(out)
        pts = p.data_points(p.curves("median")[0])
        check(len(pts) < 4 * p.width + 1 and os.path.getsize(out) < 400_000, "reduced per pixel column")
        lo, hi = min(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[1])
        near = lambda q, r: abs(q[0] - r[0]) < 0.006 * p.dx and abs(q[1] - r[1]) < 0.006 * p.dy
        check(any(near(q, lo) for q in pts) and any(near(q, hi) for q in pts), "extremes kept")
        check(near(pts[0], rows[0]) and near(pts[-1], rows[-1]), "first and last kept")
    g = os.path.join(tmp, "short.csv")
    write_csv(g, rows[:100])
    rc, _, _ = run(g, "-o", out)
    check(rc == 0 and Plot(out).window == 5, "100 steps: window 5 (nearest 1-2-5 value to 3.3 on a log scale)")


def test_log_y(tmp):
    rows = [(s, round(0.5 + 8 * math.exp(-s / 80), 5)) for s in range(1, 401)]
    f = os.path.join(tmp, "logy.csv")
    write_csv(f, rows)
    out = os.path.join(tmp, "logy.svg")
    rc, _, err = run(f, "--log-y", "--window", "10", "-o", out)
    if check(rc == 0, f"--log-y: {err}"):
        p = Plot(out)
        check(p.log_y, "data-log-y=1")
        check(p.matches(p.curves("median")[0], block_medians(rows, 10)), "log-y medians map back")
        ticks = [float(t) for t in p.ticks("y")]
        check(len(ticks) >= 3 and all(p.ymin * 0.999 <= t <= p.ymax * 1.001 for t in ticks), f"log ticks in range {ticks}")
    rc, _, err = run(os.path.join(HERE, "zero_loss.csv"), "--log-y", "-o", out)
    check(rc == 1 and "zero_loss.csv:3:" in err and "not positive" in err, f"--log-y with loss 0: {err}")


def test_labels_and_escaping(tmp):
    a, b = os.path.join(tmp, "run1.csv"), os.path.join(tmp, "x.log")
    rows = [(s, 3 - s / 100) for s in range(1, 101)]
    write_csv(a, rows)
    write_csv(b, rows)
    out = os.path.join(tmp, "esc.svg")
    label, title = 'a<&>"\'b', "Loss <of> A & B"
    rc, _, err = run(a, b, "--label", label, "--title", title, "-o", out)
    if check(rc == 0, f"labels: {err}"):
        p = Plot(out)  # well-formed despite the specials
        check(p.legend() == [label, "x.log"], f"label escaped and read back; default keeps non-.csv names: {p.legend()}")
        check([m.get("data-label") for m in p.curves("median")] == [label, "x.log"], "data-label escaped")
        check(p.root.find("s:text[@class='title']", NS).text == title, "title escaped")
        check("&lt;&amp;&gt;" in p.raw_text and "<&>" not in p.raw_text, "specials written as entities")
    rc, _, _ = run(a, "-o", out)
    check(rc == 0 and Plot(out).legend() == ["run1"], "default label: basename without .csv")
    # Bytes that are not UTF-8, and control characters, still give well-formed XML.
    p2 = subprocess.run([XFRUN.encode(), b"plot", a.encode(), b"--label", b"bad\xff\xfe\x01name",
                         b"--title", b"t\x02", b"-o", out.encode()], capture_output=True, timeout=60)
    if check(p2.returncode == 0, "label with invalid UTF-8"):
        lab = Plot(out).legend()[0]
        check(lab.startswith("bad") and lab.endswith("name") and "\ufffd" in lab, f"invalid bytes replaced: {lab!r}")
    rc, _, err = run(a, a, "--label", "x", "--label", "y", "--label", "z", "-o", out)
    check(rc == 2 and "3 --label options for 2 input files" in err, f"more labels than files: {err}")


def test_many_runs(tmp):
    files = []
    for k in range(10):
        f = os.path.join(tmp, f"r{k}.csv")
        write_csv(f, [(s, 3 + k * 0.1 - s / 1000) for s in range(1, 201)])
        files.append(f)
    out = os.path.join(tmp, "many.svg")
    rc, _, err = run(*files, "-o", out)
    if check(rc == 0, f"ten runs: {err}"):
        med = Plot(out).curves("median")
        check(len(med) == 10, "ten median curves")
        check(len({m.get("stroke") for m in med[:8]}) == 8, "eight distinct colours")
        check(all(m.get("stroke-dasharray") is None for m in med[:8]), "first eight solid")
        check(med[8].get("stroke") == med[0].get("stroke") and med[8].get("stroke-dasharray"), "ninth: dashed")
        check(med[9].get("stroke-dasharray") == med[8].get("stroke-dasharray"), "ninth and tenth dash alike")


def test_csv_variants(tmp):
    out = os.path.join(tmp, "v.svg")
    rc, _, err = run(os.path.join(HERE, "reordered.csv"), "--window", "1", "-o", out)
    if check(rc == 0, f"columns found by name, BOM, CRLF, blank lines: {err}"):
        check(Plot(out).matches(Plot(out).curves("median")[0], [(1, 3.0), (2, 2.0), (3, 1.0)]), "reordered values")
    rc, _, err = run(os.path.join(HERE, "nan_rows.csv"), "--window", "2", "-o", out)
    if check(rc == 0, f"non-finite rows skipped: {err}"):
        check("warning" in err and "nan_rows.csv:4:" in err and "2 rows" in err, f"one warning naming the first: {err}")
        # windows {1,2}: 4,3 -> 3.5; {3,4}: 2 -> 2; {5,6}: 1 -> 1
        check(Plot(out).matches(Plot(out).curves("median")[0], [(1.5, 3.5), (4, 2.0), (6, 1.0)]), "medians without them")
    rc, _, err = run(os.path.join(HERE, "resumed.csv"), "--window", "1", "-o", out)
    if check(rc == 0, f"resumed log: {err}"):
        check("warning" in err and "resumed.csv:7:" in err, f"warning at the step going back: {err}")
        exp = [(1, 9.0), (2, 8.0), (3, 4.0), (4, 3.5), (5, 3.0), (6, 2.5)]
        check(Plot(out).matches(Plot(out).curves("median")[0], exp), "later rows replace earlier ones")
    one = os.path.join(tmp, "one.csv")
    write_csv(one, [(1, 2.5)])
    rc, _, err = run(one, "-o", out)
    check(rc == 0 and len(Plot(out).data_points(Plot(out).curves("median")[0])) == 1, f"a single row: {err}")
    big = os.path.join(tmp, "big.csv")
    write_csv(big, [(s, 1e308) for s in range(1, 50)] + [(50, -1e308)])
    rc, _, err = run(big, "-o", out, "--window", "1")
    check(rc == 0 and Plot(out).curves("median"), f"extreme losses: {err}")


def test_errors(tmp):
    out = os.path.join(tmp, "err.svg")
    good = os.path.join(HERE, "nan_rows.csv")
    usage = [
        (["-o", out], "no input files"),
        ([good], "-o FILE is required"),
        ([good, "-o"], "-o needs a value"),
        ([good, "-o", out, "--window", "0"], "--window 0: must be an integer >= 1"),
        ([good, "-o", out, "--window=x"], "--window x: must be an integer >= 1"),
        ([good, "-o", out, "--frobnicate"], "unknown option --frobnicate"),
        ([good, "-o", out, "--windw", "5"], "unknown option --windw (did you mean --window?)"),
        ([good, "-o", out, "--log-y=1"], "--log-y takes no value"),
    ]
    for args, msg in usage:
        if os.path.exists(out):
            os.remove(out)
        rc, _, err = run(*args)
        lines = err.splitlines()
        ok = (rc == 2 and len(lines) == 2 and lines[0].startswith("xfrun plot: error: ") and msg in lines[0]
              and lines[1] == "(see xfrun plot --help)")
        check(ok, f"{args}: a usage error: exit 2, {msg!r} and (see xfrun plot --help); got {rc}: {err!r}")
        check(not os.path.exists(out), f"{args}: no output written")
    cases = [
        ([os.path.join(tmp, "missing.csv"), "-o", out], "cannot read " + os.path.join(tmp, "missing.csv")),
        ([tmp, "-o", out], "cannot read " + tmp),
        ([os.path.join(HERE, "empty.csv"), "-o", out], "empty.csv: empty file"),
        ([os.path.join(HERE, "no_loss_column.csv"), "-o", out], "no_loss_column.csv:1: the header has no 'loss'"),
        ([os.path.join(HERE, "header_only.csv"), "-o", out], "header_only.csv: no rows"),
        ([os.path.join(HERE, "bad_fields.csv"), "-o", out], "bad_fields.csv:4: 3 fields where the header has 4"),
        ([os.path.join(HERE, "bad_step.csv"), "-o", out], "bad_step.csv:5: step '4.5' is not an integer"),
        ([os.path.join(HERE, "bad_loss.csv"), "-o", out], "bad_loss.csv:6: loss 'abc' is not a number"),
        ([os.path.join(HERE, "all_nan.csv"), "-o", out], "all_nan.csv: no row with a finite loss"),
        ([good, os.path.join(HERE, "bad_loss.csv"), "-o", out], "bad_loss.csv:6:"),
        ([good, "-o", os.path.join(tmp, "no", "such", "dir.svg")], "cannot write"),
    ]
    for args, msg in cases:
        if os.path.exists(out):
            os.remove(out)
        rc, _, err = run(*args)
        lines = [l for l in err.splitlines() if not l.startswith("xfrun: warning:")]
        ok = rc == 1 and len(lines) == 1 and lines[0].startswith("xfrun: error: ") and msg in lines[0]
        check(ok, f"{args}: exit 1 and one line with {msg!r}; got {rc}: {err!r}")
        check("Traceback" not in err, "no traceback")
        check(not os.path.exists(out), f"{args}: no output written")
    rc, stdout, _ = run("--help")
    check(rc == 0 and stdout.startswith("usage: xfrun plot"), "--help")
    last = stdout.rstrip("\n").splitlines()[-1] if stdout.strip() else ""
    check("2 a usage error" in last, f"--help ends with the exit statuses: {last!r}")


def test_option_forms(tmp):
    """--opt=value is --opt value and -oFILE is -o FILE; "--" ends the options;
    success says on stderr which file was written."""
    f = os.path.join(tmp, "forms.csv")
    write_csv(f, [(s, 4 - s / 100) for s in range(1, 101)])
    a, b = os.path.join(tmp, "forms-a.svg"), os.path.join(tmp, "forms-b.svg")
    rc, _, err = run(f, "--window", "7", "--title", "T", "--label", "L", "-o", a)
    check(rc == 0 and err == f"xfrun: wrote {a} (1 run)\n", f"success: one line naming the file: {err!r}")
    rc, _, err = run("--window=7", "--title=T", "--label=L", f"-o{b}", "--", f)
    if check(rc == 0, f"--window=7 --title=T --label=L -oFILE -- FILE: {err}"):
        check(open(a, "rb").read() == open(b, "rb").read(), "the same SVG as with separate values")
    rc, _, err = run(f, f, "-o", a)
    check(rc == 0 and err == f"xfrun: wrote {a} (2 runs)\n", f"two runs: {err!r}")


def test_heldout(tmp):
    """The log of xfrun train --eval-every: held-out losses on some rows, drawn
    beside the training curve as one polyline and a circle per point."""
    path = os.path.join(tmp, "ev.csv")
    rows, evals = [], {}
    with open(path, "w") as f:
        f.write("step,loss,tokens_per_s,elapsed_s,lr,grad_norm,eval_loss\n")
        for s in range(1, 101):
            l = 6 - 2 * s / 100 + 0.1 * math.sin(s)
            rows.append((s, l))
            ev = ""
            if s % 25 == 0:
                evals[s] = 5.5 - 1.5 * s / 100
                ev = f"{evals[s]}"
            f.write(f"{s},{l},1000.0,{s * 0.01:.3f},0.001,1.5,{ev}\n")
    out = os.path.join(tmp, "ev.svg")
    rc, _, err = run(path, "-o", out, "--window", "10")
    if not check(rc == 0, f"a log with held-out losses plots: {err}"):
        return
    p = Plot(out)
    held = p.curves("heldout")
    check(len(held) == 1 and p.matches(held[0], sorted(evals.items())),
          f"one heldout polyline through the 4 held-out losses: {[h.get('points') for h in held]}")
    check(len(p.g.findall("s:circle[@class='heldout-point']", NS)) == 4, "a circle per held-out loss")
    check(p.legend() == ["ev", "held-out loss"], f"legend: {p.legend()}")
    check(p.ymax >= max(evals.values()) and p.ymin <= min(evals.values()), "the loss axis covers the held-out losses")
    check(len(p.curves("median")) == 1 and p.matches(p.curves("median")[0], block_medians(rows, 10)),
          "the training curve is unchanged beside them")


XFRUN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit("usage: test_plot.py XFRUN")
with tempfile.TemporaryDirectory() as tmp:
    for t in (test_two_runs, test_window_and_partial, test_default_window, test_log_y, test_labels_and_escaping,
              test_many_runs, test_csv_variants, test_errors, test_option_forms, test_heldout):
        try:
            t(tmp)
        except Exception as e:  # e.g. an SVG that is not well-formed
            check(False, f"{t.__name__}: {type(e).__name__}: {e}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
