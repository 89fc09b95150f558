#!/usr/bin/env python3
"""xfrun's tokenizer against the real Hugging Face `tokenizers` library.

    .venv/bin/python tests/tokenizer/test_hf_interop.py build/xfrun

1. xfrun trains on data/children; tokenizers loads the tokenizer.json and
   encodes the samples to the same ids; both decode back to the text. With
   --vocab 256 (the byte tokenizer) the ids are the bytes.
2. tokenizers trains a byte-level BPE (with the special token <|endoftext|>);
   xfrun loads it and encodes the samples (and text with the special token)
   to the same ids. The same for tokenizers' ByteLevelBPETokenizer.
3. Variants of the file xfrun wrote (add_prefix_space, use_regex false,
   ignore_merges, unk_token with and without fuse_unk, added tokens with
   lstrip/rstrip/normalized) give the same ids in both.
4. The pre-tokenizer (xfrun tokenize --split) cuts the same pieces as
   tokenizers' ByteLevel on all assigned Unicode code points in three contexts.
5. The command line (driver/cli.h): --vocab=N is --vocab N, -tFILE is -t FILE,
   -oFILE is -o FILE; usage errors (no or two modes, a misspelt option with
   "did you mean", a bad or missing value) exit 2 with "(see xfrun tokenize
   --help)"; errors while working (an unreadable file) exit 1 in one line.

Fails, saying so, when tokenizers cannot be imported (scripts/setup-pydeps
installs it from PyPI). Ends with "N passed, M failed".
"""
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import tokenizers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers.implementations import ByteLevelBPETokenizer
except ImportError as e:
    print(f"test_hf_interop: FAIL: cannot import Hugging Face tokenizers ({e}); "
          "run scripts/setup-pydeps (it installs them from PyPI)", file=sys.stderr)
    print("0 passed, 1 failed")
    sys.exit(1)

XFRUN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit("usage: test_hf_interop.py XFRUN")
BOOKS = sorted(glob.glob("data/children/*.txt"))
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr)
    return ok


def xfrun(*args, data=b""):
    r = subprocess.run([XFRUN, "tokenize", *args], input=data, capture_output=True)
    if r.returncode:
        raise RuntimeError(f"xfrun tokenize {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def xf_encode(path, text):
    return [int(x) for x in xfrun("--encode", "-t", path, data=text.encode()).split()]


def xf_decode(path, ids):
    return xfrun("--decode", "-t", path, data=" ".join(map(str, ids)).encode())


def samples():
    out = [
        "",
        " ",
        "\n",
        "   ",
        "Hello, world! This is a test.",
        "I'm sure you'll see it's theirs; they're here, we've gone, he'd know. DON'T 'quote' ''s",
        "1 12 123 1234 12345 3.14159 1,000,000 2024-01-01 0x1F \u0663\u0664 \u00bd \u216b",
        "a  b   c\n\n\nd \n \n e\t\tf \t g  ",
        "\tindented\n\t\ttwice\r\nwindows\rline  ",
        "caf\u00e9 na\u00efve \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u65e5\u672c\u8a9e "
        "\u041f\u0440\u0438\u0432\u0435\u0442 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
        "\u0939\u093f\u0928\u094d\u0926\u0940",
        "e\u0301 a\u0308 combining marks",
        "\U0001F44D\U0001F3FD family \U0001F468\u200d\U0001F469\u200d\U0001F467 flag \U0001F1EB\U0001F1F7 \u2764\ufe0f",
        "ideographic\u3000space\u00a0nbsp\u2028line\u2029para\u0085nel",
        "   leading and trailing   ",
    ]
    rng = random.Random(1)
    for path in BOOKS:  # prose: chunks of each book
        text = open(path, encoding="utf-8").read()
        for k in range(4):
            start = rng.randrange(len(text) - 3000)
            out.append(text[start:start + rng.randrange(200, 3000)])
    pools = [range(0x20, 0x7F), range(0xA0, 0x800), range(0x3000, 0x3100), range(0x1F300, 0x1F700)]
    for _ in range(40):  # random code points, valid UTF-8
        n = rng.randrange(1, 60)
        out.append("".join(chr(rng.choice(rng.choice(pools))) if rng.random() < 0.8 else
                           rng.choice(" \n\t'sx1") for _ in range(n)))
    return out


def compare(name, path, hf, texts, decode=True):
    """Ids of xfrun and tokenizers on every text; both decode back to the text."""
    ok = 0
    for text in texts:
        want = hf.encode(text, add_special_tokens=False).ids
        got = xf_encode(path, text)
        if not check(got == want, f"{name}: ids of {text[:60]!r}: xfrun {got[:12]}... tokenizers {want[:12]}..."):
            continue
        if decode:
            back = xf_decode(path, got)
            check(back == text.encode(), f"{name}: xfrun decode of {text[:60]!r}")
            check(hf.decode(want, skip_special_tokens=False) == text, f"{name}: tokenizers decode of {text[:60]!r}")
        ok += 1
    print(f"{name}: {ok}/{len(texts)} texts give the same ids")


def hf_trained(tmp):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train(BOOKS, trainer)
    path = os.path.join(tmp, "hf.json")
    tok.save(path)
    return path, tok


def variants(base, tmp):
    """The tokenizer.json xfrun wrote with Hugging Face options switched on."""
    out = []
    j = json.load(open(base))
    v = json.loads(json.dumps(j))
    v["pre_tokenizer"]["add_prefix_space"] = True
    out.append(("add_prefix_space", v))
    v = json.loads(json.dumps(j))
    v["model"]["ignore_merges"] = True
    out.append(("ignore_merges", v))
    v = json.loads(json.dumps(j))
    v["pre_tokenizer"]["use_regex"] = False
    out.append(("use_regex_false", v))
    for fuse in (False, True):  # byte 0x01 (\u0101) unknown: its id goes to <unk>
        v = json.loads(json.dumps(j))
        m = v["model"]
        m["vocab"]["<unk>"] = m["vocab"].pop("\u0101")
        m["merges"] = [x for x in m["merges"] if "\u0101" not in x[0] + x[1]]
        m["unk_token"], m["fuse_unk"] = "<unk>", fuse
        out.append((f"unk_fuse_{str(fuse).lower()}", v))
    v = json.loads(json.dumps(j))
    n = len(v["model"]["vocab"])
    v["added_tokens"] = [
        {"id": n, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": n + 1, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": True,
         "normalized": False, "special": True},
        {"id": n + 2, "content": "Alice", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"id": n + 3, "content": "<|end", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
    ]
    out.append(("added_tokens", v))
    paths = []
    for name, v in out:
        p = os.path.join(tmp, f"variant-{name}.json")
        json.dump(v, open(p, "w"), ensure_ascii=False)
        paths.append((name, p))
    return paths


def split_sweep():
    """Piece starts of xfrun --split and of tokenizers' ByteLevel pre-tokenizer
    on code points after a letter, a digit and punctuation: the pieces tell
    \\p{L}, \\p{N}, \\s and the rest apart. Every code point of the planes
    Unicode 16 assigns characters in (0-3, 14), every 61st of the others."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    cps = [c for c in range(0x110000)
           if not 0xD800 <= c <= 0xDFFF and (c >> 16 in (0, 1, 2, 3, 14) or c % 61 == 0)]
    step, ok = 1 << 17, True
    for lo in range(0, len(cps), step):
        text = "".join(f"a{c}1{c}!{c}" for c in map(chr, cps[lo:lo + step]))
        # a piece's byte-level string has one character per byte
        want, pos = [], 0
        for piece, _ in pre.pre_tokenize_str(text):
            want.append(pos)
            pos += len(piece)
        got = [int(x) for x in xfrun("--split", data=text.encode()).split()]
        last = cps[min(lo + step, len(cps)) - 1]
        if not check(got == want, f"--split on U+{cps[lo]:04X}..U+{last:04X}"):
            raw = text.encode()
            at = next((min(g, w) for g, w in zip(got, want) if g != w), min(len(got), len(want)))
            print(f"  first difference near byte {at}: {raw[max(at - 8, 0):at + 8]!r}", file=sys.stderr)
            ok = False
    print(f"pre-tokenizer: {len(cps)} code points in 3 contexts, {'the same' if ok else 'DIFFERENT'} pieces")


def tokenize(*args, data=b""):
    """(exit status, stdout, stderr lines) of xfrun tokenize."""
    r = subprocess.run([XFRUN, "tokenize", *args], input=data, capture_output=True)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace").splitlines()


def cli_checks(tmp):
    a, b = os.path.join(tmp, "cli-a.json"), os.path.join(tmp, "cli-b.json")
    xfrun("--train", "--vocab", "300", BOOKS[0], "-o", a)
    xfrun("--train", "--vocab=300", "-o" + b, "--", BOOKS[0])
    check(open(a, "rb").read() == open(b, "rb").read(),
          "--vocab=300 -oFILE -- FILE: the same tokenizer as --vocab 300 -o FILE")
    text = b"Once upon a time, a cat sat on the mat."
    check(xfrun("--encode", "-t", a, data=text) == xfrun("--encode", "-t" + b, data=text), "-tFILE is -t FILE")
    usage = [
        ((), "give --train, --encode, --decode or --split"),
        (("--train", "--encode"), "give one of --train, --encode, --decode, --split (got --train and --encode)"),
        (("--encod", "-t", a), "unknown option --encod (did you mean --encode?)"),
        (("--train", "--vocab=12", BOOKS[0], "-o", b), "--vocab 12: expected a whole number from 256"),
        (("--train", "--vocab"), "--vocab needs a value"),
        (("--train", "--vocab", "300", BOOKS[0]), "--train needs -o tokenizer.json"),
        (("--encode",), "--encode needs -t tokenizer.json"),
        (("--split=yes",), "--split takes no value"),
    ]
    for args, msg in usage:
        rc, _, err = tokenize(*args)
        check(rc == 2 and len(err) == 2 and err[0].startswith("xfrun tokenize: error: ") and msg in err[0] and
              err[1] == "(see xfrun tokenize --help)", f"{args}: a usage error with {msg!r}: exit {rc}: {err}")
    rc, _, err = tokenize("--encode", "-t", os.path.join(tmp, "missing.json"))
    check(rc == 1 and len(err) == 1 and err[0].startswith("xfrun: error: ") and "missing.json" in err[0],
          f"a missing tokenizer: exit 1, one line: exit {rc}: {err}")
    rc, out, _ = tokenize("--help")
    lines = out.decode().rstrip("\n").splitlines()
    check(rc == 0 and lines[0].startswith("usage: xfrun tokenize") and "2 a usage error" in lines[-1],
          f"--help: usage first, the exit statuses last: {lines[-1:]}")


def main():
    print(f"tokenizers {tokenizers.__version__}, xfrun {XFRUN}")
    texts = samples()
    with tempfile.TemporaryDirectory() as tmp:
        # 1. trained by xfrun, loaded by tokenizers
        mine = os.path.join(tmp, "xf.json")
        print(xfrun("--train", "--vocab", "1000", *BOOKS, "-o", mine).decode().strip())
        compare("xfrun-trained", mine, Tokenizer.from_file(mine), texts)
        # vocab 256 is the byte tokenizer: id = byte
        raw = os.path.join(tmp, "bytes.json")
        xfrun("--train", "--vocab", "256", BOOKS[0], "-o", raw)
        hf = Tokenizer.from_file(raw)
        for t in texts:
            check(hf.encode(t).ids == list(t.encode()), f"bytes: ids of {t[:40]!r} are its bytes")
        compare("bytes", raw, hf, texts)

        # 2. trained by tokenizers, loaded by xfrun
        path, hf = hf_trained(tmp)
        special = ["<|endoftext|>", "one<|endoftext|>two", "<|endoftext|><|endoftext|> x <|endoftext",
                   "Alice<|endoftext|>\nThe end. <|endoftext|>"]
        compare("tokenizers-trained", path, Tokenizer.from_file(path), texts + special)
        bl = ByteLevelBPETokenizer()
        bl.train(BOOKS, vocab_size=800, special_tokens=["<|endoftext|>"], show_progress=False)
        wrapper = os.path.join(tmp, "wrapper.json")
        bl.save(wrapper)
        compare("ByteLevelBPETokenizer", wrapper, Tokenizer.from_file(wrapper), texts + special)

        # 3. options of the format
        extra = ["Alice <mask> and   <mask>  the <|endoftext|>Alice's <|end x", "<mask>", " <mask> ", "Alice",
                 "\x01", "a\x01\x01b \x01\x01\x01 \x01x\x01"]
        for name, p in variants(mine, tmp):
            # add_prefix_space adds a space the decoder keeps; stripped spaces are gone
            compare(f"variant {name}", p, Tokenizer.from_file(p), texts + extra, decode=False)

        # 5. the command line
        cli_checks(tmp)

    # 4. the pre-tokenizer on all of Unicode
    split_sweep()
    print(f"{passed} passed, {failed} failed")
    return failed != 0


if __name__ == "__main__":
    sys.exit(main())
