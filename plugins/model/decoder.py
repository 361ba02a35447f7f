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

Norms, biases, learned positions, encoders and sliding windows (defaults: a pre-norm RMSNorm
decoder without biases): ``norm`` ("rmsnorm" | "layernorm"), ``layer_norms`` (2), ``final_norm``,
``embedding_norm``, ``out_bias``, ``mlp_bias``, ``lm_head_bias``, ``position_embeddings``,
``token_types``, ``embedding_dim`` (OPT), ``pooler``, ``attention`` ("causal" | "bidirectional"),
``parallel_attention``, ``sliding_window``, ``local_layers``, ``shared_expert_ffn``,
``shared_expert_gate`` — see docs/models.md.  Families read from a config: plugins/model/hf_config.py.
Attention and KV: ``global_layers``, ``kv_cache_width_global`` / ``kv_cache_width_local`` (the
per-layer width summed over the full-attention / sliding-window layers), ``attention_window``;
:func:`attention_pairs` counts the (query, key) pairs of one sequence.

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

from plugins.model import flops
from plugins.model.attention import attention_pairs, attention_params  # noqa: F401  (decoder.attention_*: read by callers)

MODEL_FIELDS = (
    Param("layers", doc="transformer blocks", kind="int", min=1),
    Param("hidden", doc="hidden size", kind="int", min=1),
    Param("ffn", doc="FFN inner width", kind="int", min=1),
    Param("heads", doc="query heads", kind="int", min=1),
    Param("kv_heads", default="heads", doc="key/value heads (GQA; 1 for MQA)", kind="int", min=1),
    Param("head_dim", default="hidden / heads", doc="width of one head", min=0, min_open=True),
    Param("vocab", doc="vocabulary size", kind="int", min=1),
    Param("ffn_matrices", default="3", doc="matrices in the FFN: 3 for a gated MLP (SwiGLU, GeGLU), 2 for a "
          "plain MLP (GELU, ReLU, xIELU)", kind="int", min=1),
    Param("activation_params", default="0", kind="int", min=0,
          doc="learnable parameters of one MLP's activation (xIELU: alpha_p and alpha_n, 2)"),
    Param("tied_embeddings", default="false", kind="bool", doc="LM head shares the embedding"),
    Param("qk_norm", default="false", kind="bool", doc="norm on q and k per head (Qwen3, Gemma 3)"),
    Param("qkv_bias", default="false", kind="bool", doc="bias on q, k, v projections"),
    Param("out_bias", default="false", kind="bool", doc="bias on the attention output projection"),
    Param("mlp_bias", default="false", kind="bool", doc="biases on the FFN matrices"),
    Param("lm_head_bias", default="false", kind="bool", doc="bias on the LM head (Phi-2)"),
    Param("norm", default='"rmsnorm"', kind="choice", choices=("rmsnorm", "layernorm"),
          doc="norm type: RMSNorm has a weight, LayerNorm a weight and a bias"),
    Param("layer_norms", default="2", kind="int", min=0,
          doc="norms per block (2 pre-norm; 1 with parallel attention; 4 in Gemma 2/3)"),
    Param("final_norm", default="true", kind="bool", doc="a norm after the last block"),
    Param("embedding_norm", default="false", kind="bool", doc="a norm after the embeddings (BERT)"),
    Param("position_embeddings", default="0", kind="int", min=0,
          doc="rows of a learned position table (GPT-2, OPT, BERT; 0 for rotary)"),
    Param("token_types", default="0", kind="int", min=0, doc="rows of a token-type table (BERT)"),
    Param("embedding_dim", doc="embedding width when it differs from hidden (OPT word_embed_proj_dim; "
          "adds the in and out projections)", kind="int", min=1, optional=True),
    Param("pooler", default="false", kind="bool", doc="an encoder's pooler h·h + h (BERT)"),
    Param("attention", default='"causal"', kind="choice", choices=("causal", "bidirectional"),
          doc="causal (decoder) or bidirectional (encoder) self-attention"),
    Param("parallel_attention", default="false", kind="bool",
          doc="attention and FFN read the same input (GPT-J, Falcon, Phi-2): no count changes but the norms"),
    Param("sliding_window", doc="window of the local (sliding-window) layers, tokens", kind="int", min=1,
          optional=True),
    Param("local_layers", doc="layers with the sliding window (default: all, when a window is given)",
          kind="int", min=0, optional=True),
    Param("experts", doc="routed experts per MoE layer", kind="int", min=1, optional=True),
    Param("experts_per_token", doc="routed experts chosen per token (top-k)", kind="int", min=1, optional=True),
    Param("shared_experts", doc="always-active shared experts per MoE layer", kind="int", min=0, optional=True),
    Param("expert_ffn", doc="inner width of one expert", kind="int", min=1, optional=True),
    Param("shared_expert_ffn", doc="inner width of a shared expert (default expert_ffn; Qwen2-MoE)",
          kind="int", min=1, optional=True),
    Param("shared_expert_gate", default="false", kind="bool",
          doc="a sigmoid gate h → 1 on the shared expert (Qwen2-MoE)"),
    Param("router_bias", default="false", kind="bool",
          doc="a per-expert bias on the router's scores, E values per MoE layer (DeepSeek-V3's "
              "e_score_correction_bias for auxiliary-loss-free balancing)"),
    Param("dense_layers", doc="first layers with a dense FFN (DeepSeek first_k_dense_replace)", kind="int",
          min=0, optional=True),
    Param("q_lora_rank", doc="MLA query compression rank", kind="int", min=1, optional=True),
    Param("kv_lora_rank", doc="MLA key/value latent rank", kind="int", min=1, optional=True),
    Param("qk_rope_dim", doc="MLA decoupled RoPE width per head", kind="int", min=0, optional=True),
    Param("v_head_dim", doc="MLA value width per head", kind="int", min=1, optional=True),
    Param("mtp_layers", doc="multi-token-prediction modules (not counted in params)", kind="int", min=0,
          optional=True),
)


@hookimpl
def plan_kinds_register():
    return [KindSpec("model", "a transformer architecture (decoder or encoder)", MODEL_FIELDS, fixed=True)]


@hookimpl
def plan_config_import(kind, config, path):
    """Map a Hugging Face ``config.json`` to model fields (families: :mod:`plugins.model.hf_config`).

    MoE keys: ``num_experts`` / ``n_routed_experts`` / ``num_local_experts`` (E),
    ``num_experts_per_tok`` (k), ``n_shared_experts``, ``moe_intermediate_size`` (f_e; Mixtral
    uses ``intermediate_size``), ``first_k_dense_replace``, ``shared_expert_intermediate_size``.
    MLA keys: ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
    ``v_head_dim``; MTP: ``num_nextn_predict_layers``.  Keys not read come back as warnings
    (the ``"__warnings__"`` entry).

    :raises ValueError: for a config the formulas do not describe (an unknown architecture lacking
        the core keys, a non-numeric count, dense layers interleaved with MoE layers).
    """
    if kind != "model" or not isinstance(config, dict):
        return None
    from plugins.model import hf_config

    out, warnings = hf_config.import_config(config, path)
    if warnings:
        out["__warnings__"] = (tuple(warnings), None)
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
    a["act_params"] = q("activation_params", sp.Integer(0))
    for k in ("tied_embeddings", "qk_norm", "qkv_bias", "out_bias", "mlp_bias", "lm_head_bias",
              "embedding_norm", "pooler", "parallel_attention", "shared_expert_gate", "router_bias"):
        a[k] = bool(view.value(k, False))
    a["final_norm"] = bool(view.value("final_norm", True))
    a["nf"] = sp.Integer(2) if view.value("norm", "rmsnorm") == "layernorm" else sp.Integer(1)
    a["norms"] = q("layer_norms", sp.Integer(2))
    a["P"] = q("position_embeddings", sp.Integer(0))
    a["T"] = q("token_types", sp.Integer(0))
    a["de"] = q("embedding_dim")
    a["bidirectional"] = view.value("attention", "causal") == "bidirectional"
    a["causal"] = not a["bidirectional"]          # read by plugins.model.flops (attention pairs)
    a["window"] = q("sliding_window")
    if a["window"] is None:
        a["local"] = sp.Integer(0)
    else:
        a["local"] = q("local_layers", a["L"])
    return a


def score_keys(a, s):
    """Keys per query of the score matrix eager attention keeps for the backward, averaged over
    the layers: s on a full layer, min(s, w) on a sliding-window layer of window w (a banded
    kernel computes only the window's scores).

        ((n_L − n_local)·s + n_local·min(s, w)) / n_L

    :param a: :func:`architecture`; :param s: sequence length.
    """
    import sympy as sp

    if a["window"] is None:
        return s
    return ((a["L"] - a["local"]) * s + a["local"] * sp.Min(s, a["window"])) / a["L"]


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


def top_k_problem(k: int, E: int) -> str | None:
    """Why routing each token to ``k`` of ``E`` routed experts is impossible, or ``None``.

    Top-k routing sends a token to the k experts with the highest router scores — k *distinct*
    experts — so 1 ≤ k ≤ E (Shazeer et al. 2017, 'Outrageously Large Neural Networks', eq. 3–5;
    Fedus et al. 2021, 'Switch Transformers', §2.1).  Used by the model declaration and by
    blocks that take k and E as their own parameters.

    :param k: experts chosen per token (top-k); :param E: routed experts per MoE layer.
    :return: a sentence naming both numbers, for an error summary.
    """
    if k > E:
        return (f"{k} experts per token out of {E} routed experts; top-k routing picks distinct "
                f"experts, so a token can use at most {E}")
    return None


def ffn_params(a, width):
    """One FFN of inner width ``width``: ffn_matrices·h·width, plus its biases when present
    (width on each input matrix, h on the output)."""
    p = a["mats"] * a["h"] * width + a.get("act_params", 0)
    if a.get("mlp_bias"):
        p += (a["mats"] - 1) * width + a["h"]
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
    if m["moe"] and m["k"] is not None:
        k, E = int(ctx.value("experts_per_token")), int(ctx.value("experts"))
        problem = top_k_problem(k, E)
        if problem:
            at_k, at_e = ctx.view.value_span("experts_per_token"), ctx.view.value_span("experts")
            ctx.error(f"model '{ctx.name}': {problem}",
                      f"lower `experts_per_token` (a config's num_experts_per_tok) to at most {E}, or raise `experts`",
                      span=at_k, code="out-of-range",
                      related=(("experts is set here", at_e),) if at_e != at_k else ())
    attn = attention_params(a, m)
    norms = a["norms"] * a["nf"] * h              # norm vectors of one block
    dense = attn + ffn_params(a, f) + norms
    de = a["de"] if a["de"] is not None else h
    emb = V * de + (a["P"] + a["T"]) * h
    if a["de"] is not None:
        emb += 2 * h * de                          # OPT's project_in / project_out
    if a["embedding_norm"]:
        emb += a["nf"] * h
    head = 0 if a["tied_embeddings"] else V * de
    if a["lm_head_bias"]:
        head += V
    final = (a["nf"] * h if a["final_norm"] else 0) + ((h * h + h) if a["pooler"] else 0)
    ctx.define("attention_params", attn, "param", "parameters of one block's attention")
    ctx.define("embedding_params", emb, "param", "word embedding V·h")
    ctx.define("lm_head_params", head, "param", "LM head V·h (0 when tied)")
    if m["moe"]:
        E, k, ks, fe, Ld = m["E"], m["k"], m["ks"], m["fe"], m["Ld"]
        Lm = L - Ld
        expert = ffn_params(a, fe)
        shared = ffn_params(a, ctx.view.q("shared_expert_ffn")) if ctx.has("shared_expert_ffn") else expert
        router = h * E + (h if a["shared_expert_gate"] else 0) + (E if a["router_bias"] else 0)
        moe = attn + norms + router + E * expert + ks * shared
        moe_active = attn + norms + router + k * expert + ks * shared
        ctx.define("layer_params", moe, "param", "parameters of one MoE block with all its experts")
        ctx.define("dense_layer_params", dense, "param", "parameters of one dense-FFN block")
        ctx.define("moe_layer_params", moe, "param", "parameters of one MoE block: attention, router, experts")
        ctx.define("moe_layer_active_params", moe_active, "param",
                   "parameters of one MoE block a token uses: attention, router, k routed + shared experts")
        ctx.define("expert_params", Lm * E * expert, "param", "routed expert weights of all MoE layers")
        total = Ld * dense + Lm * moe + emb + head + final
        active = Ld * dense + Lm * moe_active + emb + head + final
        ctx.define("expert_flops_per_token", flops.expert_training_per_token(a, m), "GFLOP/token",
                   "training FLOPs of the expert matmuls per token: 18·n_L·h·f·(k + k_s)",
                   references=("FLOPs of a mixture-of-experts model: only the active experts' matrices count",))
        # DeepSeek-V3 MTP module: one MoE block, two norms, the 2h→h projection, a final norm
        ctx.define("mtp_params", m["mtp"] * (moe + 2 * a["nf"] * h + 2 * h * h + a["nf"] * h), "param",
                   "multi-token-prediction modules (embedding and head shared; not in params)")
    else:
        layer = dense
        ctx.define("layer_params", layer, "param", "parameters of one transformer block")
        total = active = L * layer + emb + head + final
    if m["mla"]:
        kvw = m["rkv"] + m["dr"]
    else:
        kvw = 2 * nkv * dh
    ctx.define("kv_cache_width", kvw, "", "cached K/V elements per token per layer")
    local = a["local"]
    ctx.define("global_layers", L - local, "", "layers attending to the whole context (not sliding-window)")
    ctx.define("kv_cache_width_global", (L - local) * kvw, "",
               "cached K/V elements per context token, summed over the full-attention layers")
    ctx.define("kv_cache_width_local", local * kvw, "",
               "cached K/V elements per windowed token, summed over the sliding-window layers "
               "(each caches at most attention_window tokens)")
    if a["window"] is not None:
        ctx.define("attention_window", a["window"], "", "tokens a sliding-window layer attends to and caches")
    ctx.define("params", total, "param",
               "all trainable parameters: blocks, embedding, LM head, final norm")
    ctx.define("active_params", active, "param", "parameters one token uses (all of them for a dense model)")
    ctx.define("flops_per_token_forward", flops.matrix_forward_per_token(a, m), "GFLOP/token",
               "forward matmul FLOPs per token: 2 × active matrix parameters incl. LM head, "
               "without the embedding lookup and attention over the context")
