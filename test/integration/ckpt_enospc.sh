#!/usr/bin/env bash
# A checkpoint save that runs out of disk: on a 128 KiB tmpfs a small step fits,
# a big one hits the real ENOSPC. The save must fail with one clear line, leave
# no .tmp file, and leave the previous checkpoint loadable; once the debris is
# gone the next save works. Needs root (mount); skips (77) without it.
set -u
cd "$(dirname "$0")/../.."
bin=build/test/test_ckpt
[ -x "$bin" ] || { echo "skip: $bin not built (make tests-bin)"; exit 77; }
dir=$(mktemp -d /tmp/dtrun-ckpt-enospc.XXXXXX)
if ! mount -t tmpfs -o size=128k tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "skip: cannot mount a tmpfs (needs root)"
  exit 77
fi
"$bin" --enospc "$dir"; rc=$?
umount "$dir" && rmdir "$dir"
exit $rc
