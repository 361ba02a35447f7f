"""`plan init` writes a commented starter plan that evaluates, for training or serving."""
from __future__ import annotations

import shutil

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


def test_init_serving(tmp_path):
    rc, _, err = run_main("init", "--model", "qwen3_8b", "--device", "h100_sxm", "--gpus", "8", "--serve",
                          "-o", "s.plan", cwd=tmp_path)
    assert rc == 0, err
    rc, out, err = run_main("eval", "s.plan", "--format", "json", cwd=tmp_path)
    assert rc == 0, err
    import json
    doc = json.loads(out)
    assert "decode_capacity" in doc["plans"]["serve"]["quantities"]
    ans = doc["solves"]["cards_needed"]["answer"]
    assert ans == int(ans) and ans >= 1              # cards are whole


def test_init_with_a_misspelt_device_leaves_no_file(tmp_path):
    rc, _, err = run_main("init", "--model", "qwen3_8b", "--device", "h100", "--gpus", "8",
                          "-o", "bad.plan", cwd=tmp_path)
    assert rc == 1 and "did you mean 'h100_sxm'?" in err
    assert not (tmp_path / "bad.plan").exists()


def test_init_writes_canonically_formatted_plans(tmp_path):
    """A starter passes `plan fmt --check` as written (a CI gate on formatting must not fail on it)."""
    shutil.copy(HF, tmp_path / "config.json")
    for args in (("--model", "qwen3_8b", "--gpus", "64", "-o", "t.plan"),
                 ("--model", "config.json", "--gpus", "2", "--serve", "-o", "s.plan")):
        rc, _, err = run_main("init", "--device", "h100_sxm", *args, cwd=tmp_path)
        assert rc == 0, err
    rc, _, err = run_main("fmt", "--check", "t.plan", "s.plan", cwd=tmp_path)
    assert rc == 0, err
