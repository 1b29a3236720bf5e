/* svg_plot.h — runs drawn side by side in one SVG: three panels, loss (train
 * solid, validation dashed), throughput (tokens/s or images/s), each a colour
 * per run, and memory per rank (MiB: the accounted peak solid, the OS's peak
 * RSS dotted when recorded; a colour per rank, a marker per run), each with
 * axes, round ticks, units and a caption saying what it plots; a legend with
 * one entry per meaning. */
#ifndef DTRUN_PLOT_SVG_PLOT_H
#define DTRUN_PLOT_SVG_PLOT_H

#include <stdio.h>

#include "lib/plot/run_series.h"

/* 0, or -1 when writing failed. */
int svg_plot_write(FILE *f, const run_series *runs, int n_runs);

#endif
