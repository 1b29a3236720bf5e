#!/usr/bin/env python3
"""gpu_table.py ROWS.jsonl PEAK_FLOPS GPU_NAME: scripts/bench/gpu.sh's table.

One row per JSON line of gpu_train, gpu_torch.py and llmc_run.py (or a failed
row: {"impl", "model", "precision", "failed": true, "why"}). MFU = items/s x
flops.py's FLOPs per item / PEAK_FLOPS for every row, whatever the row says its
own FLOPs are (a difference is printed: the formulas must agree). Memory
columns in GiB: GPU (the driver's used memory as the process sampled it), smi
(nvidia-smi's peak during the row), dry-run (dtrun's prediction for the same
job) and their ratio. Then the ratios the goal is stated in and, for every
dtrun row, where its memory went by the dry-run's and the run's own counts."""
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flops import per_item  # noqa: E402


def gib(b):
    return f"{b / 2**30:.2f}" if b else "-"


def table(rows, peak, gpu, today=None):
    out = [f"GPU training throughput, {gpu}, {today or datetime.date.today()} "
           f"(MFU: model FLOPs / dense bf16 peak {peak / 1e12:.1f} TFLOP/s, every row)",
           f"{'impl':<16} {'model':<10} {'prec':<5} {'B':>3} {'step ms':>8} {'items/s':>14} {'MFU':>6} "
           f"{'GPU GiB':>8} {'smi GiB':>8} {'dry-run GiB':>11} {'meas/pred':>9}"]
    speed = {}
    for r in rows:
        if r.get("failed"):
            out.append(f"{r['impl']:<16} {r['model']:<10} {r.get('precision', ''):<5} FAILED: {r.get('why', '')}")
            continue
        f = per_item(r["model"])
        if abs(r["flops_per_item"] - f) > 1e-9 * f:
            out.append(f"# {r['impl']} {r['model']}: its own FLOPs per item {r['flops_per_item']:.6e} differ "
                       f"from flops.py's {f:.6e}; MFU uses flops.py's")
        mfu = r["items_per_s"] * f / peak
        ratio = r.get("mem_ratio")
        out.append(f"{r['impl']:<16} {r['model']:<10} {r['precision']:<5} {r['B']:>3} {r['step_ms']:>8.1f} "
                   f"{r['items_per_s']:>10.0f} {r['unit']:<3} {100 * mfu:>5.1f}% "
                   f"{gib(r.get('mem_measured_b')):>8} {gib(r.get('smi_peak_b')):>8} "
                   f"{gib(r.get('mem_predicted_b')):>11} {(f'{ratio:.2f}' if ratio else '-'):>9}")
        speed[(r["impl"], r["model"], r["precision"])] = r["items_per_s"]
    for model in sorted({k[1] for k in speed}):
        mine = {k[2]: v for k, v in speed.items() if k[0] == "dtrun" and k[1] == model}
        if not mine:
            continue
        prec, d = max(mine.items(), key=lambda kv: kv[1])
        for peer, pprec in (("pytorch+compile", "bf16"), ("pytorch+compile", "fp32"), ("llm.c", "bf16")):
            p = speed.get((peer, model, pprec))
            if p:
                out.append(f"ratio {model}: dtrun ({prec}) / {peer} ({pprec}) = {d / p:.2f}x")
    for r in rows:
        if r.get("impl") == "dtrun" and not r.get("failed") and r.get("mem_predicted_b"):
            out.append(f"memory {r['model']} {r['precision']}: measured {gib(r.get('mem_measured_b'))} GiB "
                       f"(the context alone {gib(r.get('mem_context_b'))}), dtrun's own accounting "
                       f"{gib(r.get('mem_accounted_b'))}, dry-run {gib(r['mem_predicted_b'])} on "
                       f"{r.get('hardware')} (fixed overheads {gib(r.get('mem_predicted_fixed_b'))} of it); "
                       f"dry-run speed {r.get('pred_items_per_s') or 0:.0f} {r['unit']}/s; "
                       f"synthetic data loader {r.get('data_ms', -1):.1f} ms of the step")
    out.append("goal (issue 7): >= 1.2x pytorch+compile bf16 tokens/s; >= 50% MFU on gpt2-350m")
    return "\n".join(out)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    print(table(rows, float(sys.argv[2]), sys.argv[3]))


if __name__ == "__main__":
    main()
