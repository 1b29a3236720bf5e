#!/usr/bin/env bash
# dtrun classify: a ViT's top-5 on image files and its accuracy on IDX images,
# against PyTorch doing the same preprocessing (test/helpers/hf_vit.py):
#  - a 3-channel Hugging Face ViT (16x16 images, 12 named classes, per-channel
#    image_mean/std in preprocessor_config.json): PNG (RGB, RGBA, gray, of
#    other sizes: resized), PPM and PGM files give PyTorch's top-5 classes and
#    probabilities within 2e-6;
#  - --data over 16 IDX images (gray, resized and copied to RGB) gives the
#    top-1 and top-5 counts PyTorch counts; a 1-channel folder too;
#  - a dtrun checkpoint (a tiny ViT fitted to the 16 IDX images) classifies with its
#    data loader's normalisation: --data's top-1 is dtrun eval's accuracy, and
#    its exported folder classifies the same images the same way;
#  - bad input: one line and the exit status dtrun(1) documents.
# Needs Debian's torch (/usr/bin/python3); skips (77) without it.
source "$(dirname "$0")/../parallel/lib.bash"
PY=/usr/bin/python3
source "$ROOT/test/helpers/torch_serve.bash"
torch_serve_start VT "$ROOT/test/helpers/hf_vit.py" || exit 77  # VT ARGS: hf_vit.py ARGS, one PyTorch start-up for all
H=$ROOT/test/helpers
VT make "$T/hf3" --channels 3 --image 16 --patch 4 --classes 12 --mean 0.5,0.4,0.3 --std 0.2,0.25,0.3 \
  --seed 5 || fail "hf_vit.py make"
"$PY" "$H/idx_set.py" "$T/data" || fail "idx_set.py"
"$PY" - "$T" "$H" <<'PYEOF' || fail "writing the images"
import sys, torch
sys.path.insert(0, sys.argv[2])
from hf_vit import write_png
T = sys.argv[1]
g = torch.Generator().manual_seed(0)
def img(h, w, ch): return torch.randint(0, 256, (h, w, ch), dtype=torch.uint8, generator=g)
write_png(f"{T}/rgb.png", img(16, 16, 3))
write_png(f"{T}/rgba-23x19.png", img(23, 19, 4))
write_png(f"{T}/gray.png", img(16, 16, 1))
write_png(f"{T}/rgb-40x40.png", img(40, 40, 3))
open(f"{T}/wide.ppm", "wb").write(b"P6\n# a comment\n20 12\n255\n" + bytes(img(12, 20, 3).flatten().tolist()))
open(f"{T}/gray.pgm", "wb").write(b"P5 31 31 255\n" + bytes(img(31, 31, 1).flatten().tolist()))
PYEOF
imgs=("$T/rgb.png" "$T/rgba-23x19.png" "$T/gray.png" "$T/rgb-40x40.png" "$T/wide.ppm" "$T/gray.pgm")

# same_topk DTRUN_OUT TORCH_OUT: the same classes in the same order, probabilities within 2e-6
same_topk() {
  python3 - "$1" "$2" <<'PYEOF'
import sys
a, b = (open(f).read().strip().split("\n") for f in sys.argv[1:3])
assert len(a) == len(b), f"{len(a)} lines, PyTorch {len(b)}"
worst = 0.0
for la, lb in zip(a, b):
    fa, fb = la.split("\t"), lb.split("\t")
    assert fa[0] == fb[0] and len(fa) == len(fb) == 6, (la, lb)
    for x, y in zip(fa[1:], fb[1:]):
        (pa, *ra), (pb, *rb) = x.split(" ", 1)[:1] + [x.split(" ", 1)[1]], y.split(" ", 1)[:1] + [y.split(" ", 1)[1]]
        assert ra == rb, f"{fa[0]}: class {ra} where PyTorch has {rb}"
        worst = max(worst, abs(float(pa) - float(pb)))
assert worst <= 2e-6, f"probabilities differ by {worst:.2e}"
print(f"{len(a)} images, top-5 classes equal, probabilities within {worst:.1e}")
PYEOF
}

"$DTRUN" classify "$T/hf3" "${imgs[@]}" >"$T/top.out" 2>"$T/top.err" || { cat "$T/top.err"; fail "classify images"; }
VT topk "$T/hf3" "${imgs[@]}" >"$T/top.torch" || fail "PyTorch top-5"
msg=$(same_topk "$T/top.out" "$T/top.torch") || { paste "$T/top.out" "$T/top.torch"; fail "top-5 differs from PyTorch: $msg"; }
echo "ok: PNG (RGB, RGBA, gray, resized), PPM, PGM on a 3-channel HF ViT: $msg"
grep -q $'\t[0-9.]* [0-9]* class-' "$T/top.out" || fail "no id2label names in the output"
echo "ok: labels from config.json's id2label: $(head -1 "$T/top.out" | cut -f2)"

# accuracy_same SRC NAME: classify --data counts PyTorch's counts
accuracy_same() {
  "$DTRUN" classify "$1" --data "$T/data/val-images-idx3-ubyte" >"$T/$2.acc" 2>"$T/$2.err" || { cat "$T/$2.err"; fail "$2: classify --data"; }
  read -r t1 t5 n < <(VT accuracy "$1" "$T/data/val-images-idx3-ubyte" "$T/data/val-labels-idx1-ubyte")
  grep -q "top-1 [0-9.]*% ($t1/$n) | top-5 [0-9.]*% ($t5/$n)" "$T/$2.acc" ||
    fail "$2: '$(cat "$T/$2.acc")' but PyTorch counts top-1 $t1/$n, top-5 $t5/$n"
  echo "ok: $2: $(cat "$T/$2.acc") = PyTorch's count"
}
accuracy_same "$T/hf3" "rgb --data"
VT make "$T/hf1" --seed 2 || fail "make 1-channel"
accuracy_same "$T/hf1" "gray --data"

# a dtrun checkpoint: the loader's normalisation; --data's top-1 is dtrun eval's accuracy
cat >"$T/train.yaml" <<YAML
model:
  kind: vit
  image_size: 8
  patch_size: 4
  channels: 1
  n_classes: 10
  n_layer: 2
  n_head: 4
  d_model: 32
data:
  kind: idx
  train: $T/data/val-images-idx3-ubyte
  train_labels: $T/data/val-labels-idx1-ubyte
train:
  steps: 60
  lr: 3.0e-3
  global_batch: 8
  threads: 1
checkpoint:
  dir: $T/ck
log:
  progress: off
YAML
"$DTRUN" worker "$T/train.yaml" >"$T/train.log" 2>&1 || { cat "$T/train.log"; fail "training a tiny ViT"; }
"$DTRUN" eval "$T/ck" --data "$T/data/val-images-idx3-ubyte" --batch 8 >"$T/eval.out" 2>"$T/eval.err" || { cat "$T/eval.err"; fail "eval"; }
"$DTRUN" classify "$T/ck" --data "$T/data/val-images-idx3-ubyte" >"$T/ck.acc" 2>"$T/ck.err" || { cat "$T/ck.err"; fail "classify CKPT --data"; }
eval_acc=$(sed -n 's/.*accuracy \([0-9.]*\)%.*/\1/p' "$T/eval.out")
cls_acc=$(sed -n 's/.*top-1 \([0-9.]*\)%.*/\1/p' "$T/ck.acc")
[ -n "$eval_acc" ] && [ "$eval_acc" = "$cls_acc" ] && [ "${cls_acc%%.*}" -ge 25 ] || fail "classify's top-1 $cls_acc% is not dtrun eval's accuracy $eval_acc%"
echo "ok: a dtrun checkpoint: classify --data top-1 $cls_acc% = dtrun eval's accuracy ($(cat "$T/ck.acc"))"
"$DTRUN" export "$T/ck" "$T/ck-hf/" 2>/dev/null || fail "export"
"$DTRUN" classify "$T/ck" "$T/gray.png" "$T/gray.pgm" 2>/dev/null | cut -f2- >"$T/ck.top" || fail "classify CKPT images"
"$DTRUN" classify "$T/ck-hf" "$T/gray.png" "$T/gray.pgm" 2>/dev/null | cut -f2- | sed 's/ LABEL_[0-9]*//g' >"$T/ck-hf.top" ||
  fail "classify the exported folder"
cmp -s "$T/ck.top" "$T/ck-hf.top" || { paste "$T/ck.top" "$T/ck-hf.top"; fail "the exported folder classifies otherwise than its checkpoint"; }
echo "ok: the checkpoint and its exported folder (preprocessor_config.json: dtrun's normalisation) give the same top-5"

# bad input: one line on stderr, the documented status
bad() { one_line_exit "$1" "$2" classify "${@:3}"; } # STATUS WHAT ARGS...
printf 'hello, not an image\n' >"$T/text.png"
printf 'P6\n4 4\n255\nabc' >"$T/short.ppm"
VT make "$T/hf2ch" --channels 2 --seed 1 || fail "make 2-channel"
"$PY" "$H/hf_gpt2.py" make "$T/gpt" || fail "hf_gpt2.py make"
bad 3 "a missing image" "$T/hf3" "$T/nope.png"
bad 3 "not an image" "$T/hf3" "$T/text.png"
bad 3 "a truncated PPM" "$T/hf3" "$T/short.ppm"
bad 3 "RGB into a 2-channel model" "$T/hf2ch" "$T/rgb.png"
bad 3 "missing --data file" "$T/hf3" --data "$T/data/none-images-idx3-ubyte"
bad 3 "--data not IDX" "$T/hf3" --data "$T/text.png" --labels "$T/data/val-labels-idx1-ubyte"
bad 2 "a GPT to classify" "$T/gpt" "$T/rgb.png"
bad 6 "neither checkpoint nor folder" "$T/data" "$T/rgb.png"
bad 2 "no images" "$T/hf3"
bad 2 "images and --data" "$T/hf3" "$T/rgb.png" --data "$T/data/val-images-idx3-ubyte"
bad 2 "a bad --top-k" "$T/hf3" "$T/rgb.png" --top-k 0
torch_serve_stop
one_line_exit 2 "a ViT to generate" generate "$T/hf3" --prompt hi
