"""Dense decoder-only transformers: parameter counts from the architecture, and Hugging Face
``config.json`` import (``model NAME from "config.json"``).

Model fields (all dimensionless counts):

==================  =======================================================  =========
field               meaning                                                  default
==================  =======================================================  =========
layers              transformer blocks n_L                                   required
hidden              hidden size h                                            required
ffn                 FFN inner width f                                        required
heads               query heads n_q                                          required
kv_heads            key/value heads n_kv (GQA)                               heads
head_dim            per-head width d_h                                       hidden/heads
vocab               vocabulary size V                                        required
ffn_matrices        matrices in the FFN (3 for SwiGLU, 2 for a plain MLP)    3
tied_embeddings     LM head shares the embedding matrix                      false
qk_norm             per-head RMSNorm on q and k (Qwen3)                      false
qkv_bias            bias on the q, k, v projections (Qwen2)                  false
==================  =======================================================  =========

Derived fields (unit ``param``): ``params`` (all trainable parameters), ``embedding_params``
(V·h), ``lm_head_params`` (V·h, 0 when tied), ``layer_params`` (one block).

Per block: q and o projections 2·h·n_q·d_h, k and v 2·h·n_kv·d_h, FFN ffn_matrices·h·f,
two RMSNorm weights 2·h, plus 2·d_h for q/k norms and (n_q + 2·n_kv)·d_h biases when present;
one final norm h.  Qwen3-8B gives exactly 8,190,735,360 (the HF config's implied count).
"""
from __future__ import annotations

from dsl.hookspecs import hookimpl
from dsl.plugins import KindSpec, Param

MODEL_FIELDS = (
    Param("layers", doc="transformer blocks", kind="int", min=1),
    Param("hidden", doc="hidden size", kind="int", min=1),
    Param("ffn", doc="FFN inner width", kind="int", min=1),
    Param("heads", doc="query heads", kind="int", min=1),
    Param("kv_heads", default="heads", doc="key/value heads (GQA)", kind="int", min=1),
    Param("head_dim", default="hidden / heads", doc="width of one head", min=0, min_open=True),
    Param("vocab", doc="vocabulary size", kind="int", min=1),
    Param("ffn_matrices", default="3", doc="matrices in the FFN: 3 for SwiGLU, 2 for GELU MLP", kind="int", min=1),
    Param("tied_embeddings", default="false", kind="bool", doc="LM head shares the embedding"),
    Param("qk_norm", default="false", kind="bool", doc="RMSNorm on q and k per head"),
    Param("qkv_bias", default="false", kind="bool", doc="bias on q, k, v projections"),
)

_HF_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_text"}
_HF_QKV_BIAS = {"qwen2"}
_MOE_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


@hookimpl
def plan_kinds_register():
    return [KindSpec("model", "a decoder-only transformer architecture", MODEL_FIELDS)]


@hookimpl
def plan_config_import(kind, config, path):
    """Map a Hugging Face config of a dense GQA decoder to model fields."""
    if kind != "model" or "num_hidden_layers" not in config:
        return None
    moe = [k for k in _MOE_KEYS if k in config]
    if moe:
        raise ValueError(f"'{path}' describes a mixture-of-experts model ({moe[0]} = {config[moe[0]]}); "
                         "only dense decoders are supported so far")
    heads = config["num_attention_heads"]
    out = {
        "layers": (str(config["num_hidden_layers"]), None),
        "hidden": (str(config["hidden_size"]), None),
        "ffn": (str(config["intermediate_size"]), None),
        "heads": (str(heads), None),
        "kv_heads": (str(config.get("num_key_value_heads", heads)), None),
        "head_dim": (str(config.get("head_dim") or config["hidden_size"] // heads), None),
        "vocab": (str(config["vocab_size"]), None),
        "tied_embeddings": (bool(config.get("tie_word_embeddings", False)), None),
        "qk_norm": (config.get("model_type") in _HF_QK_NORM, None),
        "qkv_bias": (bool(config.get("attention_bias", config.get("model_type") in _HF_QKV_BIAS)), None),
    }
    return out


def architecture(view):
    """Symbols and structural flags of a model declaration (used by several plugins).

    :return: dict with sympy symbols ``L h f nq nkv dh V mats`` and Python bools
        ``tied qk_norm qkv_bias``.
    """
    import sympy as sp

    def q(name, default=None):
        if view.has(name):
            return view.q(name)
        return default

    a = {"L": q("layers"), "h": q("hidden"), "f": q("ffn"), "nq": q("heads"), "V": q("vocab")}
    a["nkv"] = q("kv_heads", a["nq"])
    a["dh"] = q("head_dim", a["h"] / a["nq"] if a["h"] is not None and a["nq"] is not None else None)
    a["mats"] = q("ffn_matrices", sp.Integer(3))
    for k in ("tied_embeddings", "qk_norm", "qkv_bias"):
        a[k] = bool(view.value(k, False))
    return a


@hookimpl
def plan_declaration_derive(ctx):
    if ctx.kind != "model" or not all(ctx.has(f) for f in ("layers", "hidden", "ffn", "heads", "vocab")):
        return
    a = architecture(ctx.view)
    L, h, f, nq, nkv, dh, V, mats = (a[k] for k in ("L", "h", "f", "nq", "nkv", "dh", "V", "mats"))
    layer = 2 * h * nq * dh + 2 * h * nkv * dh + mats * h * f + 2 * h
    if a["qk_norm"]:
        layer += 2 * dh
    if a["qkv_bias"]:
        layer += (nq + 2 * nkv) * dh
    emb = V * h
    head = 0 if a["tied_embeddings"] else V * h
    ctx.define("layer_params", layer, "param", "parameters of one transformer block")
    ctx.define("embedding_params", emb, "param", "word embedding V·h")
    ctx.define("lm_head_params", head, "param", "LM head V·h (0 when tied)")
    ctx.define("params", L * layer + emb + head + h, "param",
               "all trainable parameters: blocks, embedding, LM head, final norm")
