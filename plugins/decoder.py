"""Decoder-only transformers — dense, mixture-of-experts (MoE) and DeepSeek-style multi-head
latent attention (MLA): parameter counts per layer type from the architecture, and Hugging Face
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

Mixture-of-experts and MLA fields (optional; absent means a dense GQA decoder):

==================  =======================================================  =========
experts             routed experts E per MoE layer                           (dense)
experts_per_token   routed experts chosen per token k (top-k)                required with experts
shared_experts      always-active shared experts k_s                         0
expert_ffn          inner width f_e of one expert (and of a shared expert)   required with experts
dense_layers        first layers with a dense FFN of width ``ffn``           0
q_lora_rank         MLA query compression rank r_q (absent: full q proj)     —
kv_lora_rank        MLA key/value latent rank r_kv (present: MLA)            —
qk_rope_dim         MLA decoupled RoPE width d_r per head                    with kv_lora_rank
v_head_dim          MLA value width per head d_v                             head_dim
mtp_layers          multi-token-prediction modules (not counted in params)   0
==================  =======================================================  =========

With MLA, ``head_dim`` is the query/key width per head d_nope + d_r and ``kv_heads`` = ``heads``.

Derived fields (unit ``param``): ``params`` (all trainable parameters of the main model),
``embedding_params`` (V·h), ``lm_head_params`` (V·h, 0 when tied), ``layer_params`` (one block;
for an MoE model one MoE block with all its experts), ``attention_params`` (one block's
attention), ``active_params`` (parameters one token uses: ``params`` for a dense model),
``dense_layer_params``, ``moe_layer_params``, ``moe_layer_active_params``, ``expert_params``
(all routed experts of all layers), ``mtp_params`` (the MTP modules, sharing embedding and
head), ``kv_cache_width`` (cached elements per token per layer: 2·n_kv·d_h, or r_kv + d_r with
MLA); FLOPs: ``flops_per_token_forward`` (2 × the active matrix parameters, LM head included,
embedding lookup excluded; attention QKᵀ/AV over the context is extra) and
``expert_flops_per_token`` (training FLOPs of the routed and shared expert matmuls,
18·n_L·h·f_e·(k + k_s) for SwiGLU — book ch. 3 §3.6.2).

Per block: q and o projections 2·h·n_q·d_h, k and v 2·h·n_kv·d_h, FFN ffn_matrices·h·f,
two RMSNorm weights 2·h, plus 2·d_h for q/k norms and (n_q + 2·n_kv)·d_h biases when present;
one final norm h.  Qwen3-8B gives exactly 8,190,735,360 (the HF config's implied count).

MLA per block (DeepSeek-V2/V3 modelling code): q_a h·r_q + norm r_q + q_b r_q·n_q·d_h (or
h·n_q·d_h without ``q_lora_rank``); kv_a h·(r_kv + d_r) + norm r_kv; kv_b
r_kv·n_q·(d_h − d_r + d_v); o n_q·d_v·h.  MoE block: router h·E, routed experts
E·ffn_matrices·h·f_e, shared experts k_s·ffn_matrices·h·f_e; a token uses the router, k routed
and k_s shared experts.  Published sizes (which exclude the MTP module): Qwen3-30B-A3B
30,532,122,624 total / 3,353,032,704 active, Qwen3-235B-A22B 235,093,634,560 / 22,190,763,520,
DeepSeek-V3 671,026,404,352 / 37,552,282,624 — the reports' 30.5 B / 3.3 B, 235 B / 22 B and
671 B / 37 B are these counts cut to the printed digit.
"""
from __future__ import annotations

import os

from dsl.plugin import hookimpl
from dsl.plugin import KindSpec, Param

from . import flops

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
    Param("experts", doc="routed experts per MoE layer", kind="int", min=1, optional=True),
    Param("experts_per_token", doc="routed experts chosen per token (top-k)", kind="int", min=1, optional=True),
    Param("shared_experts", doc="always-active shared experts per MoE layer", kind="int", min=0, optional=True),
    Param("expert_ffn", doc="inner width of one expert", kind="int", min=1, optional=True),
    Param("dense_layers", doc="first layers with a dense FFN (DeepSeek first_k_dense_replace)", kind="int",
          min=0, optional=True),
    Param("q_lora_rank", doc="MLA query compression rank", kind="int", min=1, optional=True),
    Param("kv_lora_rank", doc="MLA key/value latent rank", kind="int", min=1, optional=True),
    Param("qk_rope_dim", doc="MLA decoupled RoPE width per head", kind="int", min=0, optional=True),
    Param("v_head_dim", doc="MLA value width per head", kind="int", min=1, optional=True),
    Param("mtp_layers", doc="multi-token-prediction modules (not counted in params)", kind="int", min=0,
          optional=True),
)

_HF_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_text"}
_HF_QKV_BIAS = {"qwen2"}
_MOE_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


@hookimpl
def plan_kinds_register():
    return [KindSpec("model", "a decoder-only transformer architecture", MODEL_FIELDS)]


@hookimpl
def plan_config_import(kind, config, path):
    """Map a Hugging Face config of a decoder (dense GQA, MoE, DeepSeek MLA) to model fields.

    MoE keys: ``num_experts`` / ``n_routed_experts`` / ``num_local_experts`` (E),
    ``num_experts_per_tok`` (k), ``n_shared_experts``, ``moe_intermediate_size`` (f_e; Mixtral
    uses ``intermediate_size``), ``first_k_dense_replace``.  MLA keys: ``q_lora_rank``,
    ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; MTP:
    ``num_nextn_predict_layers``.

    :raises ValueError: for layouts the parameter formulas do not describe (dense layers
        interleaved with MoE layers, a shared expert of its own width).
    """
    if kind != "model" or not isinstance(config, dict) or "num_hidden_layers" not in config:
        return None
    name = os.path.basename(str(path))
    config = dict(config)

    def whole(key, minimum=1, required=True):
        """config[key] checked: a whole number in [minimum, 10^12] (bool and str refused)."""
        if key not in config or config[key] is None:
            if required:
                raise KeyError(key)
            return None
        v = config[key]
        if isinstance(v, float) and v.is_integer() and abs(v) <= 1e12:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not (minimum <= v <= 10 ** 12):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:39] + "…"
            raise ValueError(f"'{name}': key '{key}' must be a whole number from {minimum} to 10^12, got {shown}")
        return v

    for key, minimum, required in (("num_hidden_layers", 1, True), ("hidden_size", 1, True),
                                   ("intermediate_size", 1, True), ("num_attention_heads", 1, True),
                                   ("num_key_value_heads", 1, False), ("head_dim", 1, False),
                                   ("vocab_size", 1, True), ("n_shared_experts", 0, False),
                                   ("moe_intermediate_size", 1, False), ("first_k_dense_replace", 0, False),
                                   ("num_experts_per_tok", 1, False), ("kv_lora_rank", 0, False),
                                   ("q_lora_rank", 0, False), ("qk_rope_head_dim", 0, False),
                                   ("qk_nope_head_dim", 0, False), ("v_head_dim", 0, False),
                                   ("num_nextn_predict_layers", 0, False),
                                   *((k, 0, False) for k in _MOE_KEYS)):
        v = whole(key, minimum, required)
        if v is not None:
            config[key] = v
    if config.get("kv_lora_rank"):
        whole("qk_rope_head_dim", 0)
        whole("qk_nope_head_dim", 0)
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
    moe = [k for k in _MOE_KEYS if config.get(k)]
    if moe:
        for key, ok in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
            if config.get(key, ok) != ok:
                raise ValueError(f"'{path}' interleaves dense and MoE layers ({key} = {config[key]}); "
                                 "only dense-first layouts (first_k_dense_replace) are supported")
        if config.get("mlp_only_layers"):
            raise ValueError(f"'{path}' lists dense layers among MoE layers (mlp_only_layers); "
                             "only dense-first layouts are supported")
        if config.get("shared_expert_intermediate_size"):
            raise ValueError(f"'{path}' has a shared expert of its own width (shared_expert_intermediate_size); "
                             "describe the model by fields instead")
        if "num_experts_per_tok" not in config:
            raise ValueError(f"'{path}' is a mixture-of-experts config without num_experts_per_tok")
        out["experts"] = (str(config[moe[0]]), None)
        out["experts_per_token"] = (str(config["num_experts_per_tok"]), None)
        out["shared_experts"] = (str(config.get("n_shared_experts") or 0), None)
        out["expert_ffn"] = (str(config.get("moe_intermediate_size") or config["intermediate_size"]), None)
        out["dense_layers"] = (str(config.get("first_k_dense_replace") or 0), None)
    if config.get("kv_lora_rank"):
        rope, nope = config["qk_rope_head_dim"], config["qk_nope_head_dim"]
        out["head_dim"] = (str(nope + rope), None)
        out["kv_heads"] = (str(heads), None)
        out["kv_lora_rank"] = (str(config["kv_lora_rank"]), None)
        out["qk_rope_dim"] = (str(rope), None)
        out["v_head_dim"] = (str(config.get("v_head_dim") or nope), None)
        if config.get("q_lora_rank"):
            out["q_lora_rank"] = (str(config["q_lora_rank"]), None)
    if config.get("num_nextn_predict_layers"):
        out["mtp_layers"] = (str(config["num_nextn_predict_layers"]), None)
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


def moe_architecture(view):
    """MoE and MLA symbols of a model declaration (``None`` where absent).

    :return: dict with sympy symbols ``E k ks fe Ld rq rkv dr dv mtp`` (counts) and bools
        ``moe`` (routed experts present) and ``mla`` (``kv_lora_rank`` present).
    """
    import sympy as sp

    def q(name, default=None):
        return view.q(name) if view.has(name) else default

    a = {"E": q("experts"), "k": q("experts_per_token"), "ks": q("shared_experts", sp.Integer(0)),
         "fe": q("expert_ffn"), "Ld": q("dense_layers", sp.Integer(0)), "rq": q("q_lora_rank"),
         "rkv": q("kv_lora_rank"), "dr": q("qk_rope_dim", sp.Integer(0)), "dv": q("v_head_dim"),
         "mtp": q("mtp_layers", sp.Integer(0))}
    a["moe"] = a["E"] is not None
    a["mla"] = a["rkv"] is not None
    return a


def attention_params(a, m, matrices_only=False):
    """Parameters of one block's attention (projections, q/k norms, biases, MLA norms).

    :param a: :func:`architecture`; :param m: :func:`moe_architecture`.
    :param matrices_only: count the projection matrices only (what a token multiplies by).
    """
    h, nq, nkv, dh = a["h"], a["nq"], a["nkv"], a["dh"]
    if m["mla"]:
        rkv, dr = m["rkv"], m["dr"]
        dv = m["dv"] if m["dv"] is not None else dh - dr
        norms = 0 if matrices_only else (rkv if m["rq"] is None else m["rq"] + rkv)
        q = h * nq * dh if m["rq"] is None else h * m["rq"] + m["rq"] * nq * dh
        kv = h * (rkv + dr) + rkv * nq * (dh - dr + dv)
        return q + kv + nq * dv * h + norms
    p = 2 * h * nq * dh + 2 * h * nkv * dh
    if matrices_only:
        return p
    if a["qk_norm"]:
        p += 2 * dh
    if a["qkv_bias"]:
        p += (nq + 2 * nkv) * dh
    return p


@hookimpl
def plan_declaration_derive(ctx):
    if ctx.kind != "model" or not all(ctx.has(f) for f in ("layers", "hidden", "ffn", "heads", "vocab")):
        return
    a = architecture(ctx.view)
    L, h, f, nq, nkv, dh, V, mats = (a[k] for k in ("L", "h", "f", "nq", "nkv", "dh", "V", "mats"))
    m = moe_architecture(ctx.view)
    if m["moe"] and (m["k"] is None or m["fe"] is None):
        missing = "experts_per_token" if m["k"] is None else "expert_ffn"
        ctx.error(f"model '{ctx.name}' has experts but no {missing}",
                  f"add `{missing} = …` (top-k and the inner width of one expert)",
                  code="missing-parameter")
    attn = attention_params(a, m)
    dense = attn + mats * h * f + 2 * h
    emb = V * h
    head = 0 if a["tied_embeddings"] else V * h
    ctx.define("attention_params", attn, "param", "parameters of one block's attention")
    ctx.define("embedding_params", emb, "param", "word embedding V·h")
    ctx.define("lm_head_params", head, "param", "LM head V·h (0 when tied)")
    if m["moe"]:
        E, k, ks, fe, Ld = m["E"], m["k"], m["ks"], m["fe"], m["Ld"]
        Lm = L - Ld
        expert = mats * h * fe
        router = h * E
        moe = attn + 2 * h + router + (E + ks) * expert
        moe_active = attn + 2 * h + router + (k + ks) * expert
        ctx.define("layer_params", moe, "param", "parameters of one MoE block with all its experts")
        ctx.define("dense_layer_params", dense, "param", "parameters of one dense-FFN block")
        ctx.define("moe_layer_params", moe, "param", "parameters of one MoE block: attention, router, experts")
        ctx.define("moe_layer_active_params", moe_active, "param",
                   "parameters of one MoE block a token uses: attention, router, k routed + shared experts")
        ctx.define("expert_params", Lm * E * expert, "param", "routed expert weights of all MoE layers")
        total = Ld * dense + Lm * moe + emb + head + h
        active = Ld * dense + Lm * moe_active + emb + head + h
        # matrices a token multiplies by: all but norm vectors and the embedding lookup
        mat_attn = attention_params(a, m, matrices_only=True)
        mat_layer_d = mat_attn + mats * h * f
        mat_layer_m = mat_attn + router + (k + ks) * expert
        matrices = Ld * mat_layer_d + Lm * mat_layer_m + V * h
        ctx.define("expert_flops_per_token", flops.expert_training_per_token(a, m), "GFLOP/token",
                   "training FLOPs of the expert matmuls per token: 18·n_L·h·f·(k + k_s)",
                   references=("Book ch. 3 §3.6.2 (FLOPs of a mixture-of-experts model)",))
        # DeepSeek-V3 MTP module: one MoE block, two norms, the 2h→h projection, a final norm
        ctx.define("mtp_params", m["mtp"] * (moe + 2 * h + 2 * h * h + h), "param",
                   "multi-token-prediction modules (embedding and head shared; not in params)")
    else:
        layer = dense
        ctx.define("layer_params", layer, "param", "parameters of one transformer block")
        total = active = L * layer + emb + head + h
        matrices = L * (attention_params(a, m, matrices_only=True) + mats * h * f) + V * h
    if m["mla"]:
        kvw = m["rkv"] + m["dr"]
    else:
        kvw = 2 * nkv * dh
    ctx.define("kv_cache_width", kvw, "", "cached K/V elements per token per layer")
    ctx.define("params", total, "param",
               "all trainable parameters: blocks, embedding, LM head, final norm")
    ctx.define("active_params", active, "param", "parameters one token uses (all of them for a dense model)")
    ctx.define("flops_per_token_forward", flops.matrix_forward_per_token(a, m), "GFLOP/token",
               "forward matmul FLOPs per token: 2 × active matrix parameters incl. LM head, "
               "without the embedding lookup and attention over the context")
