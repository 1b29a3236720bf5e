#!/usr/bin/env bash
# The GPU benchmark's parts that run without a GPU (scripts/bench/gpu.sh runs
# only on one): gpu_train trains a tiny GPT and ViT through the worker engine
# on the CPU backend and its dry-run prediction is the one `dtrun --dry-run`
# prints for the job it wrote, to the byte, and equal to what the run accounted;
# its FLOPs per item are flops.py's (the formula the PyTorch and llm.c rows and
# the table use); bad input is one line and a documented status; llm.c's step
# lines parse into the row; the table turns rows into MFU, ratios and memory.
set -u
cd "$(dirname "$0")/../.." || exit 1
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OMP_NUM_THREADS=1
T=$(mktemp -d /tmp/dtrun-gpu-bench-cpu.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -x bin/dtrun ] || fail "bin/dtrun is not built (make all)"
make -s --no-print-directory build/bench/gpu_train >"$T/make.log" 2>&1 || { cat "$T/make.log"; fail "build gpu_train"; }
G=build/bench/gpu_train

# tiny GPT fp32 and tiny ViT bf16 on the CPU backend
"$G" --device cpu --model gpt-tiny --batch 4 --steps 2 --warmup 1 --job "$T/gpt.yaml" >"$T/gpt.json" 2>"$T/gpt.err" ||
  { cat "$T/gpt.err"; fail "gpu_train gpt-tiny"; }
"$G" --device cpu --model vit-tiny --batch 8 --steps 2 --warmup 1 --precision bf16 --job "$T/vit.yaml" \
  >"$T/vit.json" 2>"$T/vit.err" || { cat "$T/vit.err"; fail "gpu_train vit-tiny"; }
for k in gpt vit; do
  bin/dtrun --dry-run --format json "$T/$k.yaml" >"$T/$k.dry.json" || fail "dry-run of the job gpu_train wrote ($k)"
done
python3 - "$T" <<'EOF' || exit 1
import json, sys
sys.path.insert(0, "scripts/bench")
from flops import gpt_per_token, vit_per_image
d = sys.argv[1]
want = {"gpt": ("tok", gpt_per_token(2, 32, 256, 32), 32, 4),
        "vit": ("img", vit_per_image(2, 32, image=28, patch=7, channels=1, classes=10), 17, 8)}
for k, (unit, flops, seq, B) in want.items():
    r = json.loads(open(f"{d}/{k}.json").read().splitlines()[-1])
    mem = json.load(open(f"{d}/{k}.dry.json"))["stages"][0]["memory"]
    dry = mem["total"]
    assert r["impl"] == "dtrun" and r["device"] == "cpu" and r["unit"] == unit and r["B"] == B and r["T"] == seq, r
    assert r["items_per_s"] > 0 and r["step_ms"] > 0 and r["loss"] > 0 and r["data_ms"] >= 0, r
    assert abs(r["flops_per_item"] - flops) <= 1e-6 * flops, (k, r["flops_per_item"], flops)
    assert r["mem_predicted_b"] == dry, (k, r["mem_predicted_b"], dry)
    # the fixed bytes: what the backend keeps outside the accounting; on the
    # CPU only bf16's fp32 staging of bf16 operands (kernels/cpu/act.c)
    assert r["mem_predicted_fixed_b"] == mem["fixed"] and (mem["fixed"] > 0) == (k == "vit"), (k, r, mem)
    assert r["mem_accounted_b"] == r["mem_predicted_b"] - r["mem_predicted_fixed_b"], (k, r["mem_accounted_b"], r["mem_predicted_b"])
    assert r["hardware"] == "cpu", r
    assert r["mem_measured_b"] is None and r["mem_ratio"] is None, r
    assert r["pred_items_per_s"] > 0, r
    print(f"ok: {k}: {r['items_per_s']:.0f} {unit}/s, flops/item {flops:.6g} = flops.py's, "
          f"predicted {dry} B = accounted + {mem['fixed']} B fixed = dtrun --dry-run's")
EOF
grep -q 'precision: bf16' "$T/vit.yaml" || fail "the ViT job file does not say precision bf16"

# bad input: one line, exit 1 (usage) or 2 (no CUDA device: make test hides GPUs)
one_line() { # WANT_STATUS WHAT ARGS...: gpu_train ARGS exits WANT_STATUS with one line on stderr
  local want=$1 what=$2; shift 2
  "$G" "$@" >/dev/null 2>"$T/err"; local rc=$?
  if [ $rc != "$want" ] || [ "$(wc -l <"$T/err")" != 1 ]; then cat "$T/err"; fail "$what: exit $rc, want $want"; fi
}
one_line 1 "--precision fp16" --precision fp16
one_line 1 "--model no-such" --model no-such
grep -q "no-such" "$T/err" || fail "--model no-such: the line does not name it"
CUDA_VISIBLE_DEVICES='' one_line 2 "no GPU" --model gpt-tiny
echo "ok: bad input: one line, exit 1; no GPU: exit 2"

# llm.c's output, as its train_gpt2.cu prints it
cat >"$T/llmc.log" <<'EOF'
device memory usage: 12345 MiB / 81559 MiB
val loss 11.0
step    1/5 | loss 11.012345 (+nanz)| norm 15.2 (+nanz)| lr 3.00e-04 | 900.00 ms | 10.0% bf16 MFU | 18204 tok/s
step    2/5 | loss 10.500000 (+nanz)| norm 9.1 (+nanz)| lr 3.00e-04 | 100.00 ms | 40.0% bf16 MFU | 163840 tok/s
step    3/5 | loss 10.000000 (+nanz)| norm 5.1 (+nanz)| lr 3.00e-04 | 120.00 ms | 40.0% bf16 MFU | 150000 tok/s
step    4/5 | loss 9.500000 (+nanz)| norm 4.1 (+nanz)| lr 3.00e-04 | 110.00 ms | 40.0% bf16 MFU | 149000 tok/s
step    5/5 | loss 9.000000 (+nanz)| norm 3.1 (+nanz)| lr 3.00e-04 | 500.00 ms | 40.0% bf16 MFU | 120000 tok/s
val loss 9.0
EOF
python3 scripts/bench/llmc_run.py --parse "$T/llmc.log" --model gpt2-124m --batch 16 --warmup 1 >"$T/llmc.json" ||
  fail "llmc_run.py --parse"
python3 - "$T/llmc.json" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
# steps 2..5: 100, 120, 110, 500 ms: median 115 ms
assert r["step_ms"] == 115.0 and r["items_per_s"] == round(16 * 1024 / 0.115, 1), r
assert r["loss"] == 9.0 and r["llmc_tok_s"] == 120000 and r["mem_measured_b"] == 12345 * 2**20, r
assert r["impl"] == "llm.c" and r["unit"] == "tok" and not r["llmc_managed_fallback"], r
print(f"ok: llm.c log: median {r['step_ms']} ms over the steps after the warm-up, {r['items_per_s']:.0f} tok/s")
EOF

# the table: MFU by flops.py for every row, the goal's ratios, memory, failures
python3 - "$T" <<'EOF' || exit 1
import json, sys
sys.path.insert(0, "scripts/bench")
from flops import per_item
from gpu_table import table
f = per_item("gpt2-124m")
rows = [
    {"impl": "dtrun", "model": "gpt2-124m", "precision": "bf16", "B": 16, "step_ms": 100.0,
     "items_per_s": 200000.0, "unit": "tok", "flops_per_item": f, "mem_measured_b": 10 * 2**30,
     "mem_predicted_b": 8 * 2**30, "mem_ratio": 1.25, "mem_accounted_b": 6 * 2**30,
     "mem_context_b": 2**29, "mem_predicted_fixed_b": 2**30, "hardware": "h100-sxm",
     "pred_items_per_s": 300000.0, "data_ms": 0.5},
    {"impl": "pytorch+compile", "model": "gpt2-124m", "precision": "bf16", "B": 16, "step_ms": 80.0,
     "items_per_s": 100000.0, "unit": "tok", "flops_per_item": f, "mem_measured_b": 2**30},
    {"impl": "llm.c", "model": "gpt2-124m", "precision": "bf16", "B": 16, "step_ms": 80.0,
     "items_per_s": 400000.0, "unit": "tok", "flops_per_item": f * 1.01},
    {"impl": "pytorch+compile", "model": "vit-b16", "precision": "fp32", "failed": True, "why": "timed out"},
]
t = table(rows, 989.4e12, "NVIDIA H100 80GB HBM3", today="2026-01-01")
print(t)
assert f"{100 * 200000 * f / 989.4e12:5.1f}%" in t, "dtrun's MFU"
assert "ratio gpt2-124m: dtrun (bf16) / pytorch+compile (bf16) = 2.00x" in t
assert "ratio gpt2-124m: dtrun (bf16) / llm.c (bf16) = 0.50x" in t
assert "differ from flops.py's" in t, "llm.c's own FLOPs differ: said"
assert "vit-b16    fp32  FAILED: timed out" in t
assert "1.25" in t and "10.00" in t and "8.00" in t
print("ok: table")
EOF
echo "gpu_bench_cpu: all checks passed"
