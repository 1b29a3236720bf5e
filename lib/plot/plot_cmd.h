/* plot_cmd.h — `dtrun plot RUN.jsonl... -o curves.svg` (man/dtrun.1). */
#ifndef DTRUN_PLOT_PLOT_CMD_H
#define DTRUN_PLOT_PLOT_CMD_H

/* argv[0] is "plot". Returns the exit status: 0, 2 bad flags, 3 a metrics
 * file missing or malformed, 1 the output cannot be written. */
int plot_main(int argc, char **argv);

#endif
