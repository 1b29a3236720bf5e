#!/usr/bin/env bash
# Data files checked by their headers before any worker starts (issue 26,
# item 4). Before: a PNG or /etc/passwd as token data exited 3 in 8 lines, one
# from every rank, after the workers had started. Now every data file's
# header (token shards: magic, version, size = header + count x width; text: not
# empty; IDX: magic, image size vs the model, label count) is checked by the
# launcher: one line naming the key, its position and the file, exit 3, no
# worker started. Files that pass still train.
source "$(dirname "$0")/../helpers/preflight.bash"

# shard FILE N [MAGIC VERSION COUNT]: an llm.c shard of N uint16 tokens (p % 30).
shard() {
  python3 - "$@" <<'EOF'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
magic, version, count = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 3 else (20240520, 1, n)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", magic, version, count, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[p % 30 for p in range(n)]))
EOF
}
# tokens_job NAME TRAIN [VAL]: a dp=2 job over token shards, 2 workers.
tokens_job() {
  local val=${3:+", val: $3"}
  tiny_job "$T/$1.yaml" "data: {kind: tokens, train: $2$val}" "parallel: {dp: 2}"
}
# refused NAME SUBSTRING...: dtrun --nproc-per-node=2 on $T/NAME.yaml says one line, exit 3, no worker.
refused() {
  local name=$1; shift
  run_dtrun "$name" --nproc-per-node=2 "$T/$name.yaml"
  expect_one_line "$name" 3 "dtrun: $T/$name.yaml:" "$@"
}

python3 -c 'import sys, zlib, struct
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
raw = b"".join(b"\0" + bytes(3 * 8) for _ in range(8))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)) +
    chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))' "$T/photo.png"
tokens_job png "$T/photo.png"
refused png "data.train '$T/photo.png': wrong magic (" "expected 20240520 or 20240801: not an llm.c token shard)"
head -c 4096 /dev/urandom >>"$T/photo.png" # a PNG larger than a shard's header
refused png "data.train '$T/photo.png': wrong magic (" "expected 20240520 or 20240801: not an llm.c token shard)"

tokens_job passwd /etc/passwd
refused passwd "data.train '/etc/passwd': wrong magic ("

mkdir -p "$T/shards"
shard "$T/shards/s_000.bin" 600
shard "$T/shards/s_001.bin" 600 20240520 1 700
tokens_job glob "$T/shards/s_*.bin"
refused glob "data.train '$T/shards/s_*.bin': $T/shards/s_001.bin: truncated (header says 700 tokens = 2424 bytes, file has 2224 bytes)"

shard "$T/v2.bin" 600 20240520 2 600
tokens_job version "$T/v2.bin"
refused version "data.train '$T/v2.bin': unsupported version (2, only version 1 has uint16 tokens)"

shard "$T/long.bin" 600 20240520 1 500
shard "$T/good.bin" 600
tokens_job long "$T/good.bin" "$T/long.bin"
refused long "data.val '$T/long.bin': longer than its header says (header says 500 tokens"

shard "$T/short.bin" 0 && truncate -s 100 "$T/short.bin" # a shard cut inside its header
tokens_job short "$T/short.bin"
refused short "data.train '$T/short.bin': truncated (100 bytes, shorter than the 1024-byte header)"

: >"$T/empty.txt"
tiny_job "$T/text.yaml" "data: {kind: text, train: $T/empty.txt}" "parallel: {dp: 2}"
refused text "data.train '$T/empty.txt': empty file (no bytes to train on)"

# IDX: images of the wrong size for the model, labels that do not match.
python3 - "$T" <<'EOF'
import gzip, struct, sys
d = sys.argv[1]
def images(path, n, s): gzip.open(path, "wb").write(struct.pack(">IIII", 0x803, n, s, s) + bytes(n * s * s))
def labels(path, n): gzip.open(path, "wb").write(struct.pack(">II", 0x801, n) + bytes(n))
images(d + "/big-images-idx3-ubyte.gz", 10, 8); labels(d + "/big-labels-idx1-ubyte.gz", 10)
images(d + "/ok-images-idx3-ubyte.gz", 10, 4); labels(d + "/ok-labels-idx1-ubyte.gz", 9)
EOF
vit_job() { # NAME IMAGES LABELS
  { echo "model: {kind: vit, image_size: 4, patch_size: 2, channels: 1, n_classes: 3, n_layer: 1, n_head: 1, d_model: 8}"
    echo "train: {steps: 2, global_batch: 4, lr: 0.01}"
    echo "data: {kind: idx, train: $2, train_labels: $3}"
    echo "parallel: {dp: 2}"; } >"$T/$1.yaml"
}
vit_job idxsize "$T/big-images-idx3-ubyte.gz" "$T/big-labels-idx1-ubyte.gz"
refused idxsize "data.train '$T/big-images-idx3-ubyte.gz': image size does not match the model (images are 8x8, model.image_size is 4)"
vit_job idxlabels "$T/ok-images-idx3-ubyte.gz" "$T/ok-labels-idx1-ubyte.gz"
refused idxlabels "data.train_labels '$T/ok-labels-idx1-ubyte.gz': label count does not match the images (9 labels, 10 images"

# What passes the headers trains: the two good shards, on 2 workers.
shard "$T/shards/s_001.bin" 600
tokens_job fine "$T/shards/s_*.bin"
run_dtrun fine --nproc-per-node=2 "$T/fine.yaml"
[ "$rc" -eq 0 ] && grep -q "^\[default/0\]:step 4/4" "$T/fine.err" "$T/fine.out" && ok "good shards pass the checks and train" ||
  fail "good shards: exit $rc: $(tail -3 "$T/fine.err")"
finish
