"""Visual tokens, encoder cache, KV of images, diffusion passes (book ch. 3 §3.3.1–3.3.2,
exercise 3-5) from specs/cases/multimodal-vision.plan."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "multimodal-vision.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_one_image(ws):
    # 640*640/16^2 = 1,600 patches -> /2^2 = 400 tokens; EC 400*10,240*2 B = 7.8125 MiB; KV 400*144 KiB = 56.25 MiB
    assert qval(ws, "one_image.patches") == 1600
    assert qval(ws, "one_image.visual_tokens", "token") == 400
    assert qval(ws, "one_image.encoder_cache", "B") == 8_192_000
    assert qval(ws, "one_image.encoder_cache", "MiB") == pytest.approx(7.8125, abs=0.00005)
    assert qval(ws, "one_image.kv_per_token", "KiB/token") == 144
    assert qval(ws, "one_image.visual_kv", "MiB") == pytest.approx(56.25, abs=0.005)


def test_four_images_and_text(ws):
    assert qval(ws, "four_images.encoder_cache", "MiB") == pytest.approx(31.25, abs=0.005)
    assert qval(ws, "four_images.visual_kv", "MiB") == pytest.approx(225, abs=0.5)
    assert qval(ws, "four_images.input_kv", "MiB") == pytest.approx(281.25, abs=0.005)


def test_doubling_the_side(ws):
    # exercise 3-5: 1280x1280 -> 1,600 tokens, EC and KV x4
    assert qval(ws, "one_image_1280.visual_tokens", "token") == 1600
    for q in ("encoder_cache", "visual_kv"):
        assert qval(ws, f"one_image_1280.{q}") == 4 * qval(ws, f"one_image.{q}")


def test_diffusion_passes(ws):
    # 50 steps x 2 CFG branches = 100 DiT passes; doubling steps doubles the FLOPs
    assert qval(ws, "image_generation.dit_passes") == 100
    assert qval(ws, "image_generation.denoise_flops", "FLOP") == pytest.approx(7.830e15, rel=1e-12)
    assert qval(ws, "image_generation_100_steps.denoise_flops") == 2 * qval(ws, "image_generation.denoise_flops")


def test_height_for_kv_budget(ws):
    # 225 MiB / 56.25 MiB = 4x the tokens at a fixed width -> height 4*640 = 2,560
    s = solve_query(ws, ws.queries[0])
    assert s.value == pytest.approx(2560, abs=0.5)
