#!/usr/bin/env bash
# Fashion-MNIST from Debian's dataset-fashion-mnist: checks the four IDX files
# (gzip, IDX magic, image and label counts) and prints the job's data section.
#   scripts/data/fashion-mnist.sh            # default /usr/share/datasets/fashion-mnist
#   FASHION_MNIST_DIR=/path scripts/data/fashion-mnist.sh
# Exit 1 with one line per problem when a file is missing or malformed.
set -euo pipefail
dir=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

if [ ! -d "$dir" ]; then
  echo "$dir: missing (install it: apt-get install dataset-fashion-mnist)" >&2
  exit 1
fi

# header FILE BYTES: the first BYTES decompressed bytes as one hex string
# (head stops reading early: gzip's SIGPIPE is expected, not a failure)
header() { { gzip -dc "$1" 2>/dev/null || true; } | head -c "$2" | od -An -tx1 -v | tr -d ' \n'; }

bad=0
check() { # FILE MAGIC(hex) COUNT(expected) WHAT [ROWS COLS]
  local f=$dir/$1 magic=$2 count=$3 what=$4 h n
  if [ ! -r "$f" ]; then echo "$f: missing (apt-get install dataset-fashion-mnist)" >&2; bad=1; return; fi
  if [ "$(head -c 2 "$f" | od -An -tx1 | tr -d ' \n')" != 1f8b ]; then
    echo "$f: not gzip (no 1f 8b magic)" >&2; bad=1; return
  fi
  h=$(header "$f" 16)
  if [ "${h:0:8}" != "$magic" ]; then
    echo "$f: wrong magic (0x${h:0:8}, expected 0x$magic for IDX $what)" >&2; bad=1; return
  fi
  n=$((16#${h:8:8}))
  if [ "$n" -ne "$count" ]; then
    echo "$f: wrong count ($n $what, expected $count)" >&2; bad=1; return
  fi
  if [ "$what" = images ] && [ "$((16#${h:16:8}))x$((16#${h:24:8}))" != 28x28 ]; then
    echo "$f: wrong image size ($((16#${h:16:8}))x$((16#${h:24:8})), expected 28x28)" >&2; bad=1; return
  fi
  echo "ok $f ($n $what)" >&2
}
check train-images-idx3-ubyte.gz 00000803 60000 images
check train-labels-idx1-ubyte.gz 00000801 60000 labels
check t10k-images-idx3-ubyte.gz 00000803 10000 images
check t10k-labels-idx1-ubyte.gz 00000801 10000 labels
[ "$bad" -eq 0 ] || exit 1

cat <<YAML
data:
  kind: idx
  train_path: $dir/train-images-idx3-ubyte.gz
  train_labels: $dir/train-labels-idx1-ubyte.gz
  val_path: $dir/t10k-images-idx3-ubyte.gz
  val_labels: $dir/t10k-labels-idx1-ubyte.gz
YAML
