/* exit_codes.h — every exit status dtrun gives, for cmd/, lib/ and runtime/
 * alike. man/dtrun.1 (EXIT STATUS) documents each; test/unit/test_exit_codes.c
 * checks that the two lists agree. A worker's status passes through the agent
 * unchanged, so the trainer's codes are the launcher's too. */
#ifndef DTRUN_UTIL_EXIT_CODES_H
#define DTRUN_UTIL_EXIT_CODES_H

#define DT_EXIT_OK          0   /* success; a run stopped by a signal after saving */
#define DT_EXIT_FAIL        1   /* launcher failure (rendezvous, node lost, spawn) or any other error */
#define DT_EXIT_USAGE       2   /* bad option, bad job file, inconsistent Slurm environment */
#define DT_EXIT_DATA        3   /* data missing or malformed */
#define DT_EXIT_COMM        4   /* communication error (a peer died, timed out) */
#define DT_EXIT_NONFINITE   5   /* non-finite loss */
#define DT_EXIT_CKPT        6   /* checkpoint missing, corrupt, of another model, or a save failed */
#define DT_EXIT_NOEXEC      126 /* the program could not be executed */
#define DT_EXIT_NOTFOUND    127 /* the program was not found */
#define DT_EXIT_SIGNAL_BASE 128 /* 128 + S: killed by (or stopped on) signal S */

#endif
