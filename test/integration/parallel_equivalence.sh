#!/usr/bin/env bash
# Layout independence (DESIGN.md): a tiny GPT and a tiny ViT (fp32, synthetic
# data, 20 steps) under a representative set of layouts — every strategy (DDP,
# ZeRO-1, ZeRO-2, FSDP, HSDP across two agents as two nodes, tensor parallel,
# GPipe / 1F1B / interleaved pipelines) and every pairwise combination — must
# reproduce the single-process run: the loss at every step (and the validation
# loss) within a relative 1e-5, the final parameters within 1e-4.
#
# Why these tolerances: layouts only change the order of float sums (gradient
# accumulation over ranks and micro-batches, matmuls over smaller batches), so
# losses agree to ~1e-7 relative. Parameters agree to ~1e-5 after 20 AdamW
# steps: the worst elements are those whose true gradient is exactly zero (the
# attention key bias: softmax ignores a per-row constant), where Adam turns
# float noise of ~1e-10 into steps of lr * noise / eps. A bug (a missed
# reduction, a wrong scale, a stale shard) moves the first step's loss by far
# more than 1e-5 and the parameters by ~lr = 3e-3.
#
# Sequence parallelism (sp=1) on top of tp 2: alone, under ZeRO-2 and FSDP, in a
# 1F1B pipeline (with and without recompute), with selective recompute, for the
# GPT and for a ViT whose 10 tokens an image split over tp 2 (vit-sp: vit-tiny's
# 5 do not).
#
# Selective recompute (the attention probabilities rebuilt in backward) drops
# what naive attention keeps (model.attention: naive, attn=naive: compared with
# a naive single process): one process, bitwise equal to that reference; FSDP,
# a tp 2 x pp 2 1F1B pipeline and tp 2 with sequence parallelism, within the
# tolerances above. With fused attention (the default) there is nothing to
# drop: selective is none, bitwise.
#
# A vocabulary that tp does not divide (gpt-odd-vocab: 67 rows, 33 + 34 over tp
# 2, 16 + 17 + 17 + 17 over tp 4): the embedding lookup, the vocab-parallel
# cross-entropy's reductions, FSDP's flat shards of unequal units and the tied
# wte summed between the first and last pipeline stage, with no padded rows.
#
# The whole matrix runs under DTRUN_TEST_FULL=1 (parallel_matrix.sh).
source "$(dirname "$0")/../parallel/lib.bash"

LAYOUTS=(
  "dp=2"
  "dp=4"
  "dp=2 accum=2"
  "dp=2 mode=zero1"
  "dp=2 mode=zero2 accum=2"
  "dp=4 mode=fsdp"
  "dp=4 mode=hsdp nodes=2"
  "tp=2"
  "dp=2 tp=2"
  "dp=2 tp=2 mode=zero2"
  "dp=2 tp=2 mode=fsdp"
  "pp=2 sched=gpipe"
  "pp=4 sched=1f1b"
  "pp=2 sched=interleaved tp=2"
  "pp=2 sched=1f1b dp=2"
  "pp=2 sched=1f1b dp=2 mode=zero2"
  "pp=2 sched=gpipe dp=2 mode=fsdp"
  "pp=2 sched=interleaved dp=2 tp=2 mode=zero1"
  "dp=2 mode=fsdp recompute=block"
  "pp=2 sched=1f1b tp=2 recompute=block"
  "dp=2 mode=fsdp recompute=selective attn=naive"
  "pp=2 sched=1f1b tp=2 recompute=selective attn=naive"
  "tp=2 attn=naive"
)
SP_LAYOUTS=(
  "tp=2 sp=1"
  "dp=2 tp=2 mode=zero2 sp=1"
  "dp=2 tp=2 mode=fsdp sp=1"
  "pp=2 sched=1f1b tp=2 sp=1"
  "pp=2 sched=1f1b tp=2 recompute=block sp=1"
  "tp=2 sp=1 recompute=selective attn=naive"
)
for model in gpt-tiny vit-tiny; do
  # Selective recompute on one process re-runs the same attention kernel on the
  # same qkv, so its probabilities, and the whole run, are bit for bit the
  # reference's (recompute none): no tolerance at all. Fused: nothing rerun.
  LOSS_RTOL=0 PARAM_ATOL=0 run_layout "$model" "recompute=selective attn=naive"
  LOSS_RTOL=0 PARAM_ATOL=0 run_layout "$model" "recompute=selective"
  for lay in "${LAYOUTS[@]}"; do run_layout "$model" "$lay"; done
done
for model in gpt-tiny vit-sp; do
  for lay in "${SP_LAYOUTS[@]}"; do run_layout "$model" "$lay"; done
done
ODD_VOCAB_LAYOUTS=(
  "tp=2"
  "tp=4"
  "dp=2 tp=2 mode=fsdp"
  "pp=2 sched=1f1b tp=2"
  "tp=2 sp=1"
)
for lay in "${ODD_VOCAB_LAYOUTS[@]}"; do run_layout gpt-odd-vocab "$lay"; done
# DDP / ZeRO-1 buckets that cut units and gather several pieces (bucket_mb 1 on
# units of ~1.7 MiB), with accumulation.
run_layout gpt-wide "dp=2 bucket_mb=1"
run_layout gpt-wide "dp=2 mode=zero1 bucket_mb=1 accum=2"
# The default 25 MiB bucket behind PyTorch's 1 MiB first one: the first cuts the
# head's unit, the second gathers the rest.
run_layout gpt-wide "dp=2"
run_layout gpt-wide "dp=2 mode=zero1"
summary
[ $FAILS -eq 0 ] || fail "$FAILS layouts differ from one process"
