"""Hugging Face ``config.json`` → model fields, per architecture family.

Each family names the keys it reads and how its blocks are built (gated or plain MLP, RMSNorm or
LayerNorm, norms per block, biases, learned positions, sliding-window layers).  Structure follows
the families' modelling code in ``transformers`` (``modeling_llama``, ``modeling_gemma2/3``,
``modeling_gpt2``, ``modeling_opt``, ``modeling_falcon``, ``modeling_phi``, ``modeling_bert``,
``modeling_deepseek_v2/v3``, ``modeling_qwen2_moe``).  ``docs/models.md`` lists the families.

:func:`import_config` returns the fields and the warnings (keys it did not read); it raises
``ValueError`` with a message naming the file for a config it cannot describe.
"""
from __future__ import annotations

import os

# MLP activation → matrices of a plain (ungated) MLP, or 3 for a gated one.  Llama-style families
# build a gated MLP (gate, up, down) whatever the activation (Gemma's gelu_pytorch_tanh is GeGLU).
GATED_ACTS = frozenset({"silu", "swish", "swiglu", "geglu", "reglu"})
PLAIN_ACTS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate", "quick_gelu",
                        "relu", "relu2", "xielu", "tanh"})

_LLAMA = dict(mlp="gated", norm="rmsnorm", layer_norms=2)
FAMILIES = {
    "llama": _LLAMA, "mistral": _LLAMA, "mixtral": _LLAMA, "phi3": _LLAMA,
    "qwen2": dict(_LLAMA, qkv_bias=True), "qwen2_moe": dict(_LLAMA, qkv_bias=True),
    "qwen3": dict(_LLAMA, qk_norm=True), "qwen3_moe": dict(_LLAMA, qk_norm=True),
    "qwen3_vl_text": dict(_LLAMA, qk_norm=True), "qwen3_vl_moe_text": dict(_LLAMA, qk_norm=True),
    "deepseek_v2": _LLAMA, "deepseek_v3": _LLAMA,
    "gemma": dict(_LLAMA, tied=True), "gemma2": dict(_LLAMA, layer_norms=4, tied=True),
    "gemma3_text": dict(_LLAMA, layer_norms=4, tied=True, qk_norm=True),
    "apertus": dict(mlp="act", norm="rmsnorm", layer_norms=2, qk_norm=True),
    "phi": dict(mlp="plain", norm="layernorm", layer_norms=1, parallel=True, qkv_bias=True, out_bias=True,
                mlp_bias=True, lm_head_bias=True),
    "gpt2": dict(mlp="plain", norm="layernorm", layer_norms=2, qkv_bias=True, out_bias=True, mlp_bias=True,
                 tied=True),
    "opt": dict(mlp="plain", norm="layernorm", layer_norms=2, qkv_bias=True, out_bias=True, mlp_bias=True,
                tied=True),
    "falcon": dict(mlp="plain", norm="layernorm", layer_norms=2, tied=True),
    "bert": dict(mlp="plain", norm="layernorm", layer_norms=2, qkv_bias=True, out_bias=True, mlp_bias=True,
                 tied=True, encoder=True),
}
FAMILIES["RefinedWebModel"] = FAMILIES["RefinedWeb"] = FAMILIES["falcon"]
FAMILIES["roberta"] = FAMILIES["xlm-roberta"] = FAMILIES["bert"]
FAMILIES["gemma3"] = FAMILIES["gemma3_text"]

# model_type of a multimodal config → the family of its text tower (``text_config``)
_TEXT_TOWER = {"qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text", "gemma3": "gemma3_text"}

_ALIASES = {   # field → config keys, first present wins
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
}
_FFN_KEYS = ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
_MOE_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")

# keys that change no parameter count and no attention cost (token ids, dropout, numerics, RoPE
# frequencies, training-time losses, routing rules, logit soft-capping, attention scale)
_IGNORED = frozenset({
    "architectures", "auto_map", "model_type", "torch_dtype", "dtype", "transformers_version", "use_cache",
    "initializer_range", "init_std", "initializer_factor", "max_position_embeddings", "partial_rotary_factor",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "output_router_logits",
    "router_aux_loss_coef", "aux_loss_alpha", "norm_topk_prob", "routed_scaling_factor", "scoring_func",
    "seq_aux", "topk_method", "n_group", "topk_group", "ep_size", "pretraining_tp", "router_jitter_noise",
    "use_sliding_window", "max_window_layers", "tie_word_embeddings", "prefix", "layerdrop", "n_ctx",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "do_layer_norm_before", "_remove_final_layer_norm", "enable_bias",
    "position_embedding_type", "classifier_dropout", "gradient_checkpointing", "is_decoder",
    "alibi", "apply_residual_connection_post_layernorm", "use_qk_norm", "attention_chunk_size",
    "output_attentions", "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type",
    "bias", "multi_query", "parallel_attn", "new_decoder_architecture", "num_kv_heads", "qk_layernorm", "qk_norm",
    "attention_bias", "mlp_bias", "hidden_act", "hidden_activation", "activation_function", "type_vocab_size",
    "sliding_window", "sliding_window_pattern", "layer_types", "head_dim", "num_key_value_heads",
    "word_embed_proj_dim", "n_positions", "add_pooling_layer", "decoder_sparse_step", "moe_layer_freq",
    "mlp_only_layers", "shared_expert_intermediate_size", "num_experts_per_tok", "n_shared_experts",
    "moe_intermediate_size", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers", "text_config", "vision_config",
    *(_MOE_KEYS), *(_FFN_KEYS), *(k for ks in _ALIASES.values() for k in ks),
})


def _ignorable(key: str) -> bool:
    return (key in _IGNORED or key.startswith(("_", "rope", "bos_", "eos_", "pad_", "sep_", "cls_"))
            or key.endswith(("_token_id", "_token_ids", "_eps", "_epsilon", "_pdrop", "_dropout", "dropout",
                             "_prob", "_scaling", "_theta", "_dtype"))
            or "dropout" in key)


def _key_error(message: str, key: str) -> ValueError:
    """The ValueError for a config that cannot be described because of ``key``: its ``key``
    attribute lets the error also point at that key in the file (see plan_config_import)."""
    e = ValueError(message)
    e.key = key
    return e


def import_config(config: dict, path: str) -> tuple[dict, list[str]]:
    """Fields ``{name: (value, unit)}`` and warnings of one Hugging Face config.

    :raises ValueError: the config is not a model this importer can describe (the message names
        the file and what is missing or wrong).
    """
    name = os.path.basename(str(path))
    warnings: list[str] = []
    config = dict(config)
    mt = config.get("model_type")
    if isinstance(config.get("text_config"), dict) and not any(k in config for k in _ALIASES["layers"]):
        text = dict(config["text_config"])
        tmt = text.get("model_type") or _TEXT_TOWER.get(mt, mt)
        shown = f"model_type '{mt}'" if isinstance(mt, str) else "a multimodal config"
        rest = sorted(k for k in config if k != "text_config" and k.endswith("_config")
                      and k != "quantization_config")
        warnings.append(f"'{name}' is {shown}: the language model (text_config) is read; the other towers "
                        f"({', '.join(rest) if rest else 'none listed'}) are not counted")
        if "tie_word_embeddings" in config and "tie_word_embeddings" not in text:
            text["tie_word_embeddings"] = config["tie_word_embeddings"]
        config, mt = text, tmt
    family = FAMILIES.get(mt) if isinstance(mt, str) else None

    def first(keys):
        return next((k for k in keys if config.get(k) is not None), None)

    missing = [keys[0] for f, keys in _ALIASES.items() if first(keys) is None]
    ffn_key = first(_FFN_KEYS)
    moe_key = first(_MOE_KEYS) if any(config.get(k) for k in _MOE_KEYS) else None
    if ffn_key is None and mt not in ("gpt2", "falcon", "RefinedWebModel", "RefinedWeb") and not (
            moe_key and config.get("moe_intermediate_size") is not None
            and not config.get("first_k_dense_replace")):
        missing.append("intermediate_size")
    if missing:
        what = (f"a {mt} config" if family else
                f"model_type '{mt}' is not an architecture this importer knows, and" if isinstance(mt, str) else
                "it names no model_type and")
        raise ValueError(f"'{name}': {what} lacks {', '.join(repr(k) for k in missing)}; "
                         f"known families: {', '.join(sorted(k for k in FAMILIES if k.islower()))}")
    if family is None:
        family = dict(mlp="act", norm="rmsnorm", layer_norms=2)
        warnings.append(f"'{name}': model_type {mt!r} is not a family this importer knows; it is read as a "
                        "Llama-style decoder (RMSNorm, no biases, MLP matrices from hidden_act)")

    def whole(key, minimum=1, required=True):
        """config[key] checked: a whole number in [minimum, 10^12] (bool and str refused)."""
        if key not in config or config[key] is None:
            if required:
                raise ValueError(f"'{name}' lacks the key '{key}'")
            return None
        v = config[key]
        if isinstance(v, float) and v.is_integer() and abs(v) <= 1e12:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not (minimum <= v <= 10 ** 12):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:39] + "…"
            raise _key_error(f"'{name}': key '{key}' must be a whole number from {minimum} to 10^12, got {shown}", key)
        return v

    def flag(key, default=False):
        v = config.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise _key_error(f"'{name}': key '{key}' must be true or false, got {v!r}", key)
        return v

    L = whole(first(_ALIASES["layers"]))
    h = whole(first(_ALIASES["hidden"]))
    nq = whole(first(_ALIASES["heads"]))
    V = whole("vocab_size")
    f = whole(ffn_key) if ffn_key else (4 * h if not moe_key else None)
    for key, minimum in (("num_key_value_heads", 1), ("num_kv_heads", 1), ("head_dim", 1),
                         ("n_shared_experts", 0), ("moe_intermediate_size", 1), ("first_k_dense_replace", 0),
                         ("num_experts_per_tok", 1), ("kv_lora_rank", 0), ("q_lora_rank", 0),
                         ("qk_rope_head_dim", 0), ("qk_nope_head_dim", 0), ("v_head_dim", 0),
                         ("num_nextn_predict_layers", 0), ("sliding_window", 1), ("sliding_window_pattern", 1),
                         ("max_window_layers", 0), ("n_positions", 1), ("max_position_embeddings", 1),
                         ("type_vocab_size", 0), ("word_embed_proj_dim", 1),
                         ("shared_expert_intermediate_size", 1), *((k, 0) for k in _MOE_KEYS)):
        v = whole(key, minimum, required=False)
        if v is not None:
            config[key] = v

    # MLP matrices: the family's structure, or the activation for a family built from it
    act = config.get("hidden_activation") or config.get("hidden_act") or config.get("activation_function")
    if act is not None and not isinstance(act, str):
        raise ValueError(f"'{name}': key 'hidden_act' must be the name of an activation, got {act!r}")
    if family["mlp"] == "gated":
        mats = 3
    elif family["mlp"] == "plain":
        mats = 2
    elif act is None or act in GATED_ACTS:
        mats = 3
    elif act in PLAIN_ACTS:
        mats = 2
    else:
        raise ValueError(f"'{name}': hidden_act '{act}' is not an activation this importer knows (gated: "
                         f"{', '.join(sorted(GATED_ACTS))}; plain: {', '.join(sorted(PLAIN_ACTS))})")

    kv = config.get("num_key_value_heads") or config.get("num_kv_heads")
    if mt in ("falcon", "RefinedWebModel", "RefinedWeb"):
        new_arch = flag("new_decoder_architecture")
        kv = (config.get("num_kv_heads") or nq) if new_arch else (1 if flag("multi_query", True) else nq)
        parallel = flag("parallel_attn", True)
        layer_norms = 2 if (new_arch or not parallel) else 1
        bias = flag("bias")
        family = dict(family, layer_norms=layer_norms, parallel=parallel, qkv_bias=bias, out_bias=bias,
                      mlp_bias=bias)
    out = {
        "layers": (str(L), None), "hidden": (str(h), None), "heads": (str(nq), None),
        "kv_heads": (str(kv or nq), None),
        "head_dim": (str(config.get("head_dim") or h // nq), None),
        "vocab": (str(V), None), "ffn_matrices": (str(mats), None),
        "tied_embeddings": (flag("tie_word_embeddings", family.get("tied", False)), None),
        "qk_norm": (bool(family.get("qk_norm")) or flag("qk_layernorm") or flag("qk_norm"), None),
        "qkv_bias": (flag("attention_bias", family.get("qkv_bias", False)), None),
        "norm": (family["norm"], None),
        "layer_norms": (str(family["layer_norms"]), None),
    }
    if f is not None:
        out["ffn"] = (str(f), None)
    if act == "xielu":
        out["activation_params"] = ("2", None)     # xIELU's learnable α_p and α_n per MLP
    if h % nq and not config.get("head_dim"):
        raise ValueError(f"'{name}': hidden_size {h} is not a multiple of num_attention_heads {nq}; "
                         "give head_dim")
    if flag("attention_bias", False) and mt in ("llama", "mistral", "apertus"):
        out["out_bias"] = (True, None)    # Llama's attention_bias puts a bias on o_proj too
    for fld, key in (("out_bias", "out_bias"), ("mlp_bias", "mlp_bias"), ("lm_head_bias", "lm_head_bias"),
                     ("parallel_attention", "parallel")):
        if family.get(key):
            out[fld] = (True, None)
    if flag("mlp_bias", False):
        out["mlp_bias"] = (True, None)

    # learned positions, token types, embedding norm, final norm, pooler
    if mt == "gpt2":
        out["position_embeddings"] = (str(whole("n_positions", required=False) or 1024), None)
    elif mt == "opt":
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (its padding offset)
        out["position_embeddings"] = (str(whole("max_position_embeddings") + 2), None)
        if not flag("do_layer_norm_before", True) or flag("_remove_final_layer_norm"):
            out["final_norm"] = (False, None)
        de = config.get("word_embed_proj_dim")
        if de is not None and de != h:
            out["embedding_dim"] = (str(de), None)
    elif family.get("encoder"):
        out["attention"] = ("bidirectional", None)
        out["position_embeddings"] = (str(whole("max_position_embeddings")), None)
        out["token_types"] = (str(config.get("type_vocab_size", 2)), None)
        out["embedding_norm"] = (True, None)
        out["final_norm"] = (False, None)
        out["pooler"] = (flag("add_pooling_layer", True), None)

    # sliding-window (local) layers
    window = config.get("sliding_window")
    if mt == "qwen2" or mt == "qwen2_moe":
        if window is not None and flag("use_sliding_window"):
            start = config.get("max_window_layers", L)
            out["sliding_window"] = (str(window), None)
            out["local_layers"] = (str(max(L - start, 0)), None)
    elif window is not None and mt in ("gemma2", "gemma3_text", "gemma3"):
        types = config.get("layer_types")
        if isinstance(types, list) and types:
            if len(types) != L or not all(t in ("sliding_attention", "full_attention") for t in types):
                raise _key_error(f"'{name}': layer_types must list 'sliding_attention' or 'full_attention' "
                                 f"for each of the {L} layers", "layer_types")
            local = sum(t == "sliding_attention" for t in types)
        elif mt == "gemma2":
            local = (L + 1) // 2                   # layers 0, 2, 4, … slide
        else:
            pattern = config.get("sliding_window_pattern", 6)
            local = L - L // pattern                # every pattern-th layer is global
        out["sliding_window"] = (str(window), None)
        out["local_layers"] = (str(local), None)
    elif window is not None and mt in ("mistral", "mixtral", "phi3", "qwen3", "qwen3_moe"):
        if mt in ("qwen3", "qwen3_moe") and not flag("use_sliding_window"):
            pass
        else:
            out["sliding_window"] = (str(window), None)

    # mixture of experts
    if moe_key:
        for key, ok in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
            if config.get(key, ok) != ok:
                raise _key_error(f"'{name}' interleaves dense and MoE layers ({key} = {config[key]}); "
                                 "only dense-first layouts (first_k_dense_replace) are supported", key)
        if config.get("mlp_only_layers"):
            raise _key_error(f"'{name}' lists dense layers among MoE layers (mlp_only_layers); "
                             "only dense-first layouts are supported", "mlp_only_layers")
        if "num_experts_per_tok" not in config:
            raise ValueError(f"'{name}' is a mixture-of-experts config without num_experts_per_tok")
        fe = config.get("moe_intermediate_size") or f
        out["experts"] = (str(config[moe_key]), None)
        out["experts_per_token"] = (str(config["num_experts_per_tok"]), None)
        out["expert_ffn"] = (str(fe), None)
        out["dense_layers"] = (str(config.get("first_k_dense_replace") or 0), None)
        if config.get("shared_expert_intermediate_size"):
            # Qwen2-MoE: one shared expert of its own width behind a sigmoid gate h → 1
            out["shared_experts"] = ("1", None)
            out["shared_expert_ffn"] = (str(config["shared_expert_intermediate_size"]), None)
            out["shared_expert_gate"] = (True, None)
        else:
            out["shared_experts"] = (str(config.get("n_shared_experts") or 0), None)
        if mt == "deepseek_v3" or config.get("topk_method") == "noaux_tc":
            # DeepSeek-V3's router keeps a per-expert score bias (e_score_correction_bias,
            # auxiliary-loss-free load balancing; modeling_deepseek_v3 DeepseekV3TopkRouter)
            out["router_bias"] = (True, None)
        if "ffn" not in out:
            out["ffn"] = (str(fe), None)
    elif f is None:
        raise ValueError(f"'{name}' lacks 'intermediate_size'")
    if config.get("kv_lora_rank"):
        whole("qk_rope_head_dim", 0)
        whole("qk_nope_head_dim", 0)
        rope, nope = config["qk_rope_head_dim"], config["qk_nope_head_dim"]
        out["head_dim"] = (str(nope + rope), None)
        out["kv_heads"] = (str(nq), None)
        out["kv_lora_rank"] = (str(config["kv_lora_rank"]), None)
        out["qk_rope_dim"] = (str(rope), None)
        out["v_head_dim"] = (str(config.get("v_head_dim") or nope), None)
        if config.get("q_lora_rank"):
            out["q_lora_rank"] = (str(config["q_lora_rank"]), None)
    if config.get("num_nextn_predict_layers"):
        out["mtp_layers"] = (str(config["num_nextn_predict_layers"]), None)

    unread = sorted(k for k in config if not _ignorable(k))
    if unread:
        warnings.append(f"'{name}': keys not read (they change no count this importer knows of): "
                        + ", ".join(unread[:12]) + (f" and {len(unread) - 12} more" if len(unread) > 12 else ""))
    return out, warnings
