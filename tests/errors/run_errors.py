#!/usr/bin/env python3
"""Bad-input tests: every tests/errors/*.xf must make xfc fail cleanly.

Each file states what it expects in header comments:
    # expect: L:C: message fragment          (location in this file)
    # expect: stdlib/nn.xf:L:C: fragment     (location in another file)
    # expect: <command line>: fragment       (no source location)
    # args: -D layers=0                      (optional extra xfc arguments)
The test passes when xfc exits with status 1, the first stderr line is
`<file>:L:C: error: ...` containing the fragment, the next two lines show the
source line and a caret under column C, and no sanitizer or crash report
appears anywhere in the output.
"""
import os, re, shlex, subprocess, sys

def check(xfc, path):
    text = open(path, encoding="utf-8", errors="replace").read()
    m = re.search(r"^# expect: (.*)$", text, re.M)
    if not m:
        return "no '# expect:' line"
    expect = m.group(1).strip()
    a = re.search(r"^# args: (.*)$", text, re.M)
    args = shlex.split(a.group(1)) if a else []
    r = subprocess.run([xfc] + args + [path], capture_output=True, text=True, timeout=60,
                       errors="replace")
    err = r.stderr
    if r.returncode != 1:
        return f"exit status {r.returncode}, want 1\n{err}"
    if re.search(r"Sanitizer|runtime error|Segmentation|Aborted|Assertion .* failed", err):
        return f"crash or sanitizer report\n{err}"
    lines = err.splitlines()
    if not lines:
        return "no message"
    if expect.startswith("<command line>:"):
        frag = expect[len("<command line>:"):].strip()
        if not lines[0].startswith("<command line>: error: ") or frag not in lines[0]:
            return f"want '<command line>: error: ...{frag}...', got:\n{err}"
        return None
    lm = re.match(r"(?:(.+?):)?(\d+):(\d+): (.*)$", expect)
    if not lm:
        return f"bad expect line: {expect}"
    file = lm.group(1) or path
    line, col, frag = int(lm.group(2)), int(lm.group(3)), lm.group(4)
    want = f"{file}:{line}:{col}: error: "
    if not lines[0].startswith(want) or frag not in lines[0]:
        return f"want '{want}...{frag}...', got:\n{err}"
    if len(lines) < 3 or not lines[1].startswith("  ") or "^" not in lines[2]:
        return f"no source line and caret:\n{err}"
    src = lines[1][2:]
    caret = lines[2][2:]
    if caret.index("^") != col - 1:
        return f"caret at column {caret.index('^') + 1}, want {col}:\n{err}"
    if file == path:
        want_src = text.split("\n")[line - 1]
        if src != want_src.replace("\0", " "):
            return f"source line shown is {src!r}, want {want_src!r}"
    return None

def main():
    xfc = os.path.abspath(sys.argv[1])
    folder = os.path.dirname(os.path.abspath(__file__))
    os.chdir(os.path.dirname(os.path.dirname(folder)))  # repo root: paths as users give them
    files = sorted(f for f in os.listdir(folder) if f.endswith(".xf"))
    failed = 0
    for f in files:
        path = os.path.join("tests", "errors", f)
        why = check(xfc, path)
        if why:
            failed += 1
            print(f"FAIL {path}: {why}")
        else:
            print(f"ok   {path}")
    print(f"{len(files) - failed} passed, {failed} failed")
    if len(files) < 40:
        print(f"only {len(files)} bad-input tests; want at least 40")
        return 1
    return 1 if failed else 0

sys.exit(main())
