"""Model FLOPs of one training item (forward + backward), the formula of dtrun's
model_flops_per_sample (runtime/model/params.c) for the benchmark rows that do not
come from dtrun (PyTorch, llm.c), so that every row's MFU counts the same work:

  6 * (weight elements of every matmul x rows through it) + 12 * L * seq^2 * C

(attention's QK^T and AV, the causal mask's savings not counted, as PaLM's MFU;
recomputation never counted). test/integration/gpu_bench_cpu.sh checks both
functions against gpu_train's numbers. No torch import: the table uses it too."""

PRESETS = {
    # name: (kind, L, H, C) -- dtrun's presets (lib/job/jobspec_presets.c)
    "gpt2-124m": ("gpt", 12, 12, 768),
    "gpt2-350m": ("gpt", 24, 16, 1024),
    "vit-b16": ("vit", 12, 12, 768),
}
GPT2_VOCAB, GPT2_SEQ = 50257, 1024
VIT_IMAGE, VIT_PATCH, VIT_CHANNELS, VIT_CLASSES = 224, 16, 3, 1000


def gpt_per_token(L, C, V, T, F=None):
    """Per token: blocks (qkv 3C^2, proj C^2, fc and its projection 2 C F) and
    the LM head V C on T rows each, attention 12 L T^2 C per sample."""
    F = 4 * C if F is None else F
    return 6 * L * (4 * C * C + 2 * C * F) + 6 * V * C + 12 * L * T * C


def vit_per_image(L, C, image=VIT_IMAGE, patch=VIT_PATCH, channels=VIT_CHANNELS,
                  classes=VIT_CLASSES, F=None):
    """Per image: blocks on NP + 1 rows (class token), the patch projection on
    NP rows, the classifier on one."""
    F = 4 * C if F is None else F
    n_patch = (image // patch) ** 2
    seq = n_patch + 1
    return (6 * L * (4 * C * C + 2 * C * F) * seq + 12 * L * seq * seq * C
            + 6 * C * channels * patch * patch * n_patch + 6 * classes * C)


def per_item(preset):
    """FLOPs per token (GPT presets) or per image (ViT presets)."""
    kind, L, _, C = PRESETS[preset]
    return gpt_per_token(L, C, GPT2_VOCAB, GPT2_SEQ) if kind == "gpt" else vit_per_image(L, C)
