/* svg_plot.c — see svg_plot.h. Plain SVG 1.1 with no script and no external
 * resource, so any browser opens it as it is. */
#include "lib/plot/svg_plot.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { PANEL_W = 420, PANEL_H = 300, MARGIN_L = 70, MARGIN_T = 50, GAP = 40, LEGEND_H = 30 };

static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                     "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
static const char *const DASHES[] = {"", "6,4", "2,3", "10,3,2,3"};

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
} panel;

static double px(const panel *p, double x) { return p->ox + MARGIN_L + (x - p->b.x0) / (p->b.x1 - p->b.x0) * (PANEL_W - MARGIN_L - 10); }
static double py(const panel *p, double y) { return p->oy + MARGIN_T + (1 - (y - p->b.y0) / (p->b.y1 - p->b.y0)) * PANEL_H; }

static void axes(panel *p, const char *title, const char *ylabel, double xs, double ys)
{
    FILE *f = p->f;
    double left = px(p, p->b.x0), right = px(p, p->b.x1), top = py(p, p->b.y1), bottom = py(p, p->b.y0);
    fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", title[0] == 'l' ? "loss" : title[0] == 't' ? "throughput" : "memory");
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"15\" font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
            (left + right) / 2, p->oy + 25, title);
    for (double x = p->b.x0; x <= p->b.x1 + xs * 1e-9; x += xs) {
        char t[32];
        fmt_num(t, sizeof t, x, xs);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                px(p, x), top, px(p, x), bottom + 5, px(p, x), bottom + 18, t);
    }
    for (double y = p->b.y0; y <= p->b.y1 + ys * 1e-9; y += ys) {
        char t[32];
        fmt_num(t, sizeof t, y, ys);
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

static void line(const panel *p, const series *s, const char *color, const char *dash, const char *cls)
{
    if (s->n == 0) return;
    fprintf(p->f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"", cls, color,
            dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->y[i])) fprintf(p->f, "%.1f,%.1f ", px(p, s->x[i]), py(p, s->y[i]));
    fprintf(p->f, "\"/>\n");
    if (s->n < 30) /* few points (evaluations): mark each */
        for (int i = 0; i < s->n; i++)
            if (isfinite(s->y[i]))
                fprintf(p->f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(p, s->x[i]), py(p, s->y[i]), color);
}

static void key(FILE *f, double x, double y, const char *color, const char *dash, const char *label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>"
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n",
            x, y, x + 24, y, color, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "", x + 30, y + 4, label);
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

int svg_plot_write(FILE *f, const run_series *runs, int n_runs)
{
    int width = 3 * PANEL_W + 2 * GAP + 20, height = MARGIN_T + PANEL_H + 60 + LEGEND_H * (n_runs + 2);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<title>dtrun plot: loss, throughput and memory of %d run%s</title>\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            width, height, width, height, n_runs, n_runs == 1 ? "" : "s");
    int any_images = 0, any_tokens = 0, max_ranks = 0;
    for (int r = 0; r < n_runs; r++) {
        any_images |= runs[r].images && runs[r].throughput.n;
        any_tokens |= !runs[r].images && runs[r].throughput.n;
        if (runs[r].n_ranks > max_ranks) max_ranks = runs[r].n_ranks;
    }
    const char *unit = any_images && any_tokens ? "tokens/s or images/s" : any_images ? "images/s" : "tokens/s";
    for (int k = 0; k < 3; k++) {
        panel p = {.f = f, .ox = 10 + k * (PANEL_W + GAP), .oy = 0, .b = {INFINITY, -INFINITY, INFINITY, -INFINITY}};
        for (int r = 0; r < n_runs; r++) {
            if (k == 0) grow(&p.b, &runs[r].loss), grow(&p.b, &runs[r].val_loss);
            if (k == 1) grow(&p.b, &runs[r].throughput);
            if (k == 2)
                for (int q = 0; q < runs[r].n_ranks; q++) grow(&p.b, &runs[r].mem[q]);
        }
        if (k == 1 && p.b.y0 > 0) p.b.y0 = 0; /* throughput and memory from zero */
        if (k == 2 && p.b.y0 > 0) p.b.y0 = 0;
        double xs, ys;
        round_out(&p.b, &xs, &ys);
        char ylabel[64];
        snprintf(ylabel, sizeof ylabel, "%s", k == 0 ? "loss (nats)" : k == 1 ? unit : "peak memory per rank (MiB)");
        axes(&p, k == 0 ? "loss" : k == 1 ? "throughput" : "memory", ylabel, xs, ys);
        for (int r = 0; r < n_runs; r++) {
            const char *color = COLORS[r % 10];
            if (k == 0) line(&p, &runs[r].loss, color, "", "train-loss"), line(&p, &runs[r].val_loss, color, "6,4", "val-loss");
            if (k == 1) line(&p, &runs[r].throughput, color, "", "throughput");
            if (k == 2)
                for (int q = 0; q < runs[r].n_ranks; q++) line(&p, &runs[r].mem[q], color, DASHES[q % 4], "memory");
        }
        if (k == 2 && max_ranks == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" fill=\"#777\">no rank files "
                       "(STEM.rankN.jsonl) beside the runs</text>\n",
                    (px(&p, p.b.x0) + px(&p, p.b.x1)) / 2, py(&p, (p.b.y0 + p.b.y1) / 2));
        fprintf(f, "</g>\n");
    }
    /* legend: a colour per run, then what solid and dashed lines mean */
    double ly = MARGIN_T + PANEL_H + 60;
    fprintf(f, "<g id=\"legend\">\n");
    for (int r = 0; r < n_runs; r++) {
        char name[600];
        escape(name, sizeof name, runs[r].name);
        key(f, 30, ly + r * LEGEND_H, COLORS[r % 10], "", name);
    }
    double sy = ly + n_runs * LEGEND_H;
    key(f, 30, sy, "#000", "", "train loss; rank 0");
    key(f, 230, sy, "#000", "6,4", "validation loss; rank 1");
    if (max_ranks > 2) key(f, 460, sy, "#000", "2,3", "rank 2");
    if (max_ranks > 3) key(f, 600, sy, "#000", "10,3,2,3", "rank 3 (then again)");
    fprintf(f, "</g>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}
