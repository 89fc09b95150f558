#!/usr/bin/env bash
# xfrun's command line, every subcommand (driver/cli.h):
#   - --version, xfrun --help, and COMMAND --help with that command's options only;
#   - --opt value and --opt=value give the same result;
#   - exit status 0 done, 1 an error while working, 2 a usage error (with
#     "(see xfrun COMMAND --help)");
#   - an unknown command or option names the closest valid one.
# Usage (from the repo root): tests/runtime/run_cli.sh path/to/xfc path/to/xfrun
set -u
xfc=$1 xfrun=$2
. tests/lib.sh
export XF_CACHE_DIR=$tmp/cache
python3 -c "import sys; sys.stdout.write('the cat sat on the mat. the dog ran to the tree. ' * 300)" > "$tmp/text.txt"
"$xfc" -o "$tmp/m.so" examples/she.xf -D layers=1 -D d=16 -D context=16 -D ffn=32 -D vocab=256 2> /dev/null || bad "compile"
base=(--data "$tmp/text.txt" --tokenizer bytes --batch 2 --seq 16 --threads 1)

# --version and the help
out=$("$xfrun" --version) && grep -q "^xfrun 0.1.0 (commit [0-9a-f+unknow]*, [A-Za-z]* build)$" <<<"$out" &&
  grep -q "^GEMM providers: " <<<"$out" && grep -q "^CUDA: " <<<"$out" && ok "--version: $(tr '\n' ';' <<<"$out")" ||
  bad "--version: $out"
out=$("$xfrun" --help) && for c in train eval sample tokenize plot compare export info; do grep -q "^  $c " <<<"$out" || false; done &&
  ok "xfrun --help lists the eight commands" || bad "xfrun --help: $out"
for c in train eval sample tokenize plot compare export info; do
  out=$("$xfrun" $c --help 2>&1)
  rc=$?
  [ $rc = 0 ] && grep -q "^usage: xfrun $c" <<<"$out" && ok "xfrun $c --help: exit 0, $(head -1 <<<"$out")" ||
    bad "xfrun $c --help (exit $rc): $(head -2 <<<"$out")"
done
own() {  # own CMD OPTION yes|no: whether CMD's help lists OPTION
  local has=no
  "$xfrun" $1 --help | grep -q -- "  $2 " && has=yes
  [ $has = "$3" ] && ok "xfrun $1 --help $([ $3 = yes ] && echo lists || echo omits) $2" || bad "xfrun $1 --help and $2"
}
own train --lr-schedule yes
own train --top-p no
own eval --lr-schedule no
own eval --checkpoint yes
own sample --top-p yes
own sample --data no

# both flag styles, the same result
"$xfrun" train "$tmp/m.so" "${base[@]}" --steps 3 --lr 0.002 --log "$tmp/a.csv" > /dev/null 2>&1
"$xfrun" train "$tmp/m.so" --data="$tmp/text.txt" --tokenizer=bytes --batch=2 --seq=16 --threads=1 --steps=3 --lr=0.002 \
  --log="$tmp/b.csv" --save="$tmp/b.st" > /dev/null 2>&1
cmp -s <(cut -d, -f1,2 "$tmp/a.csv") <(cut -d, -f1,2 "$tmp/b.csv") && [ "$(wc -l < "$tmp/a.csv")" = 4 ] &&
  ok "train: --opt=value and --opt value, the same losses" || bad "train: the two styles differ"
e1=$("$xfrun" eval "$tmp/m.so" --checkpoint "$tmp/b.st" "${base[@]}" --eval-batches 2 2> /dev/null)
e2=$("$xfrun" eval "$tmp/m.so" --checkpoint="$tmp/b.st" --data="$tmp/text.txt" --batch=2 --seq=16 --threads=1 --eval-batches=2 2> /dev/null)
[ -n "$e1" ] && [ "$e1" = "$e2" ] && ok "eval: the same in both styles: $e1" || bad "eval: '$e1' vs '$e2'"
s1=$("$xfrun" sample "$tmp/m.so" --checkpoint "$tmp/b.st" --prompt "the" --max-tokens 8 --seed 4 2> /dev/null)
s2=$("$xfrun" sample "$tmp/m.so" --checkpoint="$tmp/b.st" --prompt=the --max-tokens=8 --seed=4 2> /dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "sample: the same text in both styles" || bad "sample: '$s1' vs '$s2'"
"$xfrun" tokenize --train --vocab 260 -o "$tmp/t1.json" "$tmp/text.txt" > /dev/null 2>&1
"$xfrun" tokenize --train --vocab=260 -o"$tmp/t2.json" "$tmp/text.txt" > /dev/null 2>&1
[ -s "$tmp/t1.json" ] && cmp -s "$tmp/t1.json" "$tmp/t2.json" && ok "tokenize: --vocab=260 -oFILE and --vocab 260 -o FILE, the same tokenizer" ||
  bad "tokenize: the two styles differ"
"$xfrun" plot "$tmp/a.csv" --window 2 --title run -o "$tmp/p1.svg" 2> /dev/null
"$xfrun" plot "$tmp/a.csv" --window=2 --title=run -o "$tmp/p2.svg" 2> /dev/null
[ -s "$tmp/p1.svg" ] && cmp -s "$tmp/p1.svg" "$tmp/p2.svg" && ok "plot: the same SVG in both styles" || bad "plot: the two styles differ"
"$xfrun" export "$tmp/b.st" -o "$tmp/w1.safetensors" --dtype bf16 2> /dev/null
"$xfrun" export "$tmp/b.st" -o"$tmp/w2.safetensors" --dtype=bf16 2> /dev/null
[ -s "$tmp/w1.safetensors" ] && cmp -s "$tmp/w1.safetensors" "$tmp/w2.safetensors" && ok "export: --dtype=bf16 -oFILE and --dtype bf16 -o FILE, the same file" ||
  bad "export: the two styles differ"
i1=$("$xfrun" info --gemm openblas --threads 1 2>&1 | grep -v "GFLOP")
i2=$("$xfrun" info --gemm=openblas --threads=1 2>&1 | grep -v "GFLOP")
[ -n "$i1" ] && [ "$i1" = "$i2" ] && ok "info: the same in both styles" || bad "info: '$i1' vs '$i2'"
for style in "--steps 3 --seconds 2" "--steps=3 --seconds=2"; do
  # shellcheck disable=SC2086
  expect_usage "compare $style: both parsed, then refused" "give one budget" "$xfrun" compare examples/she.xf $style -o "$tmp/c"
done

# exit statuses: 1 while working, 2 for usage
expect_error "train: a missing model.so, exit 1" "cannot open model .*nope.so" "$xfrun" train "$tmp/nope.so" "${base[@]}"
expect_error "export: a missing checkpoint, exit 1" "nope.st" "$xfrun" export "$tmp/nope.st" -o "$tmp/x.safetensors"
out=$("$xfrun" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "^usage: xfrun COMMAND" <<<"$out" && ok "xfrun alone: exit 2 and the usage" || bad "xfrun alone: exit $rc"
expect_usage "train without a model.so" "no model.so" "$xfrun" train
expect_usage "a flag given a value" "--no-incremental takes no value" "$xfrun" sample "$tmp/m.so" --checkpoint "$tmp/b.st" --no-incremental=1
expect_usage "an option of another command" "--save is an option of xfrun train, not of xfrun eval" "$xfrun" eval "$tmp/m.so" --save x.st
expect_usage "a value missing at the end" "--steps needs a value" "$xfrun" train "$tmp/m.so" --steps

# suggestions
expect_usage "a misspelt command" "unknown command 'trian' \(did you mean 'train'\?\)" "$xfrun" trian "$tmp/m.so"
expect_usage "train --stpes" "unknown option --stpes \(did you mean --steps\?\)" "$xfrun" train "$tmp/m.so" --stpes 3
expect_usage "sample --temprature" "did you mean --temperature\?" "$xfrun" sample "$tmp/m.so" --temprature 1
expect_usage "eval --chekpoint" "did you mean --checkpoint\?" "$xfrun" eval "$tmp/m.so" --chekpoint x
expect_usage "tokenize --vocb" "did you mean --vocab\?" "$xfrun" tokenize --train --vocb 300 -o x.json "$tmp/text.txt"
expect_usage "plot --titel" "did you mean --title\?" "$xfrun" plot "$tmp/a.csv" --titel x -o x.svg
expect_usage "compare --stpes" "did you mean --steps\?" "$xfrun" compare examples/she.xf --stpes 3
expect_usage "export --dtyp" "did you mean --dtype\?" "$xfrun" export "$tmp/b.st" -o x.safetensors --dtyp bf16
expect_usage "info --gemn" "did you mean --gemm\?" "$xfrun" info --gemn onednn
finish
