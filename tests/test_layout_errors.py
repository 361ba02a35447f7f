"""Errors of `use layout`, `use layout_search` and `plan search`, and the MoE validity rules."""
from __future__ import annotations

import pytest

import dsl
from conftest import run_cli
from dsl.syntax.diagnostics import PlanError

HEAD = '''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq }
'''
BASE = HEAD + '''plan p {
  model = qwen3_8b; workload = w; device = h100_sxm; gpus = 16; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 76 GiB }
  use layout { link = pcie5_x16; nic = nic_400g; zero = 3 }
  LAYOUT_SEARCH
}
'''


def _plan(write_plan, search="use layout_search { tp = [1, 2] }", extra=""):
    return write_plan(BASE.replace("LAYOUT_SEARCH", search + "\n  " + extra))


def test_unknown_recompute_mode_in_search(write_plan):
    f = _plan(write_plan, 'use layout_search { recompute = ["none", "sometimes"] }')
    code, out, err = run_cli("search", f)
    assert code != 0
    assert "error[search]" in err and "'sometimes'" in err and "none, selective, full" in err
    assert "Traceback" not in err


def test_unknown_sequence_parallel_setting(write_plan):
    f = _plan(write_plan, 'use layout_search { sequence_parallel = ["yes"] }')
    code, out, err = run_cli("search", f)
    assert code != 0 and "'yes'" in err and "valid: off, on" in err


def test_unknown_recompute_choice_in_layout(write_plan):
    f = write_plan(BASE.replace("zero = 3 }", 'zero = 3; recompute = "sometimes" }').replace("LAYOUT_SEARCH", ""))
    with pytest.raises(PlanError) as e:
        dsl.load(f)
    assert any("selective" in (d.hint or "") + d.summary for d in e.value.diagnostics)


def test_layout_with_zero_is_a_conflict(write_plan):
    f = _plan(write_plan, "", "use zero { stage = 1 }")
    with pytest.raises(PlanError) as e:
        dsl.load(f)
    assert "conflict" in {d.code for d in e.value.diagnostics}


def test_layout_needs_memory(write_plan):
    f = write_plan(BASE.replace('  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; '
                                'usable = 76 GiB }\n', "").replace("LAYOUT_SEARCH", ""))
    with pytest.raises(PlanError) as e:
        dsl.load(f)
    assert "missing-parameter" in {d.code for d in e.value.diagnostics}


def test_search_without_layout_search_block(write_plan):
    f = _plan(write_plan, "")
    code, out, err = run_cli("search", f)
    assert code == 2 and "no plan" in err and "use layout_search" in err


def test_unknown_engine_is_rejected_by_the_parser(write_plan):
    code, out, err = run_cli("search", _plan(write_plan), "--engine", "spark")
    assert code == 2 and "local" in err and "dask" in err


def test_invalid_single_layout_names_the_rule(write_plan):
    # tp = 3 divides neither the 32 heads nor the 8 KV heads, nor 16 GPUs
    f = write_plan(BASE.replace("zero = 3 }", "zero = 3; tp = 3; dp = 5 }").replace("LAYOUT_SEARCH", ""))
    ws = dsl.load(f)
    failed = {r["name"] for r in ws.requirement_results("p") if not r["ok"]}
    assert {"tp_divides_heads", "tp_divides_kv_heads", "gpus_product"} <= failed


def test_moe_expert_rules(write_plan):
    np = pytest.importorskip("numpy")
    from plugins import layout_search as search
    text = HEAD + '''plan m {
  model = qwen3_30b_a3b; workload = w; device = h100_sxm; gpus = 64; gpus_per_host = 8; mfu = 30 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 76 GiB }
  use layout { link = nvlink_c2c; nic = nic_400g; zero = 1; recompute = "full" }
  use layout_search { tp = [1, 4]; ep = [1, 3, 8, 16]; zero = [1]; recompute = ["full"]; sequence_parallel = ["off"] }
}
'''
    ws = dsl.load(write_plan(text))
    res = search.run(ws, "m")
    c = res.columns
    # 128 experts: ep = 3 does not divide them; tp = 4 → dp = 16: ep = 16 divides dp, ep = 3 never
    assert set(c["reason"][c["e"] == 3]) == {"ep does not divide the experts"}
    assert c["valid"][(c["e"] == 16) & (c["t"] == 1)].all()
    # expert parallelism shards the experts: less memory per GPU, and an all-to-all term
    i1 = int(np.nonzero((c["e"] == 1) & (c["t"] == 1))[0][0])
    i8 = int(np.nonzero((c["e"] == 8) & (c["t"] == 1))[0][0])
    assert c["memory"][i8] < c["memory"][i1]
    assert c["ep"][i8] > 0 and c["ep"][i1] == 0


def test_ep_on_a_dense_model(write_plan):
    pytest.importorskip("numpy")
    from plugins import layout_search as search
    ws = dsl.load(_plan(write_plan, "use layout_search { tp = [1]; ep = [1, 2]; zero = [3] }"))
    res = search.run(ws, "p")
    c = res.columns
    assert set(c["reason"][c["e"] == 2]) == {"ep > 1 on a dense model (no experts)"}
