"""Overlap per collective in the training step (``use layout { overlap; tp_overlap; cp_overlap;
ep_overlap }``): each collective's exposed part is (1 − its overlap) × its time, the hidden parts
together at most the compute they hide behind, charged once —
the step's timeline and its closed form agree — and DualPipe hides the EP all-to-all by default
(DeepSeek-V3 Technical Report, "DualPipe": the forward and backward chunks' all-to-all overlapped
with the other chunk's computation)."""
from __future__ import annotations

import pytest

import dsl
from conftest import qval

PLAN = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 8192 token; global_batch = 64 seq }
plan a { model = llama31_70b; workload = w; device = h100_sxm
  gpus = 16; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 1; zero = 1; recompute = "full"; sequence_parallel = true
               link = nvlink4; nic = ib_ndr_400g }
}
plan half extends a { use layout { overlap = 50 % } }
plan tp_only extends a { use layout { tp_overlap = 80 % } }
"""


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    p = tmp_path_factory.mktemp("ov") / "ov.plan"
    p.write_text(PLAN, encoding="utf-8")
    return dsl.load(p)


def test_the_overlap_is_taken_off_once(ev):
    # the TP all-reduces' time is the same in the three plans; what the step charges is
    # (1 − overlap) × it: 50 % -> half, tp_overlap 80 % -> a fifth
    raw = qval(ev, "a.tp_comm", "s")
    assert qval(ev, "half.tp_comm", "s") == pytest.approx(raw / 2, rel=1e-12)
    assert qval(ev, "tp_only.tp_comm", "s") == pytest.approx(raw / 5, rel=1e-12)
    for plan in ("a", "half", "tp_only"):
        # the step timeline charges exactly the exposed part: the waits are the exposed TP plus
        # the exposed DP collectives (no pipeline, CP or EP here)
        assert qval(ev, f"{plan}.comm_wait", "s") == pytest.approx(
            qval(ev, f"{plan}.tp_comm", "s") + qval(ev, f"{plan}.dp_comm", "s"), rel=1e-9)
    # the step is the same chain with the TP term halved
    assert qval(ev, "a.step_time", "s") - qval(ev, "half.step_time", "s") == pytest.approx(raw / 2, rel=1e-9)


def test_dualpipe_hides_the_expert_all_to_all_by_default(tmp_path):
    text = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 4096 token; global_batch = 256 seq }
plan d { model = qwen3_30b_a3b; workload = w; device = h100_sxm
  gpus = 32; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 1; pp = 2; ep = 16; zero = 1; schedule = "dualpipe"; link = nvlink4; nic = ib_ndr_400g }
}
plan shown extends d { use layout { ep_overlap = 0 % } }
"""
    p = tmp_path / "d.plan"
    p.write_text(text, encoding="utf-8")
    r = dsl.load(p)
    raw = qval(r, "shown.ep_comm", "s")                 # ep_overlap = 0 %: the whole all-to-all
    assert raw > 0
    # DualPipe hides it behind the other chunk's compute — all of it, up to that compute: what
    # exceeds compute + recomputation stays exposed (here the all-to-all outlasts the compute)
    compute = qval(r, "d.compute_time", "s") + qval(r, "d.recompute_time", "s")
    assert qval(r, "d.ep_comm", "s") == pytest.approx(max(0.0, raw - compute), rel=1e-9, abs=1e-12)
    assert qval(r, "d.step_time", "s") < qval(r, "shown.step_time", "s")


FRAMEWORKS = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 8192 token; global_batch = 64 seq }
device ideal extends h100_sxm { tp_overlap_efficiency = 100 % }
device half extends h100_sxm { tp_overlap_efficiency = 50 % }
plan none { model = llama31_70b; workload = w; device = ideal
  gpus = 32; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 8; pp = 1; cp = 2; zero = 1; recompute = "full"; sequence_parallel = true
               link = nvlink4; nic = ib_ndr_400g; overlap = 50 %; attention_kernel = "gemm" }
}
plan nemo extends none { use layout { framework = "nemo" } }
plan megatron extends none { use layout { framework = "megatron" } }
plan titan extends none { use layout { framework = "torchtitan" } }
plan stated extends none { use layout { framework = "nemo"; tp_overlap = 25 % } }
plan nemo_half extends nemo { device = half }
plan titan_async extends titan { device = half; use layout { tp_comm_overlap = "on" } }
plan nemo_off extends nemo { use layout { tp_comm_overlap = "off" } }
plan stated_on extends stated { use layout { tp_comm_overlap = "on" } }
"""


@pytest.fixture(scope="module")
def fw(tmp_path_factory):
    p = tmp_path_factory.mktemp("fw") / "fw.plan"
    p.write_text(FRAMEWORKS, encoding="utf-8")
    return dsl.load(p)


def test_framework_defaults_per_collective(fw):
    # "none": both collectives at the plan's overlap, 50 % hidden; the raw times are twice that
    tp_raw, cp_raw = 2 * qval(fw, "none.tp_comm", "s"), 2 * qval(fw, "none.cp_comm", "s")
    # NeMo: the TP and CP rings decomposed, all but one of each ring's steps hidden: 1/tp = 1/8 of
    # the TP time and 1/cp = 1/2 of the CP time exposed
    assert qval(fw, "nemo.tp_comm", "s") == pytest.approx(tp_raw / 8, rel=1e-12)
    assert qval(fw, "nemo.cp_comm", "s") == pytest.approx(cp_raw / 2, rel=1e-12)
    # Megatron-LM's defaults: TP at the plan's overlap (no --tp-comm-overlap), CP the P2P ring
    assert qval(fw, "megatron.tp_comm", "s") == pytest.approx(tp_raw / 2, rel=1e-12)
    assert qval(fw, "megatron.cp_comm", "s") == pytest.approx(cp_raw / 2, rel=1e-12)
    # torchtitan's defaults: async TP off, all-gather CP rotation: both wholly exposed whatever
    # the plan's overlap says
    assert qval(fw, "titan.tp_comm", "s") == pytest.approx(tp_raw, rel=1e-12)
    assert qval(fw, "titan.cp_comm", "s") == pytest.approx(cp_raw, rel=1e-12)
    # a stated per-collective share wins over the framework's default
    assert qval(fw, "stated.tp_comm", "s") == pytest.approx(0.75 * tp_raw, rel=1e-12)
    assert qval(fw, "stated.cp_comm", "s") == pytest.approx(cp_raw / 2, rel=1e-12)
    # a device hiding half the ideal share (tp_overlap_efficiency = 50 %): exposed 1 − ½·(1 − 1/8)
    # = 9/16 of the TP time, whether the framework or tp_comm_overlap = "on" decomposes the ring
    assert qval(fw, "nemo_half.tp_comm", "s") == pytest.approx(tp_raw * 9 / 16, rel=1e-12)
    assert qval(fw, "titan_async.tp_comm", "s") == pytest.approx(tp_raw * 9 / 16, rel=1e-12)
    # tp_comm_overlap = "off" exposes the TP ring under NeMo; a stated share still wins over "on"
    assert qval(fw, "nemo_off.tp_comm", "s") == pytest.approx(tp_raw, rel=1e-12)
    assert qval(fw, "stated_on.tp_comm", "s") == pytest.approx(0.75 * tp_raw, rel=1e-12)
    # the step is the one chain (the attention kernel held, attention_kernel = "gemm"): hiding more
    # TP time shortens it by exactly that time
    assert (qval(fw, "titan.step_time", "s") - qval(fw, "nemo.step_time", "s")
            == pytest.approx(tp_raw * 7 / 8 + cp_raw / 2, rel=1e-9))


def test_search_reads_the_framework_as_eval_does(fw):
    # plan search prices the plan's own layout with the same exposed shares (plugins.training.layout_overlap)
    from plugins.training import layout_overlap as lo
    K = {"overlap": 0.5, **lo.collective_overlaps({"tp": None, "cp": None, "ep": None}, 0.5, "1f1b", "nemo")}
    assert lo.exposed_shares(K, {"t": 8, "c": 2, "e": 1}) == (1 / 8, 1 / 2, 0.5)
    K = {"overlap": 0.5, **lo.collective_overlaps({"tp": 0.25, "cp": None, "ep": None}, 0.5, "dualpipe", "torchtitan")}
    assert lo.exposed_shares(K, {"t": 8, "c": 2, "e": 4}) == (0.75, 1, 0)
    # the device's tp_overlap_efficiency scales the ring's ideal hidden share (1 − 1/8) by ½
    K = {"overlap": 0, "ring_eff_tp": 0.5,
         **lo.collective_overlaps({"tp": None, "cp": None, "ep": None}, 0, "1f1b", "torchtitan", "on")}
    assert lo.exposed_shares(K, {"t": 8, "c": 2, "e": 1}) == (0.5625, 1, 1)


def test_an_unknown_framework_is_a_located_error(tmp_path):
    from dsl.syntax.diagnostics import PlanError
    p = tmp_path / "bad.plan"
    p.write_text(FRAMEWORKS.replace('framework = "nemo" }', 'framework = "nemoo" }', 1), encoding="utf-8")
    with pytest.raises(PlanError) as e:
        dsl.load(p)
    assert "nemoo" in str(e.value) and "bad.plan:" in str(e.value)


SEARCH = """import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e11 token; seq_len = 8192 token; global_batch = 64 seq }
plan s { model = llama31_70b; workload = w; device = h100_sxm
  gpus = 64; gpus_per_host = 8; micro_batch = 1 seq
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam" }
  use layout { tp = 4; zero = 1; recompute = "full"; sequence_parallel = true; efficiency = "roofline"
               link = nvlink4; nic = ib_ndr_400g; framework = "nemo" }
  use layout_search { tp = [2, 4, 8]; pp = [1, 2]; zero = [1, 3] }
}
"""


def test_search_prices_the_decomposed_tp_overlap_as_eval_does(tmp_path):
    """On the catalog's H100 (its tp_overlap_efficiency stated) under NeMo's decomposed TP ring, the
    search's best layout (TP > 1) written back as a plan evaluates to the search's own step time:
    both price the ring's exposed share as 1 − η·(1 − 1/tp)."""
    from plugins.training import layout_search as search
    p = tmp_path / "s.plan"
    p.write_text(SEARCH, encoding="utf-8")
    ws = dsl.load(p)
    res = search.run(ws, "s")
    out = tmp_path / "best.plan"
    out.write_text(search.emit_plan([res], p, out), encoding="utf-8")
    ev = dsl.load(out)
    assert qval(ev, "s_best.step_time", "s") == pytest.approx(res.row(res.best)["step_s"], rel=1e-9)
    assert res.row(res.best)["tp"] > 1
