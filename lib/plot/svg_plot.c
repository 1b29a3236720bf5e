/* svg_plot.c — see svg_plot.h. Plain SVG 1.1 with no script and no external
 * resource, so any browser opens it as it is.
 *
 * One meaning, one encoding, one legend entry:
 *   colour of a loss or throughput line   the run
 *   solid / dashed loss line              train / validation loss
 *   colour of a memory line               the rank
 *   marker shape on a memory line         the run (shown beside its name)
 *   solid / dotted memory line            accounted peak / the OS's peak RSS
 *   solid / dashed MoE line               the worst block's load imbalance /
 *                                         the balance loss per MoE block
 *                                         (a fourth panel, with model.moe)
 * Ranks whose memory is equal draw one line over the other, so each rank puts
 * its markers on its own points (rank r on every R-th marked point, from the
 * r-th): equal curves show alternating colours, and the key says which ranks
 * are equal. */
#include "lib/plot/svg_plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { PANEL_W = 420, PANEL_H = 300, MARGIN_L = 70, MARGIN_T = 60, GAP = 40, KEY_H = 22, MARKS_MAX = 24 };

static const char *const RUN_COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                         "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
#define N_RUN_COLORS 10
/* ranks: a palette apart from the runs' (Okabe-Ito and Tol's), none black or grey */
static const char *const RANK_COLORS[] = {"#e69f00", "#56b4e9", "#009e73", "#cc79a7",
                                          "#d55e00", "#999933", "#882255", "#44aa99"};
#define N_RANK_COLORS 8
#define N_SHAPES 4
static const char *const DASH_VAL = "6,4", *const DASH_RSS = "2,3";

typedef struct {
    double x0, x1, y0, y1;
} bounds;

/* A round tick spacing: 1, 2 or 5 times a power of ten, about 5 ticks. */
static double tick_step(double range)
{
    if (!(range > 0)) return 1;
    double raw = range / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void grow(bounds *b, const series *s)
{
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !isfinite(s->y[i])) continue;
        if (s->x[i] < b->x0) b->x0 = s->x[i];
        if (s->x[i] > b->x1) b->x1 = s->x[i];
        if (s->y[i] < b->y0) b->y0 = s->y[i];
        if (s->y[i] > b->y1) b->y1 = s->y[i];
    }
}

/* Rounds the bounds out to whole ticks (and gives an empty range some room). */
static void round_out(bounds *b, double *xs, double *ys)
{
    if (b->x0 > b->x1) *b = (bounds){0, 1, 0, 1};
    if (b->x1 - b->x0 < 1e-12) b->x1 = b->x0 + 1;
    if (b->y1 - b->y0 < 1e-12 * (fabs(b->y1) + 1)) b->y0 -= 0.5 * (fabs(b->y0) + 1e-3), b->y1 += 0.5 * (fabs(b->y1) + 1e-3);
    *xs = tick_step(b->x1 - b->x0);
    *ys = tick_step(b->y1 - b->y0);
    b->x0 = floor(b->x0 / *xs) * *xs;
    b->x1 = ceil(b->x1 / *xs) * *xs;
    b->y0 = floor(b->y0 / *ys) * *ys;
    b->y1 = ceil(b->y1 / *ys) * *ys;
}

static void fmt_num(char *buf, size_t n, double v, double step)
{
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e6) snprintf(buf, n, "%.3gM", v / 1e6);
    else if (fabs(v) >= 1e4) snprintf(buf, n, "%.4gk", v / 1e3);
    else snprintf(buf, n, "%.6g", v);
}

typedef struct {
    FILE *f;
    int ox, oy; /* the panel's top-left corner */
    bounds b;
    int log_y;  /* y on a log scale (b.y0 > 0) */
} panel;

static double px(const panel *p, double x) { return p->ox + MARGIN_L + (x - p->b.x0) / (p->b.x1 - p->b.x0) * (PANEL_W - MARGIN_L - 10); }
static double py(const panel *p, double y)
{
    double f = p->log_y ? (log10(y) - log10(p->b.y0)) / (log10(p->b.y1) - log10(p->b.y0))
                        : (y - p->b.y0) / (p->b.y1 - p->b.y0);
    return p->oy + MARGIN_T + (1 - f) * PANEL_H;
}

/* Memory panels whose curves differ by more than this factor (a small run's
 * accounted bytes beside the process's RSS) go on a log scale, else the
 * smaller would lie flat on the axis. */
#define LOG_RATIO 20.0

/* Log-scale bounds: whole decades around the data. */
static void round_out_log(bounds *b, double *xs)
{
    double lo = b->y0, hi = b->y1;
    round_out(b, xs, &(double){0});
    b->y0 = pow(10, floor(log10(lo)));
    b->y1 = pow(10, ceil(log10(hi)));
    if (b->y1 <= b->y0) b->y1 = b->y0 * 10;
}

/* The next tick above y on a log scale: 1, 2, 5 x 10^k within three decades,
 * decades beyond. */
static double next_log_tick(const panel *p, double y)
{
    double decade = pow(10, floor(log10(y) + 1e-9)), m = y / decade;
    if (log10(p->b.y1 / p->b.y0) > 3.5) return decade * 10;
    return m < 1.5 ? 2 * decade : m < 3.5 ? 5 * decade : 10 * decade;
}

/* Opens the panel's group: its title, a caption under it saying what is
 * plotted, the grid with tick labels, the frame and the axis labels. */
static void axes(panel *p, const char *id, const char *title, const char *caption, const char *ylabel, double xs,
                 double ys)
{
    FILE *f = p->f;
    double left = px(p, p->b.x0), right = px(p, p->b.x1), top = py(p, p->b.y1), bottom = py(p, p->b.y0);
    fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", id);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"15\" font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
            (left + right) / 2, p->oy + 22, title);
    fprintf(f, "<text class=\"caption\" x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">%s</text>\n",
            (left + right) / 2, p->oy + 40, caption);
    for (double x = p->b.x0; x <= p->b.x1 + xs * 1e-9; x += xs) {
        char t[32];
        fmt_num(t, sizeof t, x, xs);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                px(p, x), top, px(p, x), bottom + 5, px(p, x), bottom + 18, t);
    }
    for (double y = p->b.y0; y <= p->b.y1 * (1 + 1e-9); y = p->log_y ? next_log_tick(p, y) : y + ys) {
        if (!p->log_y && y > p->b.y1 + ys * 1e-9) break;
        char t[32];
        fmt_num(t, sizeof t, y, p->log_y ? y : ys);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                left - 5, py(p, y), right, py(p, y), left - 8, py(p, y) + 4, t);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#000\"/>\n", left,
            top, right - left, bottom - top);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">step</text>\n", (left + right) / 2,
            bottom + 36);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
            (double)p->ox + 14, (top + bottom) / 2, (double)p->ox + 14, (top + bottom) / 2, ylabel);
}

/* A marker of `shape` (circle, square, triangle, diamond) centred at (x, y). */
static void marker(FILE *f, int shape, double x, double y, const char *color)
{
    switch (shape % N_SHAPES) {
    case 0: fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>", x, y, color); break;
    case 1: fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"/>", x - 3.5, y - 3.5, color); break;
    case 2:
        fprintf(f, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>", x, y - 4.5, x - 4.5, y + 3.5,
                x + 4.5, y + 3.5, color);
        break;
    default:
        fprintf(f, "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\"/>", x, y - 5, x + 5, y,
                x, y + 5, x - 5, y, color);
        break;
    }
}

/* The polyline of s. marks: which points get a `shape` marker: every point
 * (few points), none (NULL), or the staggered share of one rank of n_ranks. */
typedef struct {
    int all, rank, n_ranks, shape;
} marks;

static void line(const panel *p, const series *s, const char *color, const char *dash, const char *cls,
                 const marks *mk, int rank)
{
    if (s->n == 0) return;
    fprintf(p->f, "<polyline class=\"%s\"", cls);
    if (rank >= 0) fprintf(p->f, " data-rank=\"%d\"", rank);
    fprintf(p->f, " fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"", color,
            dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i])) fprintf(p->f, "%.1f,%.1f ", px(p, s->x[i]), py(p, s->y[i]));
    fprintf(p->f, "\"/>\n");
    if (!mk) return;
    /* a marker every `k`-th point at most MARKS_MAX per line; a rank takes
     * the marked points r, r + R, r + 2R, ... of them */
    int k = mk->all ? 1 : (int)ceil((double)s->n / MARKS_MAX);
    if (k < 1) k = 1;
    int first = mk->all ? 0 : mk->rank * k, stride = mk->all ? 1 : mk->n_ranks * k;
    if (first >= s->n) first = s->n - 1; /* fewer points than ranks: the last */
    fprintf(p->f, "<g class=\"%s-marks\">", cls);
    for (int i = first; i < s->n; i += stride)
        if (isfinite(s->y[i])) marker(p->f, mk->shape, px(p, s->x[i]), py(p, s->y[i]), color);
    fprintf(p->f, "</g>\n");
}

/* One legend entry: a short line in its style (and a marker), then its text. */
static void key(FILE *f, double x, double y, const char *color, const char *dash, int shape, const char *label)
{
    fprintf(f, "<g class=\"key\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>",
            x, y, x + 28, y, color, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
    if (shape >= 0) marker(f, shape, x + 14, y, color);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text></g>\n", x + 36, y + 4, label);
}

static void key_heading(FILE *f, double x, double y, const char *text)
{
    fprintf(f, "<text class=\"key-heading\" x=\"%.1f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">%s</text>\n", x,
            y, text);
}

/* XML-escapes a run name into buf. */
static void escape(char *buf, size_t n, const char *s)
{
    size_t o = 0;
    for (; *s && o + 7 < n; s++) {
        const char *e = *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '&' ? "&amp;" : *s == '"' ? "&quot;" : NULL;
        if (e) o += (size_t)snprintf(buf + o, n - o, "%s", e);
        else buf[o++] = *s;
    }
    buf[o] = 0;
}

static int same_series(const series *a, const series *b)
{
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->x[i] != b->x[i] || a->y[i] != b->y[i]) return 0;
    return 1;
}

/* The lowest rank whose accounted memory equals rank q's in every run that
 * has both, or q itself. */
static int equal_to(const run_series *runs, int n_runs, int q)
{
    for (int e = 0; e < q; e++) {
        int same = 1, both = 0;
        for (int r = 0; r < n_runs && same; r++) {
            if (runs[r].n_ranks <= q) continue;
            both = 1;
            same = same_series(&runs[r].mem[e], &runs[r].mem[q]);
        }
        if (same && both) return e;
    }
    return q;
}

int svg_plot_write(FILE *f, const run_series *runs, int n_runs)
{
    int any_images = 0, any_tokens = 0, max_ranks = 0, any_rss = 0, any_moe = 0;
    for (int r = 0; r < n_runs; r++) {
        any_moe |= runs[r].moe_imbalance.n > 0;
        any_images |= runs[r].images && runs[r].throughput.n;
        any_tokens |= !runs[r].images && runs[r].throughput.n;
        if (runs[r].n_ranks > max_ranks) max_ranks = runs[r].n_ranks;
        for (int q = 0; q < runs[r].n_ranks; q++) any_rss |= runs[r].rss[q].n > 0;
    }
    int memory_keys = max_ranks + 1 + any_rss, rows = n_runs > 2 ? n_runs : 2;
    if (memory_keys > rows) rows = memory_keys;
    if (any_moe && rows < 4) rows = 4; /* the loss lines' keys and the MoE lines' */
    int panels = 3 + any_moe;
    int width = panels * PANEL_W + (panels - 1) * GAP + 20, height = MARGIN_T + PANEL_H + 70 + KEY_H * (rows + 1);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<title>dtrun plot: loss, throughput and memory of %d run%s</title>\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            width, height, width, height, n_runs, n_runs == 1 ? "" : "s");
    const char *unit = any_images && any_tokens ? "tokens/s or images/s" : any_images ? "images/s" : "tokens/s";
    for (int k = 0; k < panels; k++) {
        panel p = {.f = f, .ox = 10 + k * (PANEL_W + GAP), .oy = 0, .b = {INFINITY, -INFINITY, INFINITY, -INFINITY}};
        for (int r = 0; r < n_runs; r++) {
            if (k == 0) grow(&p.b, &runs[r].loss), grow(&p.b, &runs[r].val_loss);
            if (k == 1) grow(&p.b, &runs[r].throughput);
            if (k == 2)
                for (int q = 0; q < runs[r].n_ranks; q++) grow(&p.b, &runs[r].mem[q]), grow(&p.b, &runs[r].rss[q]);
            if (k == 3) grow(&p.b, &runs[r].moe_imbalance), grow(&p.b, &runs[r].moe_aux);
        }
        p.log_y = k == 2 && p.b.y0 > 0 && p.b.y1 / p.b.y0 > LOG_RATIO;
        if (k >= 1 && p.b.y0 > 0 && !p.log_y) p.b.y0 = 0; /* throughput and memory from zero */
        double xs, ys = 0;
        if (p.log_y) round_out_log(&p.b, &xs);
        else round_out(&p.b, &xs, &ys);
        if (k == 0)
            axes(&p, "loss", "loss", "train (solid) and validation (dashed), a colour per run", "loss (nats)", xs, ys);
        else if (k == 1)
            axes(&p, "throughput", "throughput", "training steps, a colour per run", unit, xs, ys);
        else if (k == 3)
            axes(&p, "moe", "mixture of experts",
                 "worst block's load over the mean (solid), balance loss per block (dashed); 1 is balanced",
                 "max / mean load; aux loss", xs, ys);
        else
            axes(&p, "memory", "memory per rank",
                 any_rss ? p.log_y ? "bytes dtrun accounts for (solid), OS peak RSS (dotted); log scale"
                                   : "bytes dtrun accounts for (solid), OS peak RSS (dotted)"
                         : p.log_y ? "the bytes dtrun accounts for; log scale" : "the bytes dtrun accounts for",
                 "peak memory per rank (MiB)", xs, ys);
        for (int r = 0; r < n_runs; r++) {
            const char *color = RUN_COLORS[r % N_RUN_COLORS];
            marks every = {1, 0, 1, 0};
            if (k == 0) {
                line(&p, &runs[r].loss, color, "", "train-loss", NULL, -1);
                line(&p, &runs[r].val_loss, color, DASH_VAL, "val-loss", runs[r].val_loss.n < 30 ? &every : NULL, -1);
            }
            if (k == 1) line(&p, &runs[r].throughput, color, "", "throughput", NULL, -1);
            if (k == 3) {
                line(&p, &runs[r].moe_imbalance, color, "", "moe-imbalance", NULL, -1);
                line(&p, &runs[r].moe_aux, color, DASH_VAL, "moe-aux", NULL, -1);
            }
            if (k == 2)
                for (int q = 0; q < runs[r].n_ranks; q++) {
                    const char *rc = RANK_COLORS[q % N_RANK_COLORS];
                    marks mine = {0, q, runs[r].n_ranks, r};
                    line(&p, &runs[r].rss[q], rc, DASH_RSS, "rss", NULL, q);
                    line(&p, &runs[r].mem[q], rc, "", "memory", &mine, q);
                }
        }
        if (k == 2 && max_ranks == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" fill=\"#777\">no rank files "
                       "(STEM.rankN.jsonl) beside the runs</text>\n",
                    (px(&p, p.b.x0) + px(&p, p.b.x1)) / 2, py(&p, (p.b.y0 + p.b.y1) / 2));
        fprintf(f, "</g>\n");
    }
    /* the legend: three groups of keys, each entry one meaning */
    double ly = MARGIN_T + PANEL_H + 70, x_runs = 30, x_lines = 10 + PANEL_W + GAP + 30,
           x_mem = 10 + 2 * (PANEL_W + GAP) + 30;
    fprintf(f, "<g id=\"legend\">\n<g id=\"legend-runs\">\n");
    key_heading(f, x_runs, ly, max_ranks ? "runs (colour; marker in the memory panel)" : "runs (colour)");
    for (int r = 0; r < n_runs; r++) {
        char name[600];
        escape(name, sizeof name, runs[r].name);
        key(f, x_runs, ly + (r + 1) * KEY_H, RUN_COLORS[r % N_RUN_COLORS], "", max_ranks ? r : -1, name);
    }
    fprintf(f, "</g>\n<g id=\"legend-lines\">\n");
    key_heading(f, x_lines, ly, "loss lines");
    key(f, x_lines, ly + KEY_H, "#000", "", -1, "train loss");
    key(f, x_lines, ly + 2 * KEY_H, "#000", DASH_VAL, 0, "validation loss");
    if (any_moe) {
        key(f, x_lines, ly + 3 * KEY_H, "#000", "", -1, "MoE: worst load imbalance");
        key(f, x_lines, ly + 4 * KEY_H, "#000", DASH_VAL, -1, "MoE: balance loss per block");
    }
    fprintf(f, "</g>\n<g id=\"legend-memory\">\n");
    if (max_ranks > 0) {
        key_heading(f, x_mem, ly, "memory panel");
        for (int q = 0; q < max_ranks; q++) {
            char label[64];
            int e = equal_to(runs, n_runs, q);
            if (e != q) snprintf(label, sizeof label, "rank %d (equal to rank %d)", q, e);
            else snprintf(label, sizeof label, "rank %d", q);
            key(f, x_mem, ly + (q + 1) * KEY_H, RANK_COLORS[q % N_RANK_COLORS], "", -1, label);
        }
        key(f, x_mem, ly + (max_ranks + 1) * KEY_H, "#555", "", -1, "accounted peak");
        if (any_rss) key(f, x_mem, ly + (max_ranks + 2) * KEY_H, "#555", DASH_RSS, -1, "OS peak RSS");
    }
    fprintf(f, "</g>\n</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}
