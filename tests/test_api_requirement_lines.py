"""Requirement lines of ``plan eval`` name the requirement's expression and the values it reads."""
from __future__ import annotations

import dsl


def test_requirement_record_has_expression_and_inputs(tmp_path):
    # 96 heads, tp 8: 96 / 8 = 12 heads per GPU >= 4 (hand)
    r = dsl.load("req.plan", text="plan p {\n  heads = 96\n  tp = 8\n  require split: heads / tp >= 4\n}\n")
    (rec,) = r.requirement_results("p")
    assert rec["ok"] and rec["expr"] == "heads/tp >= 4"
    assert rec["inputs"] == {"heads": (96.0, ""), "tp": (8.0, "")}


def test_eval_prints_the_expression(tmp_path):
    import subprocess
    import sys
    f = tmp_path / "req.plan"
    f.write_text("plan p {\n  heads = 96\n  tp = 32\n  require split: heads / tp >= 4\n}\n")
    out = subprocess.run([sys.executable, "-m", "dsl.cli", "eval", str(f)], capture_output=True, text=True).stdout
    # 96 / 32 = 3 < 4 (hand): violated
    assert "FAIL p.split: heads/tp >= 4: 3 >= 4  (heads = 96; tp = 32)  <- violated" in out
