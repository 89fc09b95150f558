#!/usr/bin/env python3
"""Every path, xfc/xfrun flag and xfrun subcommand that README.md and
docs/*.md name in backquotes must exist, so the docs cannot point at what is
gone. Checked:
  - paths: a backquoted word starting with a folder of the repository
    (codegen/, docs/, tests/, ...), a glob allowed, a trailing :line or
    :line-line dropped, generated folders (out/, build*/, .venv/) skipped;
  - flags: every --flag in a backquoted command that starts with xfc or
    xfrun is in that program's help (xfc --help; xfrun --help and the help of
    its subcommands with one);
  - subcommands: the word after xfrun in such a command is one of xfrun's.
Usage: docs_refs.py XFC XFRUN [ROOT]   (ROOT: the tree to check, default .)
Prints one line per stale reference (file:line: what) and exits 1 if any."""
import glob, os, re, subprocess, sys

xfc, xfrun = sys.argv[1], sys.argv[2]
root = sys.argv[3] if len(sys.argv) > 3 else "."
TOP = ("codegen/", "passes/", "runtime/", "driver/", "frontend/", "ir/", "interp/", "stdlib/", "examples/",
       "tests/", "scripts/", "bench/", "docs/", "data/", "experiments/", "fuzz/", ".ci/")
GENERATED = ("out/", "build", ".venv/", "bench/.venv", "experiments/out")
SUBCOMMANDS = ("train", "eval", "sample", "tokenize", "plot", "compare", "export", "info")


def helptext(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.stdout + r.stderr


xfc_help = helptext(xfc, "--help")
xfrun_help = helptext(xfrun, "--help") + "".join(helptext(xfrun, s, "--help") for s in ("train", "eval", "sample", "tokenize", "plot", "compare", "export"))
xfrun_help += helptext(xfrun, "info", "--help")
known = {"xfc": set(re.findall(r"--[a-z][a-z0-9-]*", xfc_help)), "xfrun": set(re.findall(r"--[a-z][a-z0-9-]*", xfrun_help))}

docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
bad = 0
for doc in docs:
    rel = os.path.relpath(doc, root)
    for ln, line in enumerate(open(doc, encoding="utf-8"), 1):
        spans = re.findall(r"`([^`]+)`", line)
        if line.startswith("    "):  # an indented command block of the README
            spans.append(line.strip())
        for span in spans:
            for word in span.split():
                w = word.rstrip(".,;:)").lstrip("(")
                w = re.sub(r":\d+([-:]\d+)?$", "", w)    # file:line, file:line-line, file:line:col
                w = re.sub(r"(\.xf):[a-z_]+=.*$", r"\1", w)  # xfrun compare's A.xf:name=value
                if not w.startswith(TOP) or w.startswith(GENERATED) or "<" in w or "$" in w:
                    continue
                if "..." in w or w.endswith("NN"):
                    continue
                if not glob.glob(os.path.join(root, w)):
                    print(f"{rel}:{ln}: no such path: {w}")
                    bad += 1
            words = span.split()
            for i, prog in enumerate(words):
                p = os.path.basename(prog)
                if p not in ("xfc", "xfrun") or (i and words[i - 1] not in ("|", "&&", ";", "mpirun") and
                                                 not words[i - 1].startswith("-np") and not words[i - 1].isdigit()):
                    continue
                rest = words[i + 1:]
                if p == "xfrun" and rest and re.fullmatch(r"[a-z]+", rest[0]) and rest[0] not in SUBCOMMANDS:
                    print(f"{rel}:{ln}: xfrun has no subcommand {rest[0]}")
                    bad += 1
                for r in rest:
                    if r in ("|", "&&", ";", ">"):
                        break
                    f = re.match(r"(--[a-z][a-z0-9-]*)", r)
                    if f and f.group(1) not in known[p]:
                        print(f"{rel}:{ln}: {p} has no option {f.group(1)}")
                        bad += 1
print(f"docs_refs: {len(docs)} files, {bad} stale references")
sys.exit(1 if bad else 0)
