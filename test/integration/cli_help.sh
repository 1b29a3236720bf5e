#!/usr/bin/env bash
# --help and typos everywhere (issue 25 item 4): every subcommand answers -h
# and --help with its usage on stdout, exit 0, nothing on stderr; a misspelt
# subcommand or option is one line with a did-you-mean, exit 2, and starts
# nothing.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
DTRUN=$PWD/bin/dtrun
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for sub in "" generate eval export classify inspect tokenize plot rdzv worker; do
  for h in --help -h; do
    # shellcheck disable=SC2086
    (cd "$tmp" && "$DTRUN" $sub $h >"$tmp/out" 2>"$tmp/err"); rc=$?
    [ $rc = 0 ] || { cat "$tmp/err"; fail "dtrun $sub $h exits $rc"; }
    [ ! -s "$tmp/err" ] || { cat "$tmp/err"; fail "dtrun $sub $h writes to stderr"; }
    grep -q "^usage: dtrun${sub:+ $sub}" "$tmp/out" || { head -3 "$tmp/out"; fail "dtrun $sub $h: no usage line on stdout"; }
  done
  echo "ok: dtrun ${sub:-(launcher)} --help and -h: usage on stdout, exit 0 ($(wc -l <"$tmp/out") lines)"
done

# typo WANT ARGS...: exit 2, one line on stderr naming WANT, nothing started
typo() {
  local want=$1; shift
  (cd "$tmp" && "$DTRUN" "$@" >"$tmp/out" 2>"$tmp/err"); local rc=$?
  [ $rc = 2 ] || { cat "$tmp/err"; fail "dtrun $*: exit $rc, want 2"; }
  [ "$(wc -l <"$tmp/err")" = 1 ] || { cat "$tmp/err"; fail "dtrun $*: not one line"; }
  grep -qF "did you mean '$want'" "$tmp/err" || { cat "$tmp/err"; fail "dtrun $*: no did-you-mean '$want'"; }
  echo "ok: dtrun $*: $(cat "$tmp/err")"
}
typo "dtrun generate" genrate ckpt --prompt x
typo "dtrun tokenize" tokenise -o out in.txt
typo "dtrun inspect" inspct ckpt
typo "dtrun classify" clasify ckpt img.png
typo "--prompt" generate ckpt --promt x
typo "--data" eval ckpt --dat file
typo "--dtype" export --dtpye bf16 ckpt out.safetensors
typo "--top-k" classify ckpt img.png --topk 3
typo "--output" plot run.jsonl --ouput x.svg
typo "--listen" rdzv --lisen 127.0.0.1:0
typo "--tokenizer" tokenize --tokenzier tok.json -o out in.txt
typo "--nproc-per-node" --nproc-per-nod 2 job.yaml
# a job file or program of that name is run, not corrected
printf 'model: {kind: gpt}\n' >"$tmp/genrate"
(cd "$tmp" && "$DTRUN" --print-config genrate >/dev/null 2>&1) || fail "an existing file named like a subcommand is not taken as the job"
echo "ok: an existing file 'genrate' is a job file, not a typo"
echo "PASS cli_help"
