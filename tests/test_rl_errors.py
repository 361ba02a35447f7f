"""Errors of the RL blocks: each names the offending text (file:line:col) with a hint, exits 1,
and shows no traceback."""
from __future__ import annotations

import pytest

from conftest import run_cli

DEV = "device d { memory = 80 GB }\n"


def _colocate(**over):
    p = {"buffers": '["t", "w", "kv"]', "sizes": "[40 GiB, 15 GiB, 24 GiB]", "resident": '["t"]',
         "steps": '["load w", "allocate kv", "free t"]'}
    p.update(over)
    body = "; ".join(f"{k} = {v}" for k, v in p.items())
    return DEV + "plan p {\n  device = d\n  use rl_colocate { " + body + " }\n}\n"


CASES = [
    # colocated switch
    ("sizes-count", _colocate(sizes="[40 GiB, 15 GiB]"), "out-of-range", "`sizes` has 2 items but `buffers` names 3"),
    ("dup-buffer", _colocate(buffers='["t", "t", "kv"]'), "duplicate", "buffer 't' is named twice"),
    ("bad-verb", _colocate(steps='["copy w", "free t"]'), "out-of-range", "is not VERB BUFFER"),
    ("unknown-buffer", _colocate(steps='["load x"]'), "unknown-name", "unknown buffer 'x'"),
    ("unknown-resident", _colocate(resident='["q"]'), "unknown-name", "unknown buffer 'q' in `resident`"),
    ("free-not-live", _colocate(steps='["free kv"]'), "out-of-range", "frees 'kv', which is not live"),
    ("already-live", _colocate(steps='["load t"]'), "out-of-range", "'t' is already live"),
    ("dup-step", _colocate(steps='["load w", "free w", "load w"]'), "duplicate", "appears twice"),
    ("bad-constraint", _colocate(constraints='["load w after free t"]'), "out-of-range",
     'is not "STEP before STEP"'),
    ("unknown-step", _colocate(constraints='["load kv before free t"]'), "out-of-range", "'load kv' is not a step"),
    ("constraint-cycle", _colocate(constraints='["load w before free t", "free t before load w"]'), "out-of-range",
     "admit no order"),
    ("too-many-steps", DEV + "plan p { device = d\n use rl_colocate { buffers = ["
     + ", ".join(f'"b{i}"' for i in range(13)) + "]; sizes = [" + ", ".join("1 GiB" for _ in range(13))
     + "]; steps = [" + ", ".join(f'"load b{i}"' for i in range(13)) + "] } }\n", "out-of-range", "at most 12"),
    # loss normalisation, resume, weight sync, budget, loop
    ("norm-lengths", "plan p { use rl_loss_norm { answer_tokens = [2, 3]; token_grads = [0.2] } }\n",
     "out-of-range", "`token_grads` has 1 items but `answer_tokens` 2"),
    ("norm-empty-answer", "plan p { use rl_loss_norm { answer_tokens = [0, 3]; token_grads = [0.2, 0.1] } }\n",
     "out-of-range", "at least one loss token"),
    ("survival-half", 'import "@catalog/models.plan"\nplan p { model = qwen3_8b\n use rl_resume { tokens = 8 token; '
     "interrupt_rate = 1 / 1 h } }\n", "missing-parameter", "needs both `interrupt_rate` and `trajectory_time`"),
    ("sync-no-size", "plan p { use rl_weight_sync { instances = 4 } }\n", "missing-parameter",
     "needs the size of the weights"),
    ("sync-fanout", "plan p { use rl_weight_sync { instances = 4; weights = 1 GB; fanout = \"multicast\" } }\n",
     "out-of-range", "unicast"),
    ("budget-no-cycle", 'import "@catalog/hardware.plan"\nplan p { device = h100_sxm; mfu = 40 %\n'
     " use rl_budget { gpu_hours = 10 h } }\n", "missing-quantity", "needs `use rl_cycle`"),
    ("loop-one-iteration", "plan p { use rl_loop { gen_time = 1 s; train_time = 1 s; iterations = 1 } }\n",
     "out-of-range", "iterations"),
    ("logprob-positive", "plan p { use rl_ratio { policy_logprob = 0.5; behaviour_logprob = -1 } }\n",
     "out-of-range", "policy_logprob"),
    ("keep-above-one", "plan p { use rl_stages { gen_rate = 1 sample/s; verify_rate = 1 sample/s; "
     "train_rate = 1 sample/s; keep = 120 % } }\n", "out-of-range", "keep"),
]


@pytest.mark.parametrize("name,text,code,msg", CASES, ids=[c[0] for c in CASES])
def test_error(write_plan, name, text, code, msg):
    f = write_plan(text)
    rc, out, err = run_cli("eval", f)
    assert rc == 1, (out, err)
    assert f"error[{code}]" in err, err
    assert msg in err, err
    assert "Traceback" not in err
    assert f"{f.name}:" in err and "hint:" in err


def test_error_points_at_the_parameter(write_plan):
    f = write_plan(_colocate(steps='["free kv"]'))
    _, _, err = run_cli("eval", f)
    # line 4 holds the use block; the caret sits under the `steps` list
    loc = err.split("error[")[0].strip().rsplit(":", 3)
    assert loc[-3] == "4"
    line = [ln for ln in err.splitlines() if "^" in ln][0]
    src = [ln for ln in err.splitlines() if "steps =" in ln][0]
    assert src[line.index("^"):].startswith('["free kv"]')
