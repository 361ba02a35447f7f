"""The plugin contract as a third party meets it: hooks called through pluggy (tryfirst,
trylast, old- and new-style wrappers, firstresult), blocking plugins by name, the standard
vocabulary with units, attribution and isolation of each implementation, the read-only
evaluation, per-manager unit tables, and the public helpers of ``dsl.testing``."""
from __future__ import annotations

import types

import pytest

from conftest import run_cli
from dsl.plugin import Param, QuantitySpec, UseSpec, hookimpl
from dsl.syntax.diagnostics import PlanError
from dsl.testing import evaluate_snippet, fresh_plugins

HEAD = 'import "@catalog/hardware.plan"\nimport "@catalog/models.plan"\n'
PLAIN = "plan p {\n  x = 2 s\n}\n"


def make_plugin(name: str, **hooks):
    """A plugin module named ``name`` with the given hook implementations."""
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, fn)
    return mod


def _recorder(events: list, label: str, **opts):
    @hookimpl(**opts)
    def plan_quantities_price(ctx):
        events.append(label)
    return plan_quantities_price


# ---------------------------------------------------------------- ordering and wrappers
def test_tryfirst_and_trylast_order_the_implementations():
    events: list[str] = []
    first = make_plugin("aaa_last", plan_quantities_price=_recorder(events, "last", trylast=True))
    last = make_plugin("zzz_first", plan_quantities_price=_recorder(events, "first", tryfirst=True))
    plain = make_plugin("mmm_plain", plan_quantities_price=_recorder(events, "plain"))
    evaluate_snippet(PLAIN, plugins=[first, last, plain])
    assert events == ["first", "plain", "last"]


def test_plain_implementations_run_in_plugin_name_order():
    events: list[str] = []
    a = make_plugin("ext_a", plan_quantities_price=_recorder(events, "a"))
    b = make_plugin("ext_b", plan_quantities_price=_recorder(events, "b"))
    evaluate_snippet(PLAIN, plugins=[b, a])
    assert events == ["a", "b"]


def test_old_style_hookwrapper_wraps_every_implementation():
    events: list[str] = []

    @hookimpl(hookwrapper=True)
    def plan_quantities_price(ctx):
        events.append("before")
        outcome = yield
        outcome.get_result()
        events.append("after")

    w = make_plugin("ext_wrapper", plan_quantities_price=plan_quantities_price)
    inner = make_plugin("ext_inner", plan_quantities_price=_recorder(events, "inner"))
    evaluate_snippet(PLAIN, plugins=[w, inner])
    assert events[0] == "before" and events[-1] == "after" and "inner" in events


def test_new_style_wrapper_sees_the_results():
    seen: list = []

    @hookimpl(wrapper=True)
    def plan_blocks_register():
        result = yield
        seen.append(sorted(s.name for specs in result for s in specs))
        return result

    evaluate_snippet(PLAIN, plugins=[make_plugin("ext_new_wrapper", plan_blocks_register=plan_blocks_register)])
    assert seen and "memory" in seen[0] and "layout" in seen[0]


def test_firstresult_config_import_takes_the_first_answer(tmp_path):
    (tmp_path / "cfg.json").write_text('{"kind_of_thing": "tiny"}', encoding="utf-8")
    calls: list[str] = []

    @hookimpl(tryfirst=True)
    def plan_config_import(kind, config, path):
        calls.append("mine")
        if config.get("kind_of_thing") == "tiny":
            return {"layers": ("2", ""), "hidden": ("64", ""), "ffn": ("256", ""), "heads": ("4", ""),
                    "vocab": ("100", "")}
        return None

    ev = evaluate_snippet('model m from "cfg.json"\n', directory=tmp_path,
                          plugins=[make_plugin("ext_config", plan_config_import=plan_config_import)])
    assert calls == ["mine"]
    assert float(ev.base_value("m.layers")) == 2 and float(ev.base_value("m.hidden")) == 64


# ---------------------------------------------------------------- blocking
def test_disable_plugin_flag_and_environment(tmp_path):
    plan = tmp_path / "t.plan"
    plan.write_text(HEAD + 'plan p {\n  gpus = 1024\n  use checkpoint { interval = 1800 s; write_bw = 7 GB/s; '
                    'device_mtbf = 8000 h; size = 100 GB }\n}\n', encoding="utf-8")
    code, out, err = run_cli("eval", plan)
    assert code == 0, err
    code, out, err = run_cli("--disable-plugin", "checkpoint", "eval", plan)
    assert code == 1 and "error[unknown-plugin]" in err and "`use checkpoint`" in err, err
    code, out, _ = run_cli("--disable-plugin", "checkpoint", "plugins")
    assert code == 0 and "use checkpoint {" not in out and "use memory {" in out

    import os
    import subprocess
    import sys
    env = dict(os.environ, PLAN_DISABLE_PLUGINS="checkpoint,rollbacks")
    r = subprocess.run([sys.executable, "-m", "dsl.cli", "eval", str(plan)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 1 and "`use checkpoint`" in r.stderr


def test_disabled_plugin_is_not_loaded_by_the_api():
    pl = fresh_plugins(disable=["checkpoint"])
    assert "checkpoint" not in pl.names and "checkpoint" not in pl.blocks and "memory" in pl.blocks


# ---------------------------------------------------------------- vocabulary
def test_vocabulary_declares_plan_parameters_and_step_quantities_once():
    pl = fresh_plugins()
    v = pl.vocabulary
    assert v["gpus"].role == "parameter" and v["gpus"].unit == ""
    assert v["step_time"].unit == "s" and v["step_time"].plugin == "vocabulary"
    assert v["memory_per_gpu"].unit == "GiB"
    slot = pl.slots["training_step"]
    assert slot.timeline == "step" and set(slot.anchors) == {"input_wait", "compute"}
    assert pl.slot_of_timeline("step") is slot
    assert {"model", "device", "link", "storage", "workload"} <= set(pl.kinds)


def test_a_plan_parameter_in_another_unit_is_an_error_naming_both_plugins():
    spec = UseSpec("bad_gpus", "reads gpus as seconds", plan_params=(Param("gpus", "s"),))

    @hookimpl
    def plan_blocks_register():
        return [spec]

    pl = fresh_plugins([make_plugin("ext_bad_gpus", plan_blocks_register=plan_blocks_register)])
    msg = [c for c in pl.conflicts if "'gpus'" in c]
    assert msg and "ext_bad_gpus" in msg[0] and "vocabulary" in msg[0], pl.conflicts
    with pytest.raises(PlanError) as e:
        evaluate_snippet(PLAIN, plugins=[make_plugin("ext_bad_gpus", plan_blocks_register=plan_blocks_register)])
    assert any("ext_bad_gpus" in d.summary and "vocabulary" in d.summary for d in e.value.diagnostics)


def test_a_standard_quantity_in_another_unit_is_an_error_naming_both_plugins():
    @hookimpl
    def plan_quantities_price(ctx):
        ctx.define("step_time", 5, "GB", "not a time")

    with pytest.raises(PlanError) as e:
        evaluate_snippet(PLAIN, plugins=[make_plugin("ext_step_gb", plan_quantities_price=plan_quantities_price)])
    d = [d for d in e.value.diagnostics if "step_time" in d.summary]
    assert d and "ext_step_gb" in d[0].summary and "'vocabulary'" in d[0].summary


def test_vocabulary_redeclared_with_another_unit_is_a_conflict():
    @hookimpl
    def plan_vocabulary_register():
        return [QuantitySpec("step_time", "GiB", "a clash")]

    pl = fresh_plugins([make_plugin("ext_vocab", plan_vocabulary_register=plan_vocabulary_register)])
    assert any("step_time" in c and "ext_vocab" in c and "vocabulary" in c for c in pl.conflicts), pl.conflicts


# ---------------------------------------------------------------- attribution and isolation
def test_quantities_are_attributed_to_their_plugin():
    @hookimpl
    def plan_quantities_price(ctx):
        ctx.define("double_x", 2 * ctx.q("x", "s"), "s", "twice x", references=("a hand computation",))

    ev = evaluate_snippet(PLAIN, plugins=[make_plugin("ext_double", plan_quantities_price=plan_quantities_price)])
    n = ev.nodes["p.double_x"]
    assert n.plugin == "ext_double" and n.references == ("a hand computation",)
    assert ev.base_value("p.double_x") == 4


def test_a_failing_plugin_is_reported_and_the_others_still_run():
    @hookimpl
    def plan_quantities_price(ctx):
        raise RuntimeError("boom")

    @hookimpl
    def other(ctx):
        ctx.define("y", 3, "s")

    bad = make_plugin("ext_boom", plan_quantities_price=plan_quantities_price)
    good = make_plugin("ext_good", plan_quantities_price=other)
    good.plan_quantities_price = other
    with pytest.raises(PlanError) as e:
        evaluate_snippet(PLAIN, plugins=[bad, good])
    msgs = [d.summary for d in e.value.diagnostics]
    assert any("plugin 'ext_boom' failed while pricing 'p'" in m and "boom" in m for m in msgs), msgs


# ---------------------------------------------------------------- the evaluation is read-only
def test_evaluation_is_read_only():
    ev = evaluate_snippet(PLAIN)
    with pytest.raises(AttributeError):
        ev.nodes["p.x"].doc = "changed"
    with pytest.raises(TypeError):
        ev.nodes["p.y"] = None
    with pytest.raises(AttributeError):
        ev.path = "elsewhere"
    with pytest.raises(AttributeError):
        ev.decls["p"].fields = {}


def test_timelines_are_sealed_after_evaluation(case_ws):
    tl = case_ws.timeline("gpus48", "step")
    assert tl is not None and tl.sealed
    with pytest.raises(AttributeError):
        tl.add("late", 1)


# ---------------------------------------------------------------- units
def test_currency_energy_and_power_are_core_units():
    ev = evaluate_snippet("plan p {\n  price = 3 kUSD\n  energy = 2 kWh\n  power = 700 W\n"
                          "  run = energy / power\n  year_s = 1 year\n}\n", disable=["interruptions"])
    assert float(ev.base_value("p.price")) == 3000                      # base unit USD
    assert float(ev.base_value("p.energy")) == 2 * 3_600_000            # J
    assert float(ev.base_value("p.run")) == pytest.approx(2 * 3_600_000 / 700)   # s
    assert float(ev.base_value("p.year_s")) == 365.25 * 86400
    with pytest.raises(PlanError) as e:
        evaluate_snippet("plan p {\n  a = 1 USD + 1 EUR\n}\n")
    assert any(d.code == "unit-mismatch" for d in e.value.diagnostics)


def test_plugin_units_belong_to_their_manager():
    @hookimpl
    def plan_units_register():
        return [("widget", 1, "widget")]

    with_unit = fresh_plugins([make_plugin("ext_widget", plan_units_register=plan_units_register)])
    without = fresh_plugins()
    assert "widget" in with_unit.units.units and "widget" not in without.units.units
    ev = evaluate_snippet("plan p {\n  n = 3 widget\n}\n",
                          plugins=[make_plugin("ext_widget", plan_units_register=plan_units_register)])
    assert float(ev.base_value("p.n")) == 3
    with pytest.raises(PlanError):
        evaluate_snippet("plan p {\n  n = 3 widget\n}\n")


# ---------------------------------------------------------------- plugin commands
def test_plugin_commands_are_listed_and_run():
    code, out, _ = run_cli("--help")
    assert code == 0 and "search" in out
    code, out, _ = run_cli("search", "--help")
    assert code == 0 and "plugin 'layout'" in out


# ---------------------------------------------------------------- a broken third-party plugin
def test_broken_plugins_are_warnings_not_crashes():
    @hookimpl
    def plan_blocks_register():
        raise RuntimeError("register kaboom")

    def _bad_signature():
        @hookimpl
        def plan_blocks_register(ctx):       # the spec has no argument 'ctx'
            return []
        return make_plugin("ext_bad_signature", plan_blocks_register=plan_blocks_register)

    @hookimpl
    def bad_records():
        return [UseSpec("strs", "plan_params given as strings", plan_params=("gpus",)), "not a record"]

    def _misspelt():
        @hookimpl
        def plan_blocks_registr():
            return []
        return make_plugin("ext_misspelt", plan_blocks_registr=plan_blocks_registr)

    plugins = [make_plugin("ext_raises", plan_blocks_register=plan_blocks_register), _bad_signature(),
               make_plugin("ext_bad_records", plan_blocks_register=bad_records), _misspelt()]
    pl = fresh_plugins(plugins)
    text = "\n".join(pl.warnings)
    assert "plugin 'ext_raises'" in text and "register kaboom" in text
    assert "plugin 'ext_bad_signature' cannot be registered" in text
    assert "plugin 'ext_bad_records'" in text and "where a Param was expected" in text
    assert "a str where UseSpec was expected" in text
    assert "plugin 'ext_misspelt' is not loaded" in text
    assert "strs" not in pl.blocks and "memory" in pl.blocks       # the others still work
    ev = evaluate_snippet(PLAIN, plugins=plugins)
    assert float(ev.base_value("p.x")) == 2
    assert any(d.code == "plugin" and "ext_raises" in d.summary for d in ev.warnings)


def test_disabling_an_unknown_plugin_is_a_warning():
    pl = fresh_plugins(disable=["nosuch"])
    assert any("--disable-plugin nosuch: no plugin of that name" in w for w in pl.warnings)


def test_an_installed_plugin_can_also_be_passed_to_the_helpers():
    import plugins.reliability.checkpoint as installed
    pl = fresh_plugins([installed])
    assert "checkpoint" in pl.names and not pl.conflicts


def test_the_cheaper_module_scan_finds_what_pluggy_finds():
    """``dsl.plugin.manager._manager_class`` skips names of a module plugin that pluggy's own
    ``parse_hookimpl_opts`` could not accept; on every name of every standard plugin module
    (and a module with a marked staticmethod, a bound method and a marked non-function) both
    give the same answer."""
    import types
    from importlib.metadata import entry_points

    import pluggy

    from dsl.plugin.manager import ENTRY_POINT_GROUP, _manager_class

    ours, ref = _manager_class()("plan"), pluggy.PluginManager("plan")
    mods = [ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)]
    odd = types.ModuleType("odd")
    impl = pluggy.HookimplMarker("plan")

    class K:
        def m(self):
            return 1

    @impl
    def plan_units_register():
        return []

    odd.plan_units_register = plan_units_register
    odd.s = staticmethod(impl(lambda: []))
    odd.bound = K().m
    odd.marked_object = types.SimpleNamespace(plan_impl={})
    odd.plain = lambda: None
    found = 0
    for m in mods + [odd]:
        for name in dir(m):
            a, b = ours.parse_hookimpl_opts(m, name), ref.parse_hookimpl_opts(m, name)
            assert a == b, (m.__name__, name)
            found += a is not None
    assert found > 100          # the standard plugins' hook implementations were seen
