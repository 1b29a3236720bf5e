/* generate.h — `dtrun generate CKPT|HF_DIR --prompt TEXT [--prompt-ids 1,2,3]
 * [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
 * [--tp N] [--ids]`.
 *
 * Samples from a GPT with a KV cache (runtime/model/decode.c): the prompt is
 * fed token by token, then each new token is drawn (sample.h) and fed back.
 * Tokens stream to stdout as they come (the text, or with --ids the ids,
 * comma-separated); a line on stderr at the end says how many and how fast.
 * With --tp N the launcher starts N workers and the model runs tensor-
 * parallel over them (the logits gathered over tp: every rank draws the same
 * token); rank 0 writes. Deterministic under --seed, on any tp.
 *
 * Exit statuses (dtrun(1)): 2 bad flags, a prompt the model cannot take (no
 * tokenizer for its vocabulary, longer than its positions), a ViT source, an
 * HF config dtrun cannot run; 6 a source that is neither a checkpoint nor an
 * HF folder, or whose tensors do not fit. */
#ifndef DTRUN_INFER_GENERATE_H
#define DTRUN_INFER_GENERATE_H

/* argv[0] = "generate". Returns the exit status. */
int generate_command(int argc, char **argv);

#endif
