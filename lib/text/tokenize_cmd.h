/* tokenize_cmd.h — `dtrun tokenize [options] FILE... -o PREFIX`: UTF-8 text
 * (one document a file, or JSONL) to llm.c token shards with GPT-2's BPE, a
 * validation split and <|endoftext|> between documents (man/dtrun.1). */
#ifndef DTRUN_TEXT_TOKENIZE_CMD_H
#define DTRUN_TEXT_TOKENIZE_CMD_H

/* argv[0] is "tokenize". Returns the exit status: 0, 2 bad flags, 3 an input
 * missing or not UTF-8 / not JSONL, 1 the output cannot be written. */
int tokenize_main(int argc, char **argv);

#endif
