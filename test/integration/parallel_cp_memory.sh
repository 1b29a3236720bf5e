#!/usr/bin/env bash
# Context parallelism's memory, measured (issue 17): a GPT of 4 blocks, d_model
# 64, 64 tokens a sample, micro-batch 2, fp32, trained for 2 steps with cp 1, 2
# and 4 (and cp 2 under dp 2 FSDP and tp 2 + sequence parallelism). Every rank
# writes what it allocated (account.h) and what one micro-batch's blocks keep
# as inputs of attention (ln1 output, qkv) and of the MLP (ln2 output, fc's
# output before and after GELU): acts_kept in STEM.rankN.jsonl (train.c).
#   1/cp   cp N keeps 1/N of cp 1's attention and MLP inputs on every rank
#          (within 5 %: exactly, since seq_len divides);
#   falls  the whole activations category falls below 1/N of cp 1's plus the
#          fixed part (no [seq, seq] probabilities or scratch under cp);
#   dry    the dry-run (sizes.c, the one source of truth) predicts every
#          rank's activations (activations + logits + workspace) and buffers
#          (comm: the ring's buffers) within 5 %, params, grads and optimizer
#          exactly; and the bytes the ring sends in a step (the cp group's
#          comm_bytes_sent) within 5 % of its cp volume.
source "$(dirname "$0")/../parallel/lib.bash"

cpm_job() { # NAME LAYOUT
  layout_job gpt-tiny "$2" "$T/$1.yaml" "$T/$1.jsonl"
  sed -i -e 's/^  n_layer: .*/  n_layer: 4/' -e 's/^  d_model: .*/  d_model: 64/' -e 's/^  seq_len: .*/  seq_len: 64/' \
    -e 's/^  steps: .*/  steps: 2/' -e 's/^  global_batch: .*/  global_batch: 2/' -e 's/^  micro_batch: .*/  micro_batch: 2/' \
    "$T/$1.yaml"
  if [ "$(lget "$2" dp 1)" = 2 ]; then sed -i -e 's/^  global_batch: .*/  global_batch: 4/' "$T/$1.yaml"; fi
}
NAMES=()
for lay in "cp=1" "cp=2" "cp=4" "dp=2 cp=2 mode=fsdp" "cp=2 tp=2 sp=1" "tp=2 sp=1"; do
  name=$(layout_name "$lay")
  cpm_job "$name" "$lay"
  n=$(( $(lget "$lay" dp 1) * $(lget "$lay" cp 1) * $(lget "$lay" tp 1) ))
  timeout -k 5 120 "$DTRUN" --nproc-per-node=$n "$T/$name.yaml" >"$T/$name.log" 2>&1 ||
    { tail -n 20 "$T/$name.log"; fail "$lay did not train"; }
  "$DTRUN" --dry-run --format=json --hardware=cpu --nproc-per-node=$n "$T/$name.yaml" >"$T/$name.dry.json" \
    2>"$T/$name.dry.err" || { cat "$T/$name.dry.err"; fail "$lay: dry-run failed"; }
  NAMES+=("$name")
done
python3 - "$T" "${NAMES[@]}" <<'PY' || fail "context parallelism's memory is not as promised"
import glob, json, sys
T, names = sys.argv[1], sys.argv[2:]
def ranks(name):
    out = []
    for f in sorted(glob.glob(f"{T}/{name}.rank*.jsonl"), key=lambda p: int(p.rsplit("rank", 1)[1].split(".")[0])):
        out.append([json.loads(l) for l in open(f) if l.strip()][-1])
    return out
ok = True
def check(what, cond):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok &= bool(cond)
one = ranks("cp-1")[0]
a1, m1 = one["acts_kept"]["attn_in"], one["acts_kept"]["mlp_in"]
print(f"cp 1: attention inputs {a1} B, MLP inputs {m1} B, activations {one['mem_peak']['activations']} B")
for name, cp, base in (("cp-2", 2, one), ("cp-4", 4, one), ("dp-2_cp-2_mode-fsdp", 2, one),
                       ("cp-2_tp-2_sp-1", 2, ranks("tp-2_sp-1")[0])):
    ba, bm = base["acts_kept"]["attn_in"], base["acts_kept"]["mlp_in"]
    for r, m in enumerate(ranks(name)):
        a, mm = m["acts_kept"]["attn_in"], m["acts_kept"]["mlp_in"]
        check(f"{name} rank {r}: attention inputs {a} B = {a / ba:.4f} of its cp 1 layout's, MLP inputs {mm} B = "
              f"{mm / bm:.4f} (1/{cp} = {1 / cp:.4f}, within 5 %)",
              abs(a / ba * cp - 1) <= 0.05 and abs(mm / bm * cp - 1) <= 0.05)
    r0 = ranks(name)[0]
    check(f"{name}: activations {r0['mem_peak']['activations']} B <= 1/{cp} of cp 1's "
          f"{base['mem_peak']['activations']} B + 64 KiB (no [seq, seq] kept)",
          r0["mem_peak"]["activations"] <= base["mem_peak"]["activations"] / cp + 65536)
for name in names:
    dry = json.load(open(f"{T}/{name}.dry.json"))["stages"][0]["memory"]
    pa = dry["activations"] + dry["logits"] + dry["workspace"]
    for r, m in enumerate(ranks(name)):
        mp = m["mem_peak"]
        da = abs(mp["activations"] - pa) / pa
        db = abs(mp["buffers"] - dry["comm"]) / dry["comm"] if dry["comm"] else (0 if mp["buffers"] == 0 else 1)
        check(f"{name} rank {r}: dry-run activations {pa} B vs measured {mp['activations']} B ({100 * da:.2f} %), "
              f"comm {dry['comm']} B vs buffers {mp['buffers']} B ({100 * db:.2f} %), params/grads/optimizer exact",
              da <= 0.05 and db <= 0.05 and dry["params"] == mp["params"] and dry["grads"] == mp["grads"]
              and dry["optimizer"] == mp["optimizer"])
# the ring's traffic: what the dry-run says one step sends on the cp group, against
# what the first step sent (comm_bytes_sent: payload and framing)
for name in ("cp-2", "cp-4", "dp-2_cp-2_mode-fsdp", "cp-2_tp-2_sp-1"):
    dry = {c["group"]: c["bytes"] for c in json.load(open(f"{T}/{name}.dry.json"))["stages"][0]["comm"]}
    first = sorted(glob.glob(f"{T}/{name}.rank0.jsonl"))[0]
    sent = [json.loads(l) for l in open(first) if l.strip()][0]["bytes_sent"]["cp"]
    check(f"{name}: cp ring sent {sent} B in step 1, dry-run {dry['cp']:.0f} B ({100 * (sent / dry['cp'] - 1):+.2f} %)",
          abs(sent / dry["cp"] - 1) <= 0.05)
sys.exit(0 if ok else 1)
PY
