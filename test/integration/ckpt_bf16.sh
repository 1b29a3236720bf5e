#!/usr/bin/env bash
# Checkpoints of bf16 mixed-precision runs (train.precision: bf16). A bf16 run
# saves the optimizer's fp32 master weights as its parameters (its bf16
# parameters are their rounding), with AdamW's m and v, so:
#
# 1. Exact resume: 40 steps in one go and 20 + resume + 20 under the same
#    layout give bitwise identical final parameters and the same loss at every
#    step (the GPT under FSDP dp 2 with bf16 gradients, the ViT under DDP dp 2
#    with fp32 gradients reduced in bf16).
# 2. The checkpoint is fp32 whatever the precision: an fp32 run resumes from a
#    bf16 run's checkpoint and a bf16 run from an fp32 run's, under another
#    layout, and train on.
# 3. `dtrun export --dtype bf16` writes BF16 tensors that are the checkpoint's
#    fp32 masters rounded to nearest even (`--dtype fp32`, the default, the
#    masters themselves), and those are the bf16 parameters the run computed
#    with at its last step (DTRUN_DUMP_PARAMS), tensor by tensor (ViT: timm's
#    names, no transposes).
source "$(dirname "$0")/../parallel/ckpt.bash"


ckpt_exact gpt-tiny "dp=2 mode=fsdp prec=bf16"
ckpt_exact vit-tiny "dp=2 prec=bf16 grad=fp32 reduce=bf16"

# 2. across precisions (and layouts): the resumed run's first step (21) computes
#    from the checkpoint's fp32 parameters (fp32 run) or their bf16 rounding (bf16
#    run), the uninterrupted first run from its own: the same batch through
#    parameters one bf16 rounding apart, so the losses agree within 2e-3
#    relative (bf16's 2^-8 relative rounding, partly averaging out)
cross() { # MODEL LAYOUT_A LAYOUT_B
  local model=$1 la=$2 lb=$3 name d
  name=cross-$model-$(layout_name "$la")-to-$(layout_name "$lb"); d=$T/$name
  ckpt_job "$model" "$la" "$d-a.yaml" "$d-a.jsonl" "$d-a.ck"
  ckpt_job "$model" "$la" "$d-full.yaml" "$d-full.jsonl" "$d-full.ck"
  ckpt_job "$model" "$lb" "$d-b.yaml" "$d-b.jsonl" "$d-b.ck" "$d-a.ck"
  ckpt_run "$la" "$d-full.yaml" "$d-full.log" || { tail "$d-full.log"; fail "$name: uninterrupted"; }
  ckpt_run "$la" "$d-a.yaml" "$d-a.log" DTRUN_TEST_STOP_STEP=20 || { tail "$d-a.log"; fail "$name: first half"; }
  ckpt_run "$lb" "$d-b.yaml" "$d-b.log" || { tail "$d-b.log"; fail "$name: second half"; }
  grep -q "resuming from $d-a.ck/step_000020: step 20" "$d-b.log" || { tail "$d-b.log"; fail "$name: did not resume"; }
  python3 - "$d-full.jsonl" "$d-b.jsonl" <<'EOF' || fail "$name: the resumed run does not continue the curve"
import json, math, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
assert min(b) == 21 and max(b) == 40, sorted(b)
assert all(math.isfinite(v) for v in b.values())
rel = abs(b[21] - a[21]) / a[21]
assert rel < 2e-3, f"step 21: resumed {b[21]} vs uninterrupted {a[21]} ({rel:.2e})"
assert b[40] < a[1], (a[1], b[40])
print(f"step 21 {b[21]:.5f} vs {a[21]:.5f} uninterrupted ({rel:.1e}), step 40 {b[40]:.5f} vs {a[40]:.5f}")
EOF
  echo "ok   cross $model [$la] -> [$lb]: resumed and trained on"
}
cross gpt-tiny "dp=2 mode=zero1 prec=bf16" "tp=2"
cross gpt-tiny "pp=2 sched=1f1b" "dp=2 mode=zero2 prec=bf16"

# 3. export: fp32 masters, BF16 their rounding, = the run's bf16 parameters
d=$T/exact-vit-tiny-$(layout_name "dp=2 prec=bf16 grad=fp32 reduce=bf16")
"$DTRUN" export "$d-a.ck" "$d.f32.safetensors" 2>"$d.export.log" || { cat "$d.export.log"; fail "export fp32"; }
"$DTRUN" export --dtype bf16 "$d-a.ck" "$d.bf16.safetensors" 2>>"$d.export.log" ||
  { cat "$d.export.log"; fail "export --dtype bf16"; }
"$DTRUN" export --dtype fp16 "$d-a.ck" "$d.x.safetensors" 2>"$d.bad.log"; rc=$?
[ $rc = 2 ] && grep -q "want fp32 or bf16" "$d.bad.log" || { cat "$d.bad.log"; fail "--dtype fp16: exit $rc, want 2"; }
python3 - "$d.f32.safetensors" "$d.bf16.safetensors" "$d-a.bin" <<'EOF' || fail "export --dtype bf16 is not the rounded masters"
import json, struct, sys
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items()}
f32, b16 = load(sys.argv[1]), load(sys.argv[2])
assert f32.keys() == b16.keys() and f32
def rne(bits):  # fp32 bits -> bf16 bits, round to nearest even (no NaNs here)
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
rounded = {}
for k, (dt, shape, data) in f32.items():
    dt2, shape2, data2 = b16[k]
    assert dt == "F32" and dt2 == "BF16" and shape == shape2, (k, dt, dt2, shape, shape2)
    w = struct.unpack(f"<{len(data) // 4}I", data)
    want = [rne(x) for x in w]
    got = list(struct.unpack(f"<{len(data2) // 2}H", data2))
    assert got == want, f"{k}: BF16 export is not the fp32 masters rounded"
    rounded[k] = [x << 16 for x in got]
# the run's final parameters (raw float32, unit by unit in the model's order):
# the rounded masters, tensor by tensor (timm names; the patch weight and the
# class/position embeddings only change shape)
order = ["patch_embed.proj.weight", "patch_embed.proj.bias", "cls_token", "pos_embed"]
L = 1 + max(int(k.split(".")[1]) for k in f32 if k.startswith("blocks."))
for i in range(L):
    order += [f"blocks.{i}.{n}" for n in ("norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
              "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight",
              "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")]
order += ["norm.weight", "norm.bias", "head.weight", "head.bias"]
assert sorted(order) == sorted(f32), sorted(set(order) ^ set(f32))
dump = open(sys.argv[3], "rb").read()
want = b"".join(struct.pack(f"<{len(rounded[k])}I", *rounded[k]) for k in order)
assert dump == want, "the run's final bf16 parameters are not the checkpoint's masters rounded"
print(f"{len(f32)} tensors: BF16 = fp32 masters rounded = the run's parameters")
EOF
echo "ok   export --dtype bf16: the fp32 masters rounded to nearest even, the run's own parameters"
echo "PASS ckpt_bf16"
