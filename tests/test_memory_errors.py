"""Errors of the memory plugins: each names the offending text and the valid choices."""
from __future__ import annotations

import pytest

from conftest import REPO_ROOT, run_cli

HEAD = f'''import "{REPO_ROOT}/specs/catalog/hardware.plan"
import "{REPO_ROOT}/specs/catalog/models.plan"
plan p {{
  model = qwen3_8b; device = rtx4090
'''

BUF = 'ops = ["fwd", "bwd"]; names = ["x", "y"]; sizes = [1 GiB, 2 GiB]; first = ["fwd", "fwd"]; last = ["bwd", "bwd"]'


def _err(write_plan, body):
    p = write_plan(HEAD + "  " + body + "\n}\n")
    code, out, err = run_cli("eval", p)
    assert code == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("body,code,must", [
    ('use memory { weights = "fp4" }', "out-of-range",
     ['"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"', '"fp4"']),
    ('use memory { operand = "int4" }', "out-of-range", ['"same"', '"fp8_e4m3"']),
    ('use memory { optimizer = "lion" }', "out-of-range", ['"adam", "adamw", "sgd_momentum", "sgd"']),
    ('use memory { grads = "fp8" }', "out-of-range", ['"fp32", "bf16", "fp16"']),
    ('use memory {}\n  use zero { stage = 4; group = 8 }', "out-of-range", ["'stage' = 4 is outside [0, 3]",
                                                                            "ZeRO stage: 0 plain DP"]),
    ('use offload { tensor = 96 MiB; link = pcie4_x16; cpu_bw = 307.2 GB/s; convert = "disk" }', "out-of-range",
     ['"cpu", "gpu"']),
    ('use recompute { tokens = 128 token; policy = "full" }', "out-of-range", ['"none", "selective"']),
    ('use recompute { tokens = 128 token; activations = "fp8" }', "out-of-range", ['"fp32", "bf16", "fp16"']),
])
def test_unknown_choice_lists_valid_ones(write_plan, body, code, must):
    err = _err(write_plan, body)
    assert f"error[{code}]" in err
    for m in must:
        assert m in err, (m, err)


def test_buffers_length_mismatch(write_plan):
    err = _err(write_plan, "use buffers { " + BUF.replace("sizes = [1 GiB, 2 GiB]", "sizes = [1 GiB]") + " }")
    assert "error[out-of-range]: `sizes` has 1 items but `names` has 2" in err
    assert err.count("error[") == 1
    assert "sizes = [1 GiB]" in err            # the offending text is quoted


def test_buffers_unknown_op_lists_ops(write_plan):
    err = _err(write_plan, "use buffers { " + BUF.replace('last = ["bwd", "bwd"]', 'last = ["bwd", "backward"]')
               + " }")
    assert "error[unknown-name]: `last` names op 'backward' that is not in `ops`" in err
    assert "hint: ops: fwd, bwd" in err


def test_buffers_freed_before_allocated(write_plan):
    err = _err(write_plan, "use buffers { " + BUF.replace('first = ["fwd", "fwd"]', 'first = ["fwd", "bwd"]')
               .replace('last = ["bwd", "bwd"]', 'last = ["bwd", "fwd"]') + " }")
    assert "error[out-of-range]: 'y' is freed after op 'fwd', before it is allocated at op 'bwd'" in err


def test_buffers_duplicate_name(write_plan):
    err = _err(write_plan, "use buffers { " + BUF.replace('names = ["x", "y"]', 'names = ["x", "x"]') + " }")
    assert "error[duplicate]: 'x' appears twice" in err


def test_buffers_durations_length(write_plan):
    err = _err(write_plan, "use buffers { " + BUF + "; durations = [1 ms] }")
    assert "error[out-of-range]: `durations` has 1 items but `ops` has 2" in err


def test_usable_memory_above_the_device_is_a_warning_once(tmp_path, run_cli):
    """`usable = 120 GB` on an 80 GB H100 (111.8 GiB > even 80 GiB) is a located warning, once
    for the two plans that share the block's text; 76 GiB on an 80 GB GPU (whose HBM is 80 GiB)
    is how published runs size it, and no warning."""
    body = '''import "@catalog/hardware.plan"
import "@catalog/models.plan"
workload w { tokens = 1e12 token; seq_len = 4096 token; global_batch = 512 seq; deadline = 20 day }
plan a {
  model = qwen3_8b; workload = w; device = DEV; gpus = 64; gpus_per_host = 8; mfu = 40 %
  use memory { weights = "bf16"; grads = "bf16"; master = "fp32"; optimizer = "adam"; usable = USABLE }
  use layout { zero = 3; link = nvlink4; nic = nic_400g; nics_per_host = 8 }
}
plan b extends a { gpus = 128 }
'''
    f = tmp_path / "u.plan"
    f.write_text(body.replace("DEV", "h100_sxm").replace("USABLE", "120 GB"), encoding="utf-8")
    code, _, err = run_cli("check", f)
    assert code == 0 and err.count("warning[suspicious]") == 1, err
    assert "u.plan:6:" in err and "usable memory 111.8 GiB is more than the device has" in err
    f.write_text(body.replace("DEV", "a100_sxm_80gb").replace("USABLE", "76 GiB"), encoding="utf-8")
    code, _, err = run_cli("check", f)
    assert code == 0 and "warning" not in err, err
