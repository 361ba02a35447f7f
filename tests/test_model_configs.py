"""Hugging Face configs of many families → exact parameter counts.

Every expected count is computed here by a hand formula written out per family (from the family's
modelling code in ``transformers``), independent of plugins/model/decoder.py; where a model card or
paper prints an exact count it is quoted beside it:
GPT-2 124,439,808 and BERT-base 109,482,240 (with pooler) are the counts `sum(p.numel())` of
GPT2Model / BertModel reported widely; Qwen3-8B 8,190,735,360 is the count the Qwen3 config
implies (shared data README); Llama-2-7B 6,738,415,616 and Llama-3.1-8B 8,030,261,248 are the
models' published exact sizes.
"""
from __future__ import annotations

import json
import shutil

import pytest

import dsl
from conftest import REPO_ROOT
from dsl.syntax.diagnostics import PlanError

HF = REPO_ROOT / "specs" / "catalog" / "hf"


def llama(L, h, f, nq, nkv, V, dh=None, tied=False, qk_norm=False, qkv_bias=False, norms=2):
    """Llama-style block: q,o h·nq·dh; k,v h·nkv·dh; SwiGLU 3·h·f; RMSNorm weights."""
    dh = dh or h // nq
    attn = 2 * h * nq * dh + 2 * h * nkv * dh + (2 * dh if qk_norm else 0) + \
        ((nq + 2 * nkv) * dh if qkv_bias else 0)
    block = attn + 3 * h * f + norms * h
    return L * block + V * h * (1 if tied else 2) + h


def moe(L, h, nq, nkv, dh, V, E, k, fe, ks=0, Ld=0, f=0, qk_norm=False):
    """MoE decoder (GQA): router h·E, experts 3·h·fe; returns (total, active)."""
    attn = 2 * h * nq * dh + 2 * h * nkv * dh + (2 * dh if qk_norm else 0)
    dense = attn + 3 * h * f + 2 * h
    base = attn + 2 * h + h * E
    total = Ld * dense + (L - Ld) * (base + (E + ks) * 3 * h * fe) + 2 * V * h + h
    active = Ld * dense + (L - Ld) * (base + (k + ks) * 3 * h * fe) + 2 * V * h + h
    return total, active


def deepseek_mla(L, h, nq, rq, rkv, d_nope, d_rope, dv, V, E, k, ks, fe, Ld, f, router_bias=False):
    """DeepSeek-V2/V3: MLA attention (q_a, q_a_norm, q_b, kv_a with rope, kv_a_norm, kv_b, o);
    V3's router also keeps one score bias per expert (gate.e_score_correction_bias, E values per
    MoE layer, in the published checkpoint's weight map)."""
    attn = h * rq + rq + rq * nq * (d_nope + d_rope) + h * (rkv + d_rope) + rkv + \
        rkv * nq * (d_nope + dv) + nq * dv * h
    dense = attn + 3 * h * f + 2 * h
    base = attn + 2 * h + h * E + (E if router_bias else 0)
    total = Ld * dense + (L - Ld) * (base + (E + ks) * 3 * h * fe) + 2 * V * h + h
    active = Ld * dense + (L - Ld) * (base + (k + ks) * 3 * h * fe) + 2 * V * h + h
    return total, active


def gpt2(L, h, V, P):
    """GPT-2: wte, wpe; per block ln_1, c_attn (h·3h + 3h), c_proj, ln_2, c_fc (h·4h + 4h), c_proj;
    ln_f; LM head tied."""
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (4 * h * h + 4 * h) + (4 * h * h + h)
    return V * h + P * h + L * block + 2 * h


def opt(L, h, f, V, max_pos):
    """OPT (pre-LN, word_embed_proj_dim = hidden): tokens, positions with 2 offset rows; q,k,v,o
    with biases; fc1, fc2 with biases; two LayerNorms; final LayerNorm; head tied."""
    block = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    return V * h + (max_pos + 2) * h + L * block + 2 * h


def bert(L, h, f, V, P, T):
    """BertModel: word, position, token-type embeddings + LayerNorm; per layer q,k,v,o with biases,
    LayerNorm, intermediate and output dense with biases, LayerNorm; pooler h·h + h."""
    emb = (V + P + T) * h + 2 * h
    block = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
    return emb + L * block + h * h + h


def falcon7b(L, h, nq, V):
    """Falcon-7B: parallel attention with one LayerNorm per block, multi-query (one K/V head),
    fused qkv h·(nq + 2)·dh, dense h·h, MLP h·4h + 4h·h, no biases; ln_f; head tied."""
    dh = h // nq
    block = 2 * h + h * (nq + 2) * dh + h * h + 2 * h * 4 * h
    return L * block + V * h + 2 * h


def phi2(L, h, f, V):
    """Phi-2: one LayerNorm per block (parallel), q,k,v,dense with biases, fc1/fc2 (GELU) with
    biases; final LayerNorm; untied LM head with bias."""
    block = 2 * h + 4 * (h * h + h) + (h * f + f) + (f * h + h)
    return L * block + V * h + (V * h + V) + 2 * h


def gemma(L, h, f, nq, nkv, dh, V, qk_norm):
    """Gemma 2/3: GeGLU 3·h·f, four RMSNorms per block, q/k norms (Gemma 3), tied embeddings."""
    attn = 2 * h * nq * dh + 2 * h * nkv * dh + (2 * dh if qk_norm else 0)
    return L * (attn + 3 * h * f + 4 * h) + V * h + h


def qwen2_moe(L, h, nq, V, E, k, fe, fs):
    """Qwen2-MoE: q/k/v biases, router h·E, one shared expert of width fs behind a gate h → 1;
    returns (total, active)."""
    attn = 4 * h * h + 3 * h
    base = attn + 2 * h + h * E + h + 3 * h * fs
    return (L * (base + E * 3 * h * fe) + 2 * V * h + h, L * (base + k * 3 * h * fe) + 2 * V * h + h)


def apertus(L, h, f, nq, nkv, V):
    """Apertus: Llama-style attention with q/k RMSNorms, an up/down MLP with xIELU (two learnable
    scalars alpha_p, alpha_n per MLP), two RMSNorms per block, untied head, final norm."""
    dh = h // nq
    block = 2 * h * nq * dh + 2 * h * nkv * dh + 2 * dh + 2 * h * f + 2 + 2 * h
    return L * block + 2 * V * h + h


CASES = [
    # (config file, family, total, active)
    ("llama-7b-key-fields.json", "Llama 1", llama(32, 4096, 11008, 32, 32, 32000), None),
    ("Llama-2-7b-hf.json", "Llama 2", 6_738_415_616, None),
    ("Llama-2-70b-hf.json", "Llama 2", llama(80, 8192, 28672, 64, 8, 32000), None),
    ("Llama-3.1-8B.json", "Llama 3.1", 8_030_261_248, None),
    ("Llama-3.1-405B.json", "Llama 3.1", llama(126, 16384, 53248, 128, 8, 128256), None),
    ("OpenHermes-2.5-Mistral-7B.json", "Mistral", llama(32, 4096, 14336, 32, 8, 32002), None),
    ("mistral-small-24b-key-fields.json", "Mistral", llama(40, 5120, 32768, 32, 8, 131072, dh=128), None),
    ("Mixtral-8x7B-v0.1.json", "Mixtral", *moe(32, 4096, 32, 8, 128, 32000, 8, 2, 14336)),
    ("qwen25-7b-key-fields.json", "Qwen2.5", llama(28, 3584, 18944, 28, 4, 152064, qkv_bias=True), None),
    ("Qwen3-8B.json", "Qwen3", 8_190_735_360, None),
    ("Qwen3-32B.json", "Qwen3", llama(64, 5120, 25600, 64, 8, 151936, dh=128, qk_norm=True), None),
    ("Qwen3-30B-A3B.json", "Qwen3 MoE", *moe(48, 2048, 32, 4, 128, 151936, 128, 8, 768, qk_norm=True)),
    ("Qwen1.5-MoE-A2.7B-key-fields.json", "Qwen2 MoE", *qwen2_moe(24, 2048, 16, 151936, 60, 4, 1408, 5632)),
    ("Qwen3-VL-4B-key-fields.json", "multimodal text tower",
     llama(36, 2560, 9728, 32, 8, 151936, dh=128, tied=True, qk_norm=True), None),
    ("DeepSeek-V2-key-fields.json", "DeepSeek-V2",
     *deepseek_mla(60, 5120, 128, 1536, 512, 128, 64, 128, 102400, 160, 6, 2, 1536, 1, 12288)),
    ("DeepSeek-V3.json", "DeepSeek-V3",
     *deepseek_mla(61, 7168, 128, 1536, 512, 128, 64, 128, 129280, 256, 8, 1, 2048, 3, 18432, router_bias=True)),
    ("gemma-2-9b-key-fields.json", "Gemma 2", gemma(42, 3584, 14336, 16, 8, 256, 256000, False), None),
    ("gemma3-12b-key-fields.json", "Gemma 3", gemma(48, 3840, 15360, 16, 8, 256, 262208, True), None),
    ("phi-2.json", "Phi-2", phi2(32, 2560, 10240, 51200), None),
    ("Phi-3-mini-4k-instruct-key-fields.json", "Phi-3", llama(32, 3072, 8192, 32, 32, 32064), None),
    ("gpt2-key-fields.json", "GPT-2", 124_439_808, None),
    ("opt-125m.json", "OPT", opt(12, 768, 3072, 50272, 2048), None),
    ("falcon-7b-key-fields.json", "Falcon", falcon7b(32, 4544, 71, 65024), None),
    ("bert-base-uncased-key-fields.json", "BERT", 109_482_240, None),
    ("roberta-base-key-fields.json", "RoBERTa", bert(12, 768, 3072, 50265, 514, 1), None),
    ("apertus-8b-key-fields.json", "Apertus", apertus(32, 4096, 21504, 32, 8, 131072), None),
]


def test_hand_formulas_reproduce_the_published_counts():
    # the hand formulas above agree with the exact published figures used in the table
    assert gpt2(12, 768, 50257, 1024) == 124_439_808
    assert bert(12, 768, 3072, 30522, 512, 2) == 109_482_240
    assert llama(32, 4096, 11008, 32, 32, 32000) == 6_738_415_616
    assert llama(32, 4096, 14336, 32, 8, 128256) == 8_030_261_248
    assert llama(36, 4096, 12288, 32, 8, 151936, qk_norm=True) == 8_190_735_360


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    lines = []
    for i, (f, *_rest) in enumerate(CASES):
        shutil.copy(HF / f, d / f)
        lines.append(f'model m{i} from "{f}"')
    (d / "m.plan").write_text("\n".join(lines) + "\n")
    return dsl.load(d / "m.plan")


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c[0] for c in CASES])
def test_config_parameter_counts(catalog, i):
    f, family, total, active = CASES[i]
    assert int(catalog.base_value(f"m{i}.params")) == total, family
    assert int(catalog.base_value(f"m{i}.active_params")) == (active if active is not None else total), family


def test_the_table_spans_fifteen_families():
    assert len({c[1] for c in CASES}) >= 15


def test_published_rounded_sizes():
    # papers' rounded sizes: DeepSeek-V2 236 B / 21 B, Mixtral 46.7 B / 12.9 B, Gemma 2 9.24 B
    t, a = deepseek_mla(60, 5120, 128, 1536, 512, 128, 64, 128, 102400, 160, 6, 2, 1536, 1, 12288)
    assert round(t / 1e9) == 236 and round(a / 1e9) == 21
    t, a = moe(32, 4096, 32, 8, 128, 32000, 8, 2, 14336)
    assert round(t / 1e8) == 467 and round(a / 1e8) == 129
    assert round(gemma(42, 3584, 14336, 16, 8, 256, 256000, False) / 1e7) == 924
    # Qwen1.5-MoE-A2.7B: 14.3 B total, 2.7 B activated
    t, a = qwen2_moe(24, 2048, 16, 151936, 60, 4, 1408, 5632)
    assert round(t / 1e8) == 143 and round(a / 1e8) == 27


def test_activation_sets_the_mlp_matrices(catalog):
    names = [c[0] for c in CASES]
    mats = {f: int(catalog.base_value(f"m{names.index(f)}.ffn_matrices")) for f in
            ("phi-2.json", "gpt2-key-fields.json", "opt-125m.json", "Llama-3.1-8B.json",
             "gemma-2-9b-key-fields.json")}
    # GELU / ReLU MLPs have two matrices; SwiGLU and Gemma's GeGLU three
    assert mats == {"phi-2.json": 2, "gpt2-key-fields.json": 2, "opt-125m.json": 2, "Llama-3.1-8B.json": 3,
                    "gemma-2-9b-key-fields.json": 3}


def test_xielu_mlp_has_two_matrices(tmp_path):
    shutil.copy(HF / "apertus-8b-key-fields.json", tmp_path / "a.json")
    (tmp_path / "m.plan").write_text('model a from "a.json"\n')
    ev = dsl.load(tmp_path / "m.plan")
    assert int(ev.base_value("a.ffn_matrices")) == 2
    # Apertus (transformers' ApertusForCausalLM): per block q, o 2·h·h and k, v 2·h·(8·128) with
    # 8 KV heads; q/k RMSNorms 2·128; an up/down MLP 2·h·f; xIELU's learnable alpha_p and alpha_n
    # (one value each); two RMSNorms 2·h.  Untied 131,072-token embedding and head, final norm h.
    h, f, L, V, dh, nkv = 4096, 21504, 32, 131072, 128, 8
    block = 2 * h * h + 2 * h * nkv * dh + 2 * dh + 2 * h * f + 2 + 2 * h
    assert block == 218_112_258
    total = L * block + 2 * V * h + h
    assert total == 8_053_338_176          # 8.05 B
    assert int(ev.base_value("a.params")) == total


def test_sliding_window_layers_and_kv(catalog):
    names = [c[0] for c in CASES]
    g3 = f"m{names.index('gemma3-12b-key-fields.json')}"
    # Gemma 3 12B: 48 layers, pattern 6 → every 6th layer global: 8 global, 40 local of window 1,024
    assert int(catalog.base_value(f"{g3}.global_layers")) == 8
    assert int(catalog.base_value(f"{g3}.attention_window")) == 1024
    w = 2 * 8 * 256
    assert int(catalog.base_value(f"{g3}.kv_cache_width")) == w
    assert int(catalog.base_value(f"{g3}.kv_cache_width_global")) == 8 * w
    assert int(catalog.base_value(f"{g3}.kv_cache_width_local")) == 40 * w
    g2 = f"m{names.index('gemma-2-9b-key-fields.json')}"
    assert int(catalog.base_value(f"{g2}.global_layers")) == 21           # alternating local / global
    mi = f"m{names.index('OpenHermes-2.5-Mistral-7B.json')}"
    assert int(catalog.base_value(f"{mi}.global_layers")) == 0            # Mistral 7B: every layer slides
    ll = f"m{names.index('Llama-3.1-8B.json')}"
    assert int(catalog.base_value(f"{ll}.kv_cache_width_global")) == 32 * 2 * 8 * 128
    ds = f"m{names.index('DeepSeek-V3.json')}"
    assert int(catalog.base_value(f"{ds}.kv_cache_width")) == 512 + 64   # MLA: latent + decoupled RoPE


def test_attention_pairs():
    import sympy as sp
    from plugins.model.decoder import attention_pairs
    a = dict(L=sp.Integer(4), local=sp.Integer(3), window=sp.Integer(8), bidirectional=False)
    # 1 global layer: 16·17/2 = 136 pairs; 3 local: queries 0..7 see 1..8 keys (36), 8..15 see 8 (64)
    assert attention_pairs(a, sp.Integer(16)) == 136 + 3 * (36 + 64)
    assert attention_pairs(dict(a, window=None, local=sp.Integer(0)), sp.Integer(16)) == 4 * 136
    assert attention_pairs(dict(a, window=None, local=sp.Integer(0), bidirectional=True), sp.Integer(16)) \
        == 4 * 256


def test_bert_is_bidirectional(catalog):
    names = [c[0] for c in CASES]
    b = catalog.decls[f"m{names.index('bert-base-uncased-key-fields.json')}"]
    assert b.fields["attention"].value.value == "bidirectional"


# ---------------------------------------------------------------- bad configs
OTHER = "model ok { layers = 2; hidden = 64; ffn = 256; heads = 4; vocab = 100 }\n"


def _bad(tmp_path, cfg):
    (tmp_path / "bad.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    (tmp_path / "m.plan").write_text('model bad from "bad.json"\n' + OTHER +
                                     "plan p { x = ok.params }\nplan q { y = bad.params }\n")
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "m.plan")
    return ei.value


def test_unknown_architecture_lists_missing_keys(tmp_path):
    e = _bad(tmp_path, {"model_type": "mamba", "d_inner": 5, "vocab_size": 10})
    d = e.diagnostics[0]
    assert d.code == "bad-config" and (d.span.line, d.span.column) == (1, 16)
    assert "mamba" in d.summary and "'num_hidden_layers'" in d.summary and "'num_attention_heads'" in d.summary
    # the other plan still evaluates: 2·(4·64² + 3·64·256 + 2·64) + 2·100·64 + 64
    assert e.partial.base_value("p.x") == 2 * (4 * 64 ** 2 + 3 * 64 * 256 + 2 * 64) + 2 * 100 * 64 + 64
    assert "q" not in e.partial.plans()
    assert any("plan 'q' is not evaluated" in x.summary for x in e.diagnostics)


def test_missing_key_is_named(tmp_path):
    cfg = json.loads((HF / "Qwen3-8B.json").read_text())
    del cfg["vocab_size"]
    e = _bad(tmp_path, cfg)
    assert "'vocab_size'" in e.diagnostics[0].summary and e.partial.has("p.x")


def test_non_numeric_value_is_located(tmp_path):
    cfg = json.loads((HF / "Qwen3-8B.json").read_text())
    cfg["hidden_size"] = "wide"
    e = _bad(tmp_path, cfg)
    d = e.diagnostics[0]
    assert d.code == "bad-config" and "hidden_size" in d.summary and d.span.line == 1
    assert e.partial.has("p.x")


def test_cli_shows_the_error_and_the_other_plans(tmp_path):
    import subprocess
    import sys
    _bad(tmp_path, "[1, 2")
    r = subprocess.run([sys.executable, "-m", "dsl.cli", "get", str(tmp_path / "m.plan"), "p.x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "m.plan:1:16: error[bad-config]" in r.stderr and "not valid JSON" in r.stderr
    assert "m.plan:4:6: error[bad-config]: plan 'q' is not evaluated" in r.stderr
    assert float(r.stdout.split()[0]) == 2 * (4 * 64 ** 2 + 3 * 64 * 256 + 2 * 64) + 2 * 100 * 64 + 64


def test_unread_keys_are_a_warning(tmp_path):
    cfg = json.loads((HF / "Qwen3-8B.json").read_text())
    cfg["frobnicate_layers"] = 3
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "m.plan").write_text('model a from "c.json"\n')
    ev = dsl.load(tmp_path / "m.plan")
    assert any("frobnicate_layers" in w.summary for w in ev.warnings)
    assert int(ev.base_value("a.params")) == 8_190_735_360


def test_every_model_field_is_documented():
    from plugins.model.decoder import MODEL_FIELDS
    docs = "".join((REPO_ROOT / p).read_text(encoding="utf-8")
                   for p in ("docs/language.md", "docs/models.md", "docs/plugins/moe.md"))
    assert [p.name for p in MODEL_FIELDS if f"`{p.name}`" not in docs] == []


def test_all_moe_config_needs_no_dense_width(tmp_path):
    cfg = json.loads((HF / "Qwen3-30B-A3B.json").read_text())
    del cfg["intermediate_size"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "m.plan").write_text('model a from "c.json"\n')
    ev = dsl.load(tmp_path / "m.plan")
    assert int(ev.base_value("a.params")) == moe(48, 2048, 32, 4, 128, 151936, 128, 8, 768, qk_norm=True)[0]


def test_multimodal_config_reads_the_text_tower(tmp_path):
    cfg = json.loads((HF / "Qwen3-VL-4B-key-fields.json").read_text())
    cfg["vision_config"] = {"depth": 1}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    (tmp_path / "m.plan").write_text('model a from "c.json"\n')
    ev = dsl.load(tmp_path / "m.plan")
    assert any("text_config" in w.summary and "vision_config" in w.summary for w in ev.warnings)
    assert int(ev.base_value("a.params")) == llama(36, 2560, 9728, 32, 8, 151936, dh=128, tied=True, qk_norm=True)


def test_a_model_extending_a_bad_config_is_confined_too(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "m.plan").write_text('model bad from "bad.json"\nmodel child extends bad { layers = 3 }\n'
                                     + OTHER + "plan p { x = ok.params }\nplan q { y = child.params }\n")
    with pytest.raises(PlanError) as ei:
        dsl.load(tmp_path / "m.plan")
    e = ei.value
    assert any("plan 'q' is not evaluated: it uses model 'child'" in d.summary for d in e.diagnostics)
    assert e.partial.has("p.x")


def test_queries_about_a_stopped_plan_are_not_reported_again(tmp_path):
    """A file-level solve or require that reads a plan a bad config stopped is a consequence of
    that error: no follow-on `unknown name` at it, and the commands say why nothing was asked."""
    from conftest import run_cli
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "m.plan").write_text('model bad from "bad.json"\n'
                                     "plan start { x = bad.params; y = 2 * x }\n"
                                     "solve half: start.x for start.y == 4\n"
                                     "require small: start.y <= 10\n")
    for cmd, says in (("eval", "no plan evaluated (the errors above stopped them)"),
                      ("solve", "no `solve` query asked: each is about a plan the errors above stopped")):
        rc, out, err = run_cli(cmd, str(tmp_path / "m.plan"))
        assert rc == 1 and "unknown-name" not in err and says in err, (cmd, out, err)
        assert err.count("error[") == 2, err   # the config, and the plan it stops
