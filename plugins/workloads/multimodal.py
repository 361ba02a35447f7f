"""Multimodal inputs and outputs: visual tokens, encoder cache and language KV of images, and
the denoising cost of diffusion image generation (book ch. 3 §3.3.1–3.3.2, exercise 3-5).

``use vision`` (plan field ``model`` = the language backbone, for its KV bytes per token)::

    patches        = H·W / p²
    visual_tokens  = images · H·W / (p²·r²)                  (n_v, book §3.3.1)
    encoder_cache  = visual_tokens · feature_width · feature_groups · feature_bytes   (EC)
    kv_per_token   = 2 · n_L · n_kv · d_h · kv_bytes
    visual_kv      = visual_tokens · kv_per_token;   input_kv = (visual_tokens + text_tokens) · kv_per_token

Qwen3-VL-4B at 640×640, 16-pixel patches, 2×2 merge: 1,600 patches → 400 tokens; EC
[400, 4 × 2,560] BF16 = 8,192,000 B = 7.8125 MiB (DeepStack: the last layer and three
intermediate ones); KV 400 × 144 KiB = 56.25 MiB.  Four images + 400 text tokens: EC 31.25 MiB,
KV 281.25 MiB.  Doubling the side multiplies tokens, EC and KV by 4.

``use diffusion``: n_s denoising steps × n_b guidance branches DiT passes, each F_step:
``denoise_flops = n_s · n_b · F_step`` (50 steps × 2 CFG branches = 100 passes, book §3.3.2).
"""
from __future__ import annotations

from dsl.plugin import hookimpl
from dsl.plugin import Param, UseSpec
from plugins.model.llmstate import kv_bytes_per_token, kv_tokens

VISION = UseSpec(
    "vision",
    "images as visual tokens: encoder cache (EC) and language KV of the visual and text input",
    references=("visual tokens and the encoder cache: patches per image (Dosovitskiy et al. 2020, 'An Image is Worth "
                "16x16 Words'), encoded once and reused",),
    params=(
        Param("image_height", "", "640", "image height after preprocessing, pixels", min=0, min_open=True),
        Param("image_width", "", "640", "image width after preprocessing, pixels", min=0, min_open=True),
        Param("patch", "", "16", "side of a square patch p, pixels", min=0, min_open=True),
        Param("merge", "", "2", "patches merged along each side r", min=0, min_open=True),
        Param("images", "", "1", "images of this size in the input", min=0),
        Param("text_tokens", "token", "0 token", "text tokens of the input", min=0),
        Param("feature_width", "", "2560", "width of one feature vector of the encoder output", min=0,
              min_open=True),
        Param("feature_groups", "", "1", "feature groups kept per visual token (DeepStack: 4)", min=1),
        Param("feature_bytes", "B", "2 B", "bytes per feature element (BF16: 2)", min=0, min_open=True),
        Param("kv_bytes", "B", "2 B", "bytes of one K or V element of the language model", min=0,
              min_open=True),
    ),
    plan_params=(Param("model", kind="ref", ref_kind="model", doc="the language backbone"),),
    order=75,
    provides=("patches", "visual_tokens", "encoder_cache", "kv_per_token", "visual_kv", "input_kv"),
)

DIFFUSION = UseSpec(
    "diffusion",
    "denoising cost of diffusion image generation: n_s steps × n_b guidance branches DiT passes",
    references=("cost of diffusion image generation: denoising steps × guidance branches × FLOPs per step (Ho and "
                "Salimans 2022, 'Classifier-Free Diffusion Guidance')",),
    params=(
        Param("steps", "", "50", "denoising steps n_s", min=1),
        Param("branches", "", "2", "guidance branches per step n_b (true CFG: 2)", min=1),
        Param("step_flops", "FLOP", None, "FLOPs of one DiT forward pass F_step at this resolution", min=0),
    ),
    order=76,
    provides=("dit_passes", "denoise_flops"),
)


@hookimpl
def plan_blocks_register():
    return [VISION, DIFFUSION]


@hookimpl
def plan_quantities_price(ctx):
    b = ctx.block("vision")
    if b is not None:
        H, W, p, r = (b.q(x) for x in ("image_height", "image_width", "patch", "merge"))
        ctx.define("patches", b.q("images") * H * W / p ** 2, "", "H·W/p² per image, times images")
        nv = ctx.define("visual_tokens", b.q("images") * H * W / (p ** 2 * r ** 2), "token",
                        "n_v = H·W/(p²·r²) per image", headline=True,
                        references=("visual tokens: images · H·W / (p²·r²) for patch size p (Dosovitskiy et al. "
                                    "2020, 'An Image is Worth 16x16 Words') and merge factor r",))
        ctx.define("encoder_cache", nv * b.q("feature_width") * b.q("feature_groups") * b.q("feature_bytes"),
                   "MiB", "EC: visual tokens × feature width × groups × bytes", headline=True)
        ckv = ctx.define("kv_per_token", kv_bytes_per_token(ctx.ref("model"), b.q("kv_bytes")), "KiB/token",
                         "2·n_L·n_kv·d_h·bytes")
        # sliding-window layers hold at most their window (plugins.model.llmstate.kv_tokens)
        ctx.define("visual_kv", kv_tokens(ctx.ref("model"), nv) * ckv, "MiB", "language KV of the visual tokens", headline=True)
        ctx.define("input_kv", kv_tokens(ctx.ref("model"), nv + b.q("text_tokens")) * ckv, "MiB", "language KV of visual and text input",
                   headline=True)
    b = ctx.block("diffusion")
    if b is not None:
        passes = ctx.define("dit_passes", b.q("steps") * b.q("branches"), "", "n_s · n_b DiT forward passes",
                            headline=True)
        ctx.define("denoise_flops", passes * b.q("step_flops"), "PFLOP", "n_s · n_b · F_step",
                   headline=True, references=("denoising passes: steps × classifier-free guidance branches (Ho and "
                                              "Salimans 2022, 'Classifier-Free Diffusion Guidance')",))
