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


MOE = HEAD + '''plan m {
  model = MODEL; workload = w; device = h100_sxm; gpus = GPUS; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = 76 GiB }
  use layout { link = nvlink4; nic = nic_400g; zero = 1; LAYOUT }
}
'''


@pytest.mark.parametrize("model, gpus, layout, summary, hint", [
    # 8 GPUs hold 8 dp ranks: an expert-parallel group of 64 does not fit (was priced, with a
    # negative transfer volume, and only "FAIL ep_divides_dp")
    ("qwen3_30b_a3b", 8, "ep = 64", "ep = 64 does not divide the 8 data-, tensor- and context-parallel ranks",
     "choose ep dividing 8"),
    ("qwen3_30b_a3b", 24, "tp = 2; ep = 4; etp = 4",
     "ep·etp = 4·4 = 16 does not divide the 24 data-, tensor- and context-parallel ranks", "ep·etp dividing 24"),
    ("qwen3_30b_a3b", 512, "ep = 256", "ep = 256 exceeds the 128 routed experts of model 'qwen3_30b_a3b'",
     "divides 128"),
    ("qwen3_30b_a3b", 48, "ep = 3", "ep = 3 does not divide the 128 routed experts", "divides 128"),
    ("qwen3_8b", 8, "ep = 2", "ep = 2, but model 'qwen3_8b' has no routed experts", "MoE model"),
])
def test_impossible_expert_parallel_degree_is_an_error_at_ep(write_plan, model, gpus, layout, summary, hint):
    f = write_plan(MOE.replace("MODEL", model).replace("GPUS", str(gpus)).replace("LAYOUT", layout))
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err and out == ""
    assert "error[out-of-range]" in err and summary in err and hint in err, err
    line = MOE.splitlines().index("  use layout { link = nvlink4; nic = nic_400g; zero = 1; LAYOUT }") + 1
    col = layout.index("ep =") + len("  use layout { link = nvlink4; nic = nic_400g; zero = 1; ") + len("ep = ") + 1
    assert f"t.plan:{line}:{col}:" in err


def test_valid_expert_parallel_degree_is_priced(write_plan):
    f = write_plan(MOE.replace("MODEL", "qwen3_30b_a3b").replace("GPUS", "16").replace("LAYOUT", "ep = 16"))
    reqs = {r["name"]: r["ok"] for r in dsl.load(f).requirement_results("m")}
    assert reqs["ep_divides_experts"] and reqs["ep_divides_dp"]


def test_moe_expert_rules(write_plan):
    np = pytest.importorskip("numpy")
    from plugins.training import layout_search as search
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
    from plugins.training import layout_search as search
    ws = dsl.load(_plan(write_plan, "use layout_search { tp = [1]; ep = [1, 2]; zero = [3] }"))
    res = search.run(ws, "p")
    c = res.columns
    assert set(c["reason"][c["e"] == 2]) == {"ep > 1 on a dense model (no experts)"}
