/* jobspec_presets.c — the preset table.
 *
 * GPT-2 shapes follow the OpenAI release (vocab 50257, context 1024); the 13B and
 * 70B shapes exist for --dry-run planning and use the llm.c-padded vocabulary
 * 50304 (a multiple of 128, so any power-of-two tp divides it). gpt-70b has
 * Llama-2-70B's width and depth and its parameter count per layer on our plain
 * block (GQA + SwiGLU 3 x 28672 there = 4 C^2 + 2 C d_ff with d_ff 35840 here). vit-3b is a ~3.2e9
 * parameter ViT: 64 blocks of d 2048 (12 * 64 * 2048^2 = 3.22e9).
 *
 * Llama shapes: llama3-8b/70b/405b are the Llama 3 paper's (Dubey et al. 2024,
 * Table 3: layers, width, FFN, heads, 8 key/value heads, vocabulary 128256,
 * RoPE base 500000) at its pre-training sequence of 8192; smollm-135m is
 * SmolLM-135M's config.json (tied head, RoPE base 10000, 2048 positions);
 * llama-tiny trains in seconds on a CPU (GQA: 4 heads over 2 kv heads). */
#include "lib/job/jobspec_presets.h"

#include <string.h>

static const job_preset presets[] = {
    /* name          kind       L   H     d   d_ff  vocab   seq  img patch ch classes  kv  theta   tied */
    {"gpt-tiny",   MODEL_GPT,  2,  2,   32,     0,   256,   32,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-small",  MODEL_GPT,  4,  4,  256,     0,   256,  256,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-124m",  MODEL_GPT, 12, 12,  768,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-350m",  MODEL_GPT, 24, 16, 1024,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-774m",  MODEL_GPT, 36, 20, 1280,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt2-1.5b",  MODEL_GPT, 48, 25, 1600,     0, 50257, 1024,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-13b",    MODEL_GPT, 40, 40, 5120,     0, 50304, 2048,   0,  0, 0,    0,  0,      0, 0},
    {"gpt-70b",    MODEL_GPT, 80, 64, 8192, 35840, 50304, 4096,   0,  0, 0,    0,  0,      0, 0},
    {"vit-tiny",   MODEL_VIT,  2,  2,   32,     0,     0,    0,  28,  7, 1,   10,  0,      0, 0},
    {"vit-fmnist", MODEL_VIT,  4,  4,   64,     0,     0,    0,  28,  4, 1,   10,  0,      0, 0},
    {"vit-b16",    MODEL_VIT, 12, 12,  768,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"vit-l16",    MODEL_VIT, 24, 16, 1024,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"vit-h14",    MODEL_VIT, 32, 16, 1280,     0,     0,    0, 224, 14, 3, 1000,  0,      0, 0},
    {"vit-3b",     MODEL_VIT, 64, 16, 2048,     0,     0,    0, 224, 16, 3, 1000,  0,      0, 0},
    {"llama-tiny",  MODEL_LLAMA,   2,   4,    32,    64,    256,   32, 0, 0, 0, 0, 2, 10000, 0},
    {"smollm-135m", MODEL_LLAMA,  30,   9,   576,  1536,  49152, 2048, 0, 0, 0, 0, 3, 10000, 1},
    {"llama3-8b",   MODEL_LLAMA,  32,  32,  4096, 14336, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
    {"llama3-70b",  MODEL_LLAMA,  80,  64,  8192, 28672, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
    {"llama3-405b", MODEL_LLAMA, 126, 128, 16384, 53248, 128256, 8192, 0, 0, 0, 0, 8, 500000, 0},
};

#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const job_preset *job_preset_find(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

const job_preset *job_preset_at(int i)
{
    return i >= 0 && i < N_PRESETS ? &presets[i] : NULL;
}

const job_preset *job_preset_tiny(model_kind kind)
{
    return job_preset_find(kind == MODEL_VIT ? "vit-tiny" : kind == MODEL_LLAMA ? "llama-tiny" : "gpt-tiny");
}

void job_preset_apply(const job_preset *p, job_model *m)
{
    m->kind = p->kind;
    m->n_layer = p->n_layer;
    m->n_head = p->n_head;
    m->d_model = p->d_model;
    m->d_ff = p->d_ff ? p->d_ff : 4 * p->d_model;
    m->vocab_size = p->vocab_size;
    m->seq_len = p->seq_len;
    m->image_size = p->image_size;
    m->patch_size = p->patch_size;
    m->channels = p->channels;
    m->n_classes = p->n_classes;
    m->n_kv_head = p->n_kv_head;
    m->rope_theta = p->rope_theta;
    m->tie_embeddings = p->tie_embeddings;
    m->max_positions = 0;
}

const char *job_preset_name(int i)
{
    const job_preset *p = job_preset_at(i);
    return p ? p->name : NULL;
}

int job_preset_model(const char *name, job_model *out)
{
    const job_preset *p = job_preset_find(name);
    if (!p) return -1;
    memset(out, 0, sizeof *out);
    job_preset_apply(p, out);
    size_t n = strlen(p->name);
    memcpy(out->preset, p->name, n + 1);
    return 0;
}
