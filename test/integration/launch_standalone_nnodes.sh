#!/usr/bin/env bash
# --standalone with more than one node is one clear line, exit 2, nothing
# started (issue 15.8: it read "--nnodes asks for 3333").
source "$(dirname "$0")/../helpers/launch_common.bash"
check() { # NNODES WANT_PHRASE
  "$DTRUN" --standalone --nnodes="$1" -- true $MARK >"$T/out" 2>"$T/err"; local rc=$?
  [ $rc = 2 ] || { cat "$T/err"; fail "--nnodes=$1: exit $rc, want 2"; }
  [ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err"; fail "--nnodes=$1: want one line"; }
  grep -qx "dtrun: --standalone runs one node, but --nnodes asks for $2; drop --standalone and give --rdzv-endpoint HOST\[:PORT\], or drop --nnodes" "$T/err" ||
    { cat "$T/err"; fail "--nnodes=$1: unclear line"; }
  echo "ok: $(cat "$T/err")"
}
check 33 "33 nodes"
check 2:33 "2 to 33 nodes"
