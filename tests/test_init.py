"""`plan init` writes a commented starter plan that evaluates, for training or serving."""
from __future__ import annotations

import shutil

import re

import pytest

from conftest import REPO_ROOT, run_main

HF = REPO_ROOT / "specs" / "catalog" / "hf" / "Qwen3-8B.json"


def test_init_training_from_a_config(tmp_path):
    shutil.copy(HF, tmp_path / "config.json")
    out = tmp_path / "start.plan"
    rc, _, err = run_main("init", "--model", "config.json", "--device", "h100_sxm", "--gpus", "64",
                          "-o", "start.plan", cwd=tmp_path)
    assert rc == 0, err
    text = out.read_text(encoding="utf-8")
    assert 'model my_model from "config.json"' in text and "gpus = 64; gpus_per_host = 8" in text
    assert "global_batch = 512 seq" in text          # 512 = 8 × 64: a multiple of the GPU count
    assert "solve mfu_needed:" in text and "require mfu_reachable:" in text
    assert text.count("#") >= 8                      # commented
    rc, out_text, err = run_main("eval", "start.plan", cwd=tmp_path)
    assert rc == 0 and "mfu_needed" in out_text, err
    assert run_main("check", "start.plan", "--strict", cwd=tmp_path)[0] == 0
    # the file exists now: a second init refuses to overwrite it without --force
    rc, _, err = run_main("init", "--model", "config.json", "--device", "h100_sxm", "--gpus", "64",
                          "-o", "start.plan", cwd=tmp_path)
    assert rc == 2 and "--force" in err


def test_init_batch_is_a_multiple_of_an_odd_gpu_count(tmp_path):
    rc, _, err = run_main("init", "--model", "qwen3_8b", "--device", "rtx4090", "--gpus", "48",
                          "-o", "p.plan", cwd=tmp_path)
    assert rc == 0, err
    text = (tmp_path / "p.plan").read_text(encoding="utf-8")
    assert "global_batch = 528 seq" in text          # ceil(512 / 48) = 11; 11 × 48 = 528
    assert "link = pcie4_x16" in text


@pytest.mark.parametrize("config", ["Qwen3-8B.json", "Qwen3-30B-A3B.json"])
def test_init_serving_starts_from_the_engine_model(tmp_path, config):
    """`plan init --serve` on a dense and a mixture-of-experts config writes `use engine`,
    `use serving_step` and `use batching` on Poisson arrivals with the SLO as requirements, and
    the file gives TTFT/TPOT percentiles and a whole number of replicas."""
    shutil.copy(REPO_ROOT / "specs" / "catalog" / "hf" / config, tmp_path / "config.json")
    rc, _, err = run_main("init", "--model", "config.json", "--device", "h100_sxm", "--gpus", "8", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    text = (tmp_path / "s.plan").read_text(encoding="utf-8")
    for line in ("use engine {", "engine = vllm", "use serving_step {", "use batching {", 'arrivals = "poisson"',
                 "require ttft_target: serve.ttft_p95 <= 2 s", "require tpot_target: serve.tpot_p95 <= 50 ms",
                 "solve replicas_needed: serve.engine.replicas"):
        assert line in text, line
    assert "decode_bound" not in text
    # Qwen3-8B's cache holds the step's batch (64 × 2,048 tokens) on one H100 (tp = 1). Qwen3-30B-A3B's
    # 56.87 GiB of weights leave 0.9 × 79.22 − 56.87 − 5.796 (vLLM's sampler pass over 1,024 ×
    # 151,936 logits at 40 B, the large-GPU max_num_seqs) − 0.13 = 8.50 GiB: 93,000 tokens of
    # 96 KiB (48 layers × 4 KV heads × 128 × 2 × 2 B), fewer than 131,072, so tp = 2
    tp = 1 if config == "Qwen3-8B.json" else 2
    assert f"tp = {tp}; replicas = {8 // tp}" in text
    assert run_main("fmt", "--check", "s.plan", cwd=tmp_path)[0] == 0
    rc, out, err = run_main("eval", "s.plan", "--format", "json", cwd=tmp_path)
    assert rc == 0, err
    import json
    doc = json.loads(out)
    q = doc["plans"]["serve"]["quantities"]
    for name in ("ttft_p95", "tpot_p95", "kv_tokens", "ttft_floor", "goodput"):
        assert name in q, name
    ans = doc["solves"]["replicas_needed"]["answer"]
    assert ans == int(ans) and 1 <= ans <= 8          # replicas are whole


def test_init_serving_shards_a_model_too_large_for_one_gpu(tmp_path):
    """Llama 3.1 70B (141 GB in BF16) does not fit one 80 GB H100: the starter takes the smallest
    tp dividing the GPU count at which the KV cache holds the step's batch of 64 sequences of
    2,048 tokens (131,072 tokens) — at tp 2 each GPU holds 70.6 GB (65.7 GiB) of weights, and
    vLLM's 0.9 × 79.22 GiB less those, the 1.2 GiB sampler reserve and 2.1 GiB of runtime and TP
    buffers leaves about 2.2 GiB: about 14,600 tokens at 160 KiB per token (80 layers × 4 of the 8
    KV heads × 128 × 2 × 2 B); at tp 4, half the weights — with the host's link for its
    all-reduces."""
    rc, _, err = run_main("init", "--model", "llama31_70b", "--device", "h100_sxm", "--gpus", "8", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    text = (tmp_path / "s.plan").read_text(encoding="utf-8")
    assert "tp = 4; replicas = 2" in text and "link = nvlink4" in text
    assert run_main("eval", "s.plan", cwd=tmp_path)[0] == 0


def test_init_serving_a_model_that_fits_nowhere_reports_the_root_error(tmp_path):
    """Llama 3.1 70B (70.55 B parameters, Meta's model card: 70.6 B) in bf16 is 141 GB of weights;
    two RTX 4090s hold 48 GB: the root cause is the GPU count, at least ⌈141.1 / 24⌉ = 6 cards
    (by hand) — not a smaller max_model_len, which the engine's generic hint suggested."""
    rc, _, err = run_main("init", "--model", "llama31_70b", "--device", "rtx4090", "--gpus", "2", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 2 and "error[does-not-fit]" in err and err.count("error[") == 1, err
    assert "71 B parameters" in err and "at least 6 × rtx4090" in err and "max_model_len" not in err
    assert not (tmp_path / "s.plan").exists()


def test_init_with_a_misspelt_device_leaves_no_file(tmp_path):
    rc, _, err = run_main("init", "--model", "qwen3_8b", "--device", "h100", "--gpus", "8",
                          "-o", "bad.plan", cwd=tmp_path)
    assert rc == 2 and "did you mean 'h100_sxm'?" in err and "catalog devices: a100_pcie_80gb" in err
    assert "bad.plan:" not in err and not (tmp_path / "bad.plan").exists()


@pytest.mark.parametrize("model", ["nope", "/etc/passwd"])
def test_init_with_an_unknown_model_names_it_and_lists_the_catalog(tmp_path, model):
    """Not an error in a file that "was not kept" (plan.plan:15:11): the argument is named, with
    the catalog's models."""
    rc, _, err = run_main("init", "--model", model, "--device", "h100_sxm", "--gpus", "8", cwd=tmp_path)
    assert rc == 2 and f"--model {model}: not a catalog model" in err and "Traceback" not in err
    assert "catalog models: deepseek_v3, llama31_70b" in err and "qwen3_8b" in err and "config.json" in err
    assert "plan.plan" not in err and not (tmp_path / "plan.plan").exists()
    rc, _, err = run_main("init", "--model", "missing.json", "--device", "h100_sxm", "--gpus", "8", cwd=tmp_path)
    assert rc == 2 and "--model missing.json: no such config file" in err


def test_init_writes_canonically_formatted_plans(tmp_path):
    """A starter passes `plan fmt --check` as written (a CI gate on formatting must not fail on it)."""
    shutil.copy(HF, tmp_path / "config.json")
    for args in (("--model", "qwen3_8b", "--gpus", "64", "-o", "t.plan"),
                 ("--model", "config.json", "--gpus", "2", "--serve", "-o", "s.plan")):
        rc, _, err = run_main("init", "--device", "h100_sxm", *args, cwd=tmp_path)
        assert rc == 0, err
    rc, _, err = run_main("fmt", "--check", "t.plan", "s.plan", cwd=tmp_path)
    assert rc == 0, err


def test_init_copies_a_config_from_outside_the_plans_directory(tmp_path):
    """A downloaded config.json elsewhere: imports outside a plan's project root are refused, so
    the starter gets a copy next to it and evaluates where it was written."""
    (tmp_path / "downloads").mkdir()
    (tmp_path / "work").mkdir()
    shutil.copy(HF, tmp_path / "downloads" / "config.json")
    rc, _, err = run_main("init", "--model", str(tmp_path / "downloads" / "config.json"), "--device", "h100_sxm",
                          "--gpus", "8", "-o", "start.plan", cwd=tmp_path / "work")
    assert rc == 0, err
    assert (tmp_path / "work" / "config.json").read_bytes() == HF.read_bytes()
    assert "copied" in err
    assert 'model my_model from "config.json"' in (tmp_path / "work" / "start.plan").read_text(encoding="utf-8")
    assert run_main("eval", "start.plan", cwd=tmp_path / "work")[0] == 0
    # a different file of that name already there is not overwritten
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text("{}", encoding="utf-8")
    rc, _, err = run_main("init", "--model", str(tmp_path / "downloads" / "config.json"), "--device", "h100_sxm",
                          "--gpus", "8", "-o", "start.plan", cwd=tmp_path / "other")
    assert rc == 2 and "differs" in err and not (tmp_path / "other" / "start.plan").exists()


def test_init_training_recomputes_when_the_activations_do_not_fit(tmp_path):
    """Llama 3.1 70B on 64 H100 with ZeRO-3 at 4,096 tokens: without recomputation its
    activations alone exceed the 0.9 × 80 GB usable (Korthikanti et al. 2022: 34·s·b·h bytes per
    layer and more, 80 layers × 34 × 4,096 × 8,192 B ≈ 85 GiB); the starter recomputes and fits."""
    shutil.copy(REPO_ROOT / "specs" / "catalog" / "hf" / "Llama-3.1-70B.json", tmp_path / "c.json")
    rc, _, err = run_main("init", "--model", "c.json", "--device", "h100_sxm", "--gpus", "64",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    text = (tmp_path / "s.plan").read_text(encoding="utf-8")
    assert 'recompute = "full"' in text or 'recompute = "selective"' in text
    assert run_main("check", "s.plan", "--strict", cwd=tmp_path)[0] == 0
    # a model whose activations fit keeps recomputation off, with the knob in a comment
    shutil.copy(HF, tmp_path / "q.json")
    assert run_main("init", "--model", "q.json", "--device", "h100_sxm", "--gpus", "64", "-o", "q.plan",
                    cwd=tmp_path)[0] == 0
    assert '# recompute = "selective"' in (tmp_path / "q.plan").read_text(encoding="utf-8")


def test_init_serving_says_when_no_tp_holds_the_batch(tmp_path):
    """Qwen3-30B-A3B on one H100: its KV cache holds about 93,000 tokens (the budget of the test
    above), about 45 sequences of 2,048 against the step's batch of 64 — the comment and a
    warning say so."""
    rc, _, err = run_main("init", "--model", "qwen3_30b_a3b", "--device", "h100_sxm", "--gpus", "1", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    text = (tmp_path / "s.plan").read_text(encoding="utf-8")
    assert "tp = 1; replicas = 1" in text and "does not hold 64 sequences of 2,048 tokens" in text
    assert "smallest tp at which" not in text
    assert "fewer than the step's batch of 64" in err
    m = re.search(r"holds ([\d,]+) tokens, ([\d.]+) sequences", err)
    # floor(budget / (16 × 98,304)) × 16, budget = 0.9 × 79.22 GiB − 2 × 30,532,122,624 B
    # − 1,024 × 151,936 × 40 B (the sampler reserve) − 0.13 GiB (the V1 preset's non-PyTorch memory) = 8.50 GiB
    assert m and int(m.group(1).replace(",", "")) == 92_848, err


def test_init_serving_warns_when_the_placeholder_demand_misses_the_slo(tmp_path):
    rc, _, err = run_main("init", "--model", "qwen3_8b", "--device", "rtx4090", "--gpus", "1", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    assert "misses the starter's SLO" in err and "serve.ttft_p95 <= 2 s fails at" in err


def test_init_serving_starter_that_fits_nowhere_is_not_kept(tmp_path):
    # 141 GB of Llama 3.1 70B weights fit the 160 GB of two H100s, but the engine's 0.9 memory
    # fraction less 65.71 GiB of weights, the 4.89 GiB sampler reserve and 0.54 GiB of runtime
    # memory leaves 0.16 GiB per GPU: 64 blocks, 1,024 tokens, less than one request of the
    # starter's demand — the starter's own evaluation fails
    rc, _, err = run_main("init", "--model", "llama31_70b", "--device", "h100_sxm", "--gpus", "2", "--serve",
                          "-o", "d.plan", cwd=tmp_path)
    assert rc == 1 and "does not evaluate and was not kept" in err and "the pool holds 1024 (64 blocks of 16)" in err
    assert not (tmp_path / "d.plan").exists() and "Traceback" not in err
    # DeepSeek-V3's 671 B parameters are 1,342 GB in bf16: at least ⌈1342 / 80⌉ = 17 H100s (80 GB)
    rc, _, err = run_main("init", "--model", "deepseek_v3", "--device", "h100_sxm", "--gpus", "8", "--serve",
                          "-o", "d.plan", cwd=tmp_path)
    assert rc == 2 and "at least 17 × h100_sxm" in err and not (tmp_path / "d.plan").exists()


def test_init_with_a_broken_config_prints_its_errors_and_leaves_no_file(tmp_path):
    """A config with num_attention_heads = -32: the starter's quiet trial evaluations must not
    swallow the error (it was counted, "3 errors", but never printed, and the file was kept).
    The error names the key and points at it in the config; no starter is left behind."""
    shutil.copy(REPO_ROOT / "tests" / "data" / "config-negative-heads.json", tmp_path / "cfg.json")
    rc, _, err = run_main("init", "--model", "cfg.json", "--device", "h100_sxm", "--gpus", "8",
                          "-o", "p.plan", cwd=tmp_path)
    assert rc == 1, err
    assert "does not evaluate and was not kept" in err and "wrote p.plan" not in err
    assert "error[bad-config]: 'cfg.json': key 'num_attention_heads' must be a whole number" in err, err
    assert "note: 'num_attention_heads' is set at cfg.json:1:138" in err
    assert err.count("error[") == 2 and err.rstrip().endswith("2 errors") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json"]
    # the same for a serving starter (its trial loads pick the tensor-parallel degree)
    rc, _, err = run_main("init", "--model", "cfg.json", "--device", "h100_sxm", "--gpus", "8", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 1 and "key 'num_attention_heads'" in err and "cfg.json:1:138" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json"]
