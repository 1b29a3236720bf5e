#!/usr/bin/env bash
# Docs that cannot drift (issue 25 item 12): the README's, the man pages' and
# the configs' examples against the binary (test/helpers/docs_check.py says
# what it checks: transcripts "$ dtrun ..." run and compared line by line,
# every other dtrun command line's options and layout, man dtrun-job(5)'s
# PRESETS table, the man pages' footers, sentences written twice). Then the
# checker is shown to catch a drift: a copy of the docs with one figure of a
# transcript changed, one option misspelt, one launch that cannot start, one
# preset row wrong and one sentence written twice must give five problems.
set -u
cd "$(dirname "$0")/../.."
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ -x bin/dtrun ] || { echo "bin/dtrun not built"; exit 1; }

python3 test/helpers/docs_check.py || { echo "FAIL: the docs and the binary disagree (lines above)"; exit 1; }

# the checker catches drift: a copy of the docs, five planted problems
mkdir -p "$tmp/tree/man"
cp -r README.md configs "$tmp/tree/" && cp man/dtrun.1 man/dtrun-job.5 "$tmp/tree/man/"
python3 - "$tmp/tree" <<'PY' || exit 1
import re, sys
root = sys.argv[1]
def edit(path, f):
    p = f"{root}/{path}"
    s = open(p).read(); t = f(s)
    assert t != s, f"no edit in {path}"
    open(p, "w").write(t)
# 1. a figure of the first transcript: the first "GB" figure after a "$ dtrun" line
def figure(s):
    i = s.index("\n$ dtrun")
    m = re.compile(r"(\d+\.\d+) GB").search(s, i)
    return s[:m.start(1)] + "9" + s[m.start(1):]
edit("README.md", figure)
# 2. an option misspelt, 3. a launch whose layout cannot start
edit("man/dtrun.1", lambda s: s.replace("\\-\\-log\\-dir runs/logs", "\\-\\-logdir runs/logs", 1)
     .replace("\\-\\-nproc\\-per\\-node=2 configs/quickstart.yaml", "\\-\\-nproc\\-per\\-node=3 configs/quickstart.yaml", 1))
# 4. a preset row: gpt-tiny with 3 layers
edit("man/dtrun-job.5", lambda s: re.sub(r"^gpt-tiny\t2\t", "gpt-tiny\t3\t", s, count=1, flags=re.M))
# 5. a sentence written twice
edit("README.md", lambda s: s.replace("Each folder is one room; a change belongs in the lowest room that can hold it.",
     "Each folder is one room; a change belongs in the lowest room that can hold it. Each folder is one room; a change belongs in the lowest room that can hold it.", 1))
PY
DOCS_ROOT=$tmp/tree DTRUN=$PWD/bin/dtrun python3 test/helpers/docs_check.py >"$tmp/planted" 2>&1
rc=$?
cat "$tmp/planted"
[ $rc -eq 1 ] || { echo "FAIL: the planted drift was not caught (exit $rc)"; exit 1; }
for want in "prints something else" "option '--logdir' is not in its --help" "would not start" \
            "preset gpt-tiny: layers 3" "written twice"; do
  grep -qF -- "$want" "$tmp/planted" || { echo "FAIL: planted drift not reported: $want"; exit 1; }
done
echo "ok: docs agree with the binary; five planted drifts caught"
