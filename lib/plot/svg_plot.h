/* svg_plot.h — runs drawn side by side in one SVG: three panels, loss (train
 * solid, validation dashed), throughput (tokens/s or images/s) and peak
 * accounted memory per rank (MiB; a dash pattern per rank), each with axes,
 * round ticks and units; a colour per run and a legend. */
#ifndef DTRUN_PLOT_SVG_PLOT_H
#define DTRUN_PLOT_SVG_PLOT_H

#include <stdio.h>

#include "lib/plot/run_series.h"

/* 0, or -1 when writing failed. */
int svg_plot_write(FILE *f, const run_series *runs, int n_runs);

#endif
