#!/usr/bin/env bash
# Every shipped job loads (--print-config), its printed form loads back to the
# same job, and it dry-runs on the cpu profile: configs never rot.
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for f in configs/*.yaml configs/strategies/*.yaml; do
  if ! bin/dtrun --print-config "$f" >"$tmp/a.yaml" 2>"$tmp/err"; then
    echo "FAIL $f: $(cat "$tmp/err")"; fail=1; continue
  fi
  # the printed job names its source; compare everything else after a reload
  bin/dtrun --print-config "$tmp/a.yaml" >"$tmp/b.yaml" 2>"$tmp/err" || { echo "FAIL reload $f: $(cat "$tmp/err")"; fail=1; continue; }
  if ! diff -q <(grep -v "$tmp" "$tmp/a.yaml" | grep -v '^# ') <(grep -v "$tmp" "$tmp/b.yaml" | grep -v '^# ') >/dev/null; then
    echo "FAIL $f: printed job does not reload to the same job"; diff "$tmp/a.yaml" "$tmp/b.yaml" | head; fail=1
  fi
  if ! bin/dtrun --dry-run --hardware cpu "$f" >"$tmp/dry" 2>"$tmp/err"; then
    echo "FAIL dry-run $f: $(cat "$tmp/err")"; fail=1; continue
  fi
  grep -q 'memory per rank' "$tmp/dry" || { echo "FAIL dry-run $f: no memory table"; fail=1; }
  echo "ok $f"
done
exit $fail
