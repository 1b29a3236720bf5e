#!/usr/bin/env bash
# Exact resume and resharding through real checkpoints (tiny GPT / ViT, fp32, 40
# steps, the launcher with N workers).
#
# Exact resume: 40 steps in one go and 20 (stopped after step 20 with a
# checkpoint, DTRUN_TEST_STOP_STEP = what SIGUSR1 does) + resume + 20 under the
# same layout give bitwise identical final parameters (DTRUN_DUMP_PARAMS), the
# same loss at every step in the metrics file and the same loss tail, to the
# last bit, in the final index.json.
#
# Resharding: the first 20 steps under layout A, the last 20 under layout B
# from A's checkpoint (checkpoint.resume: A's directory); the whole run must be
# the single-process run within the layout tolerance (lib.bash: loss relative
# 1e-5 at every step, parameters 1e-4). Two pairs use gpt-odd-vocab, whose
# 67 vocabulary rows tp 2 and tp 4 split unevenly; two change model.attention
# between the halves (naive to fused, fused to naive).
source "$(dirname "$0")/../parallel/ckpt.bash"

ckpt_exact gpt-tiny "dp=2 tp=2"
ckpt_exact gpt-tiny "pp=2 sched=1f1b dp=2 mode=fsdp"
ckpt_exact vit-tiny "dp=2 mode=zero2"

reshard gpt-tiny "dp=2 tp=2" "pp=2 sched=1f1b dp=2 mode=fsdp"
reshard gpt-tiny "dp=4" "dp=2 mode=zero2"
reshard gpt-tiny "dp=2 mode=zero1" "tp=2"
reshard gpt-tiny "pp=2 sched=gpipe tp=2" "dp=4 mode=fsdp"
reshard vit-tiny "dp=2 tp=2 mode=fsdp" "pp=2 sched=1f1b dp=2"
# a vocabulary of 67 rows that tp splits unevenly: 33 + 34 rows back to one
# rank's 67, and 16 + 17 + 17 + 17 to a pipeline's two tied copies of 33 + 34
reshard gpt-odd-vocab "tp=2" "dp=2"
reshard gpt-odd-vocab "tp=4" "pp=2 sched=1f1b tp=2"
# model.attention changes no weight: a checkpoint of naive attention resumes
# under fused and back (the same function, within the layout tolerance)
reshard gpt-tiny "attn=naive" "tp=2"
reshard vit-tiny "dp=2" "dp=2 attn=naive"
echo "ok: exact resume (3 layouts), resharding (7 layout pairs), across attention kinds (2 pairs)"
