"""`plan launch`: a plan's serving deployment as vLLM and SGLang command lines.  Every flag is
checked against the plan's own evaluated quantities (read here with dsl.load), never against a
pasted output; the errors say what to do, exit 2 (command line) or 1 (the plan), no traceback."""
from __future__ import annotations

import json
import os
import re
import shlex

import pytest

import dsl
from conftest import CASE, REPO_ROOT, run_cli

AZURE = "specs/cases/serving-slo-azure.plan"
ENGINE_CASE = "specs/cases/serving-engine-qwen3-8b.plan"
AZURE_PLANS = ("qwen3_8b_azure", "qwen3_30b_a3b_azure", "qwen3_8b_azure_x8")
HEAD = 'import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\nimport "@catalog/engines.plan"\n'

# a search whose chosen configuration is disaggregated: one H100 alone misses the TPOT target
# (long prompts stall its decodes), one prefill engine beside two decode engines meets both
DISAGG = HEAD + """
plan pd {
  model = qwen3_8b
  use serving_search {
    engine = ENGINE; max_model_len = 16384 token
    rate = 3 request/s; requests = 300; input = 8000 token; output = 200 token
    devices = [h100_sxm]; links = [nvlink4]
    tp = [1]; replicas = [1]
    max_num_seqs = [128 seq]; max_num_batched_tokens = [8192 token]
    prefill_replicas = [1]; decode_replicas = [2]; kv_link = nic_400g
    slo_ttft = 3 s; slo_tpot = 20 ms
  }
}
"""

ENGINE_PLAN = HEAD + """
plan served {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = ENGINE; tp = 2; replicas = 3; link = nvlink4; kv = "KV"
               max_model_len = 16384 token; max_num_seqs = 200 seq; max_num_batched_tokens = 4096 token }
}
"""


def launch(*args):
    return run_cli("launch", *args)


def flags(argv: list[str]) -> dict:
    """{flag: value} of an argument list (a flag without a value maps to True)."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = True
        i += 1
    return out


def shell_words(text: str) -> list[list[str]]:
    """The commands of the text form, each as a shell would split it (comments dropped)."""
    cmds = [c for c in text.replace("\\\n", " ").splitlines() if c.strip() and not c.lstrip().startswith("#")]
    return [shlex.split(c) for c in cmds]


def _load(path: str):
    old = os.getcwd()
    os.chdir(REPO_ROOT)                # the path as the CLI below names it: one cached evaluation
    try:
        return dsl.load(path)
    finally:
        os.chdir(old)


@pytest.fixture(scope="module")
def azure():
    return _load(AZURE)


def _json(*args) -> tuple[list, str]:
    rc, out, err = launch(*args, "--format", "json")
    assert rc == 0, err
    return json.loads(out), err


# ---------------------------------------------------------------- the worked search case
@pytest.mark.xdist_group("serving-slo-azure")
def test_a_file_of_several_deployments_needs_plan():
    rc, out, err = launch(AZURE, "--engine", "vllm")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert "error[launch]" in err and "3 plans with a serving deployment" in err and "--plan" in err
    for p in AZURE_PLANS:
        assert p in err


@pytest.mark.xdist_group("serving-slo-azure")
@pytest.mark.parametrize("plan", AZURE_PLANS)
def test_the_chosen_configuration_is_what_the_plan_evaluated(azure, plan):
    cmds, err = _json(AZURE, "--plan", plan, "--engine", "vllm")
    q = lambda name, unit="": int(azure.value(f"{plan}.{name}", unit, exact=True))   # noqa: E731
    assert not azure.has(f"{plan}.search_prefill_replicas")          # the worked case chooses aggregated
    assert [c["role"] for c in cmds] == ["serve"] and cmds[0]["replicas"] == q("search_replicas")
    argv = cmds[0]["argv"]
    assert argv[:3] == ["vllm", "serve", "<hf-model-id>"] and "warning[launch-model]" in err
    f = flags(argv)
    assert int(f["--tensor-parallel-size"]) == q("search_tp")
    assert int(f["--pipeline-parallel-size"]) == q("search_pp")
    assert int(f["--max-num-seqs"]) == q("search_max_num_seqs", "seq")
    assert int(f["--max-num-batched-tokens"]) == q("search_max_num_batched_tokens", "token")
    assert int(f["--max-model-len"]) == q("serving_search.max_model_len", "token")
    preset = azure.python_value(f"{plan}.serving_search.engine").name
    assert float(f["--gpu-memory-utilization"]) == azure.value(f"{preset}.gpu_memory_utilization")
    assert int(f["--block-size"]) == int(azure.value(f"{preset}.block_size", "token"))
    assert ("--enable-chunked-prefill" in f) == bool(azure.python_value(f"{preset}.enable_chunked_prefill"))
    assert "--kv-transfer-config" not in f and "--data-parallel-size" not in f


@pytest.mark.xdist_group("serving-slo-azure")
def test_text_is_the_json_as_a_shell_script_and_deterministic(azure):
    args = (AZURE, "--plan", "qwen3_8b_azure_x8", "--engine", "vllm", "--model", "Qwen/Qwen3-8B")
    rc1, text, err = launch(*args)
    rc2, again, _ = launch(*args)
    assert rc1 == rc2 == 0 and text == again and err == ""          # byte-identical; --model: no warning
    cmds, _ = _json(*args)
    assert shell_words(text) == [c["argv"] for c in cmds]
    replicas = int(azure.value("qwen3_8b_azure_x8.search_replicas", exact=True))
    assert replicas > 1 and "once per replica" in text and f"{replicas} replicas" in text
    assert cmds[0]["argv"][2] == "Qwen/Qwen3-8B"
    assert launch(*args, "--format", "json")[1] == launch(*args, "--format", "json")[1]


@pytest.mark.xdist_group("serving-slo-azure")
def test_another_engine_than_the_plan_prices_is_refused(azure):
    rc, out, err = launch(AZURE, "--plan", "qwen3_8b_azure", "--engine", "sglang")
    line = azure.nodes["qwen3_8b_azure.serving_search.engine"].span.line
    assert rc == 2 and out == "" and "Traceback" not in err
    assert re.search(rf"serving-slo-azure\.plan:{line}:\d+: error\[launch\]: plan 'qwen3_8b_azure' prices engine "
                     r"'vllm' \(vLLM\), not SGLang", err), err
    assert "hint: pass --engine vllm" in err


# ---------------------------------------------------------------- disaggregated choices
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_disaggregated_choice_prints_prefill_and_decode(tmp_path, engine):
    f = tmp_path / "pd.plan"
    f.write_text(DISAGG.replace("ENGINE", engine), encoding="utf-8")
    ev = dsl.load(f)
    n = lambda name: int(ev.value(f"pd.{name}", exact=True))   # noqa: E731
    assert ev.has("pd.search_prefill_replicas"), "the example no longer chooses a disaggregated configuration"
    assert n("search_prefill_replicas") + n("search_decode_replicas") == n("search_replicas")
    cmds, _ = _json(f, "--engine", engine, "--model", "Qwen/Qwen3-8B")
    assert [(c["role"], c["replicas"]) for c in cmds] == [("prefill", n("search_prefill_replicas")),
                                                          ("decode", n("search_decode_replicas"))]
    for c in cmds:
        fl = flags(c["argv"])
        if engine == "vllm":
            kv = json.loads(fl["--kv-transfer-config"])
            assert kv == {"kv_connector": "NixlConnector",
                          "kv_role": "kv_producer" if c["role"] == "prefill" else "kv_consumer"}
            assert int(fl["--tensor-parallel-size"]) == n("search_tp")
            assert int(fl["--max-num-batched-tokens"]) == int(ev.value("pd.search_max_num_batched_tokens", "token"))
        else:
            assert c["argv"][:5] == ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B"]
            assert fl["--disaggregation-mode"] == c["role"]
            assert int(fl["--tp-size"]) == n("search_tp") and int(fl["--pp-size"]) == n("search_pp")
            assert int(fl["--max-running-requests"]) == int(ev.value("pd.search_max_num_seqs", "seq"))
            assert int(fl["--chunked-prefill-size"]) == int(ev.value("pd.search_max_num_batched_tokens", "token"))
            assert float(fl["--mem-fraction-static"]) == ev.value("sglang.gpu_memory_utilization")
            assert int(fl["--page-size"]) == int(ev.value("sglang.block_size", "token"))
    rc, text, _ = launch(f, "--engine", engine, "--model", "Qwen/Qwen3-8B")
    assert rc == 0 and shell_words(text) == [c["argv"] for c in cmds]
    assert "# prefill: 1 prefill engine" in text and "# decode: 2 decode engines" in text


def test_a_search_launches_sglang_with_the_fraction_of_the_chosen_tp(tmp_path):
    """SGLang 0.3 – 0.4 lowers mem_fraction_static to 0.87 from tp 2 on: the search sized the
    chosen tp-2 engine with 0.87, and that is what the command line states."""
    f = tmp_path / "sg.plan"
    f.write_text(HEAD + """
plan sg {
  model = qwen3_8b
  use serving_search {
    engine = sglang; max_model_len = 4096 token
    rate = 2 request/s; requests = 50; input = 512 token; output = 32 token
    devices = [h100_sxm]; links = [nvlink4]; tp = [2]; replicas = [1]
    max_num_seqs = [64 seq]; max_num_batched_tokens = [4096 token]
    slo_ttft = 5 s; slo_tpot = 200 ms; simulate = 1
  }
}
""", encoding="utf-8")
    cmds, _ = _json(f, "--engine", "sglang", "--model", "Qwen/Qwen3-8B")
    fl = flags(cmds[0]["argv"])
    assert int(fl["--tp-size"]) == 2 and float(fl["--mem-fraction-static"]) == 0.87


# ---------------------------------------------------------------- `use engine`
@pytest.mark.parametrize("engine,kv,dtype", [("vllm", "fp8", "fp8"), ("sglang", "fp8", "fp8_e4m3"),
                                             ("vllm", "bf16", None)])
def test_use_engine_states_its_deployment(tmp_path, engine, kv, dtype):
    f = tmp_path / "served.plan"
    f.write_text(ENGINE_PLAN.replace("ENGINE", engine).replace("KV", kv), encoding="utf-8")
    ev = dsl.load(f)
    q = lambda name, unit="": int(ev.value(f"served.{name}", unit, exact=True))   # noqa: E731
    cmds, err = _json(f, "--engine", engine)              # the only deployment: no --plan needed
    assert "warning[launch-model]" in err
    assert len(cmds) == 1 and cmds[0]["role"] == "serve" and cmds[0]["replicas"] == q("engine.replicas") == 3
    fl = flags(cmds[0]["argv"])
    names = {"vllm": ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--max-model-len",
                      "--block-size", "--gpu-memory-utilization"),
             "sglang": ("--tp-size", "--pp-size", "--max-running-requests", "--context-length", "--page-size",
                        "--mem-fraction-static")}[engine]
    tp, pp, seqs, length, block, util = names
    assert int(fl[tp]) == q("serving_tp") == 2 and int(fl[pp]) == q("serving_pp")
    assert int(fl[seqs]) == q("max_num_seqs", "seq") and int(fl[length]) == q("max_model_len", "token")
    assert int(fl[block]) == q("block_size", "token")
    # the fraction the plan sized the cache with: vLLM's 0.9; SGLang's 0.87 at tp 2 (0.88 at tp 1)
    assert float(fl[util]) == ev.value("served.gpu_memory_utilization") == {"vllm": 0.9, "sglang": 0.87}[engine]
    budget = "--max-num-batched-tokens" if engine == "vllm" else "--chunked-prefill-size"
    assert int(fl[budget]) == q("max_num_batched_tokens", "token")
    assert fl.get("--kv-cache-dtype") == dtype


def test_a_kv_format_the_engine_cannot_store_is_a_warning(tmp_path):
    f = tmp_path / "served.plan"
    f.write_text(ENGINE_PLAN.replace("ENGINE", "vllm").replace("KV", "int8"), encoding="utf-8")
    rc, out, err = launch(f, "--engine", "vllm", "--model", "m")
    assert rc == 0 and "warning[launch-kv]" in err and 'kv = "int8"' in err and "--kv-cache-dtype" not in out


@pytest.mark.xdist_group("serving-engine-qwen3-8b")
def test_an_engine_that_would_not_start_is_a_warning():
    rc, out, err = launch(ENGINE_CASE, "--plan", "on_4090", "--engine", "vllm", "--model", "Qwen/Qwen3-8B")
    assert rc == 0 and "vllm serve Qwen/Qwen3-8B" in out
    assert "warning[launch-fit]" in err and "holds_max_model_len" in err


@pytest.mark.xdist_group("serving-engine-qwen3-8b")
def test_a_file_of_engine_plans_lists_them():
    rc, out, err = launch(ENGINE_CASE, "--engine", "sglang")
    assert rc == 2 and "8 plans with a serving deployment" in err and "h100_sglang" in err


# ---------------------------------------------------------------- errors
def test_a_file_without_a_deployment(tmp_path):
    rc, out, err = launch(CASE, "--engine", "vllm")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert "error[launch]: no plan in" in err and "nothing to launch" in err and "hint: add `use engine" in err


def test_a_plan_without_a_deployment_is_located():
    rc, out, err = launch(CASE, "--engine", "vllm", "--plan", "gpus48")
    assert rc == 2 and re.search(r"cpt-qwen3-8b-4090\.plan:\d+:\d+: error\[launch\]: plan 'gpus48' states no "
                                 "serving deployment", err), err


def test_an_unknown_plan_and_a_bad_engine():
    rc, _, err = launch(CASE, "--engine", "vllm", "--plan", "gpus4")
    assert rc == 2 and "error[unknown-name]" in err and "gpus48" in err
    rc, _, err = launch(CASE, "--engine", "trtllm")
    assert rc == 2 and "invalid choice: 'trtllm'" in err and "Traceback" not in err


def test_a_preset_of_another_engine_is_refused(tmp_path):
    f = tmp_path / "trt.plan"
    f.write_text(ENGINE_PLAN.replace("ENGINE", "trtllm").replace("KV", "bf16"), encoding="utf-8")
    rc, out, err = launch(f, "--engine", "vllm")
    assert rc == 2 and re.search(r"trt\.plan:\d+:\d+: error\[launch\]: plan 'served' prices engine 'trtllm', which "
                                 "is not a vLLM or SGLang preset", err), err


def test_a_preset_extending_vllm_launches_as_vllm(tmp_path):
    f = tmp_path / "mine.plan"
    f.write_text(ENGINE_PLAN.replace("ENGINE", "mine").replace("KV", "bf16")
                 + "engine mine extends vllm_v0 { gpu_memory_utilization = 0.85 }\n", encoding="utf-8")
    cmds, _ = _json(f, "--engine", "vllm", "--model", "m")
    fl = flags(cmds[0]["argv"])
    assert fl["--gpu-memory-utilization"] == "0.85"
    assert "--enable-chunked-prefill" not in fl           # vllm_v0: chunked prefill off, as the plan prices it


def test_a_search_that_chose_nothing_exits_1(tmp_path):
    f = tmp_path / "unmet.plan"
    f.write_text(DISAGG.replace("ENGINE", "vllm").replace("slo_ttft = 3 s", "slo_ttft = 1 ms")
                 .replace("requests = 300", "requests = 40"), encoding="utf-8")
    rc, out, err = launch(f, "--engine", "vllm", "--format", "json")
    assert rc == 1 and "Traceback" not in err
    assert re.search(r"unmet\.plan:\d+:\d+: error\[launch\]: the serving search of plan 'pd' chose no configuration",
                     err), err
    assert json.loads(out)["diagnostics"][0]["code"] == "launch"


def test_help_says_what_it_does():
    rc, out, _ = launch("--help")
    assert rc == 0
    for word in ("--engine {vllm,sglang}", "--plan NAME", "--model ID", "--format {text,json}", "use serving_search",
                 "use engine", "training launches are not written"):
        assert word in " ".join(out.split()), word


# ---------------------------------------------------------------- the docs
def test_the_docs_example_is_what_plan_launch_prints(tmp_path):
    doc = (REPO_ROOT / "docs" / "plugins" / "launch.md").read_text(encoding="utf-8")
    plan = re.search(r"```plan\n(.*?)```", doc, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", doc, re.S).group(1)
    cmd = re.search(r"`plan launch chat\.plan ([^`]*)`", doc).group(1).split()
    f = tmp_path / "chat.plan"
    f.write_text(plan, encoding="utf-8")
    rc, out, err = launch(f, *cmd)
    assert rc == 0 and err == "" and out == shown


# ---------------------------------------------------------------- speculative decoding, prefix caching
SPEC_CASE = "specs/cases/serving-search-speculative.plan"

# a search over speculation with a separate draft (Qwen3-8B's vocabulary), chosen at k = 2: the
# only k listed but 0, and TPOT ≤ 4 ms is out of plain decoding's reach (5.9 ms on one H100)
DRAFT_SEARCH = HEAD + """
model small_draft extends qwen3_8b { layers = 2 }
plan sd {
  model = qwen3_8b
  use serving_search {
    engine = ENGINE; max_model_len = 4096 token; rate = 0.1 request/s; requests = 4
    input = 256 token; output = 129 token
    devices = [h100_sxm]; tp = [1]; replicas = [1]; max_num_seqs = [64 seq]; max_num_batched_tokens = [2048 token]
    speculative = "draft"; draft_model = small_draft; spec_tokens = [0, 2]; acceptance = 80 %
    enable_prefix_caching = CACHE
    slo_ttft = 1 s; slo_tpot = 4 ms
  }
}
"""


def test_the_chosen_speculation_is_launched():
    ev = _load(SPEC_CASE)
    k = int(ev.value("spec.search_spec_tokens", exact=True))
    assert k == 3
    cmds, _ = _json(SPEC_CASE, "--plan", "spec", "--engine", "vllm", "--model", "Qwen/Qwen3-8B")
    f = flags(cmds[0]["argv"])
    assert json.loads(f["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": k}
    assert "--enable-prefix-caching" not in f and "--no-enable-prefix-caching" not in f     # not written
    cmds, _ = _json(SPEC_CASE, "--plan", "cached", "--engine", "vllm", "--model", "Qwen/Qwen3-8B")
    f = flags(cmds[0]["argv"])
    assert "--enable-prefix-caching" in f and "--speculative-config" not in f
    rc, text, _ = launch(SPEC_CASE, "--plan", "spec", "--engine", "vllm", "--model", "Qwen/Qwen3-8B")
    assert rc == 0 and "speculative decoding: 3 tokens drafted per step" in text


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_separate_draft_and_prefix_caching_off(tmp_path, engine):
    f = tmp_path / "sd.plan"
    f.write_text(DRAFT_SEARCH.replace("ENGINE", engine).replace("CACHE", "false"), encoding="utf-8")
    ev = dsl.load(f)
    k = int(ev.value("sd.search_spec_tokens", exact=True))
    assert k == 2, "the example no longer chooses speculation"
    cmds, err = _json(f, "--engine", engine, "--model", "Qwen/Qwen3-8B")
    assert "warning[launch-model]" in err and "small_draft" in err and "<hf-draft-model-id>" in err
    fl = flags(cmds[0]["argv"])
    if engine == "vllm":
        assert json.loads(fl["--speculative-config"]) == {"method": "draft_model", "model": "<hf-draft-model-id>",
                                                          "num_speculative_tokens": k}
        assert "--no-enable-prefix-caching" in fl
    else:
        assert fl["--speculative-algorithm"] == "STANDALONE"
        assert fl["--speculative-draft-model-path"] == "<hf-draft-model-id>"
        assert int(fl["--speculative-num-steps"]) == k and fl["--speculative-eagle-topk"] == "1"
        assert int(fl["--speculative-num-draft-tokens"]) == k + 1
        assert "--disable-radix-cache" in fl
    cmds, err = _json(f, "--engine", engine, "--model", "Qwen/Qwen3-8B", "--draft-model", "Qwen/Qwen3-0.6B")
    fl = flags(cmds[0]["argv"])
    assert err == "" and (json.loads(fl["--speculative-config"])["model"] if engine == "vllm"
                          else fl["--speculative-draft-model-path"]) == "Qwen/Qwen3-0.6B"
    rc, text, _ = launch(f, "--engine", engine, "--model", "Qwen/Qwen3-8B")
    assert rc == 0 and shell_words(text) == [c["argv"] for c in _json(f, "--engine", engine, "--model",
                                                                       "Qwen/Qwen3-8B")[0]]


def test_use_engine_with_speculative_batching(tmp_path):
    f = tmp_path / "eb.plan"
    f.write_text(HEAD + """
model mtp_head extends qwen3_8b { layers = 1 }
plan eb {
  model = qwen3_8b; device = h100_sxm
  use engine { engine = sglang; max_model_len = 4096 token; max_num_seqs = 64 seq; max_num_batched_tokens = 2048 token
               mixed_batches = true }
  use batching { rate = 1 request/s; requests = 10; input = 128 token; output = 16 token
                 speculative = "mtp"; draft_model = mtp_head; spec_tokens = 2 }
}
""", encoding="utf-8")
    cmds, _ = _json(f, "--engine", "sglang", "--model", "Qwen/Qwen3-8B")
    fl = flags(cmds[0]["argv"])
    assert fl["--speculative-algorithm"] == "EAGLE" and "--speculative-draft-model-path" not in fl
    assert fl["--speculative-num-steps"] == "2" and fl["--speculative-num-draft-tokens"] == "3"
    assert "--disable-radix-cache" not in fl                   # prefix caching not written: the default
    assert "--enable-mixed-chunk" in fl                        # mixed_batches = true, as the plan prices it
