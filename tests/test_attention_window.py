"""Eager attention's saved scores on sliding-window layers: a query keeps min(s, w) scores.

GPT-3 175B (Korthikanti et al. 2022: 34·s·b·h + 5·a·s²·b bytes per layer, eager attention with
dropout, 16-bit) with half of its 96 layers given a 512-token window: the score term averages
(48·2048 + 48·512)/96 = 1,280 keys per query instead of s = 2,048, so 5·a·s·1280·b replaces
5·a·s²·b.  Hand computation below; the unwindowed case is tests/test_layout_activations.py.
"""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval

S, H, A = 2048, 12288, 96
SBH = S * H


def _load(tmp_path, window_fields, attention="eager"):
    src = (CASES / "layout-activations-gpt3.plan").read_text().replace("../catalog/", "@catalog/")
    src = src.replace("  tied_embeddings = true\n", "  tied_embeddings = true\n" + window_fields)
    if attention != "eager":
        src = src.replace('attention = "eager"', f'attention = "{attention}"')
    p = tmp_path / "w.plan"
    p.write_text(src)
    return dsl.load(p)


def test_hand_value():
    assert (48 * 2048 + 48 * 512) // 96 == 1280
    assert 5 * A * 1280 / H == 50


def test_eager_scores_capped_by_the_window(tmp_path):
    ev = _load(tmp_path, "  sliding_window = 512\n  local_layers = 48\n")
    assert qval(ev, "none.activation_per_layer", "B") == pytest.approx(SBH * (34 + 5 * A * 1280 / H), abs=0.5)


def test_window_longer_than_the_sequence_changes_nothing(tmp_path):
    ev = _load(tmp_path, "  sliding_window = 4096\n")
    assert qval(ev, "none.activation_per_layer", "B") == pytest.approx(SBH * (34 + 5 * A * S / H), abs=0.5)
