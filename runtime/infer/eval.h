/* eval.h — `dtrun eval CKPT|HF_DIR --data FILE [--dp N --tp N --pp N
 * --mode M --batch B --seq-len T]`.
 *
 * The mean loss of the model over FILE (llm.c tokens, or any file as bytes
 * for a byte-level GPT; IDX images for a ViT checkpoint) and its perplexity
 * exp(loss), or a ViT's accuracy, under any layout: the launcher starts
 * dp x tp x pp workers, each loads its own slices, and the engine's
 * evaluation (engine_evaluate: the same numbers under every layout) runs
 * over FILE's windows of seq_len tokens (at most 64 batches of B; B default
 * 8). Rank 0 prints one line on stdout:
 *   eval SRC on FILE: loss 2.345678 | perplexity 10.44 | 4096 tokens | dp=1 tp=2 pp=1 ddp
 * DTRUN_DUMP_PARAMS=PATH writes the parameters evaluated (engine_dump_params).
 * Exit statuses as generate's (generate.h); 3 for data FILE cannot give. */
#ifndef DTRUN_INFER_EVAL_H
#define DTRUN_INFER_EVAL_H

/* argv[0] = "eval". Returns the exit status. */
int eval_command(int argc, char **argv);

#endif
