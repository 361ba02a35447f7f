"""Third-party plugins: installed like any Python package, found through the ``plan.plugins``
entry-point group, usable as ``use NAME { … }`` in a `.plan` file.

The tiny package in ``tests/external_plugin`` (``plan_ext_demo``, entry point ``demo``) is
installed into a temporary directory with ``pip install --target`` and put on ``PYTHONPATH``
of a CLI subprocess, so ``importlib.metadata`` finds its entry point next to the built-in ones.
Where pip cannot build it offline (setuptools older than 70.1 without ``wheel``), the test
lays the package out the way the wheel would: the package directory plus a ``.dist-info``
with ``METADATA`` and ``entry_points.txt`` taken from its ``pyproject.toml``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = Path(__file__).resolve().parent / "external_plugin"
BUILTIN_BLOCKS = ("compute", "memory", "zero", "checkpoint", "finish")

PLAN = """\
import "@catalog/hardware.plan"
import "@catalog/models.plan"

workload cpt {
  tokens       = 100e9 token
  seq_len      = 8192 token
  global_batch = 384 seq
  deadline     = 30 day
  reserved     = 5 day
}

plan p {
  model = qwen3_8b;  workload = cpt;  device = rtx4090
  gpus = 48;  gpus_per_host = 8
  mfu = 40 %
  use memory { usable = 22 GiB; transient = 10 GiB }
  use compute {}
  use zero { stage = 3; link = pcie4_x16 }
  use finish {}
  use demo { gpu_hour = 2.5 USD/h }
}
"""


# ---------------------------------------------------------------- helpers
def _env(pythonpath: list[Path]) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    paths = [str(p) for p in pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run(*args: str, pythonpath: list[Path] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsl.cli", *args], cwd=ROOT, env=_env(pythonpath),
                          capture_output=True, text=True, timeout=180)


# several commands in one new interpreter: the entry points are found as for `run`, and each
# command goes through dsl.cli.main with its own output and exit code (the interpreter's start-up,
# ≈0.6 s of imports and the plugin scan, is paid once); `run` keeps the real `python -m dsl.cli`
RUN_MANY = """
import contextlib, io, json, sys
from dsl.cli import main
done = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
    done.append([rc, out.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps(done))
"""


def run_many(*commands: tuple, pythonpath: list[Path] = ()) -> list[subprocess.CompletedProcess]:
    """``plan ARGS`` for each of ``commands``, one after the other in one new interpreter with
    ``pythonpath`` (as :func:`run`); one CompletedProcess per command."""
    argv = [[str(a) for a in c] for c in commands]
    p = subprocess.run([sys.executable, "-c", RUN_MANY, json.dumps(argv)], cwd=ROOT, env=_env(pythonpath),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    return [subprocess.CompletedProcess(["plan", *a], rc, out, err)
            for a, (rc, out, err) in zip(argv, json.loads(p.stdout))]


def _pip_can_build() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs ``wheel``."""
    try:
        from importlib.metadata import version
        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except Exception:
        return False
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _lay_out_like_a_wheel(src: Path, target: Path) -> None:
    """Install a pure-Python project into ``target`` as its wheel would (no build tools)."""
    meta = tomllib.loads((src / "pyproject.toml").read_text(encoding="utf-8"))
    project = meta["project"]
    for pkg in meta["tool"]["setuptools"]["packages"]:
        shutil.copytree(src / pkg, target / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    dist = target / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    write_dist_info(dist, project["name"], project["version"], project.get("entry-points", {}))


def write_dist_info(dist: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]) -> None:
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items()) + "\n"
                  for group, items in entry_points.items())
    (dist / "entry_points.txt").write_text(eps, encoding="utf-8")
    (dist / "RECORD").write_text("", encoding="utf-8")


@pytest.fixture(scope="module")
def demo_site(tmp_path_factory) -> Path:
    """A directory holding the installed ``plan-ext-demo`` distribution."""
    target = tmp_path_factory.mktemp("site")
    if _pip_can_build():
        build = tmp_path_factory.mktemp("src") / "external_plugin"
        shutil.copytree(PKG, build, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                            "--no-index", "--quiet", "--target", str(target), str(build)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        _lay_out_like_a_wheel(PKG, target)
    assert any(target.glob("plan_ext_demo-*.dist-info/entry_points.txt")), list(target.iterdir())
    assert (target / "plan_ext_demo" / "plugin.py").is_file()
    return target


@pytest.fixture(scope="module")
def demo_plan(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("plans") / "demo.plan"
    p.write_text(PLAN, encoding="utf-8")
    return p


def number(r: subprocess.CompletedProcess) -> float:
    """The bare number a `plan get` printed."""
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return float(r.stdout.strip())


# ---------------------------------------------------------------- built-in plugins
def test_plugins_lists_builtin_blocks():
    r = run("plugins")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    for b in BUILTIN_BLOCKS:
        assert re.search(rf"^use {b} \{{", r.stdout, re.M), (b, r.stdout)
    assert "use demo" not in r.stdout  # not installed in this environment


def test_plugins_json_lists_builtin_blocks():
    r = run("plugins", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    names = {b["name"] for b in data["blocks"]}
    assert set(BUILTIN_BLOCKS) <= names
    assert {"compute", "memory", "zero", "checkpoint", "finish"} <= set(data["plugins"])


# ---------------------------------------------------------------- the external plugin
def test_without_the_plugin_use_demo_is_unknown(demo_plan):
    r = run("eval", str(demo_plan))
    assert r.returncode == 1
    assert "error[unknown-plugin]" in r.stderr and "use demo" in r.stderr
    assert "Traceback" not in r.stderr


def test_external_plugin_is_listed(demo_site):
    r = run("plugins", pythonpath=[demo_site])
    assert r.returncode == 0, r.stderr
    assert re.search(r"^use demo \{.*\[plugin demo\]", r.stdout, re.M), r.stdout
    assert "gpu_hour" in r.stdout
    for b in BUILTIN_BLOCKS:
        assert f"use {b} {{" in r.stdout
    assert "demo" in r.stdout.splitlines()[0]  # "plugins: checkpoint, compute, decoder, demo, …"


def test_external_plugin_prices_a_plan(demo_site, demo_plan):
    r, *gets = run_many(("eval", demo_plan), ("get", demo_plan, "p.gpu_cost"),
                        ("get", demo_plan, "p.finish_time", "--in", "h"), ("get", demo_plan, "p.gpus"),
                        ("get", demo_plan, "p.gpu_hours", "--in", "h"), ("get", demo_plan, "p.demo.gpu_hour"),
                        pythonpath=[demo_site])
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"^gpu_cost\b", r.stdout, re.M), r.stdout
    assert re.search(r"^gpu_hours\s+h\b", r.stdout, re.M), r.stdout

    cost, finish_h, gpus, gpu_hours, gpu_hour = map(number, gets)
    assert gpus == 48
    assert cost == pytest.approx(48 * finish_h * 2.5, rel=1e-12)
    assert gpu_hours == pytest.approx(48 * finish_h, rel=1e-12)
    assert gpu_hour == 2.5


LAYOUT_PLAN = PLAN.replace("""  use compute {}
  use zero { stage = 3; link = pcie4_x16 }
  use finish {}
""", """  micro_batch = 1 seq
  use layout { zero = 3; activations = "transient"; link = pcie4_x16; nic = nic_200g; nics_per_host = 8 }
""")


def test_external_plugin_prices_a_layout_plan(demo_site, tmp_path):
    """The same third-party block on a layout plan: it reads the standard finish_time, which
    `use layout` publishes, so no change to the plugin is needed."""
    assert "use layout" in LAYOUT_PLAN and "use finish" not in LAYOUT_PLAN
    p = tmp_path / "layout.plan"
    p.write_text(LAYOUT_PLAN, encoding="utf-8")
    r, *gets = run_many(("eval", p), ("get", p, "p.finish_time", "--in", "h"), ("get", p, "p.finish_time", "--in", "h"),
                        ("get", p, "p.gpu_cost"), pythonpath=[demo_site])
    assert r.returncode == 0, r.stderr
    finish_h, again, cost = map(number, gets)
    assert finish_h == pytest.approx(again, rel=1e-12)
    assert cost == pytest.approx(48 * finish_h * 2.5, rel=1e-12)


def test_external_plugin_on_a_layout_plan_without_deadline_or_tokens(demo_site, tmp_path):
    """The finish time needs tokens to train on, not a deadline: without a deadline the block
    still prices; without tokens it is told why `use layout` has no finish time (not to add
    `use compute`, a block that lists it too), at the plan, exit 1."""
    no_deadline = tmp_path / "no_deadline.plan"
    no_deadline.write_text(LAYOUT_PLAN.replace("  deadline     = 30 day\n", ""), encoding="utf-8")
    text = LAYOUT_PLAN.replace("  tokens       = 100e9 token\n", "")
    no_tokens = tmp_path / "no_tokens.plan"
    no_tokens.write_text(text, encoding="utf-8")
    r, finish, cost, bad = run_many(("eval", no_deadline), ("get", no_deadline, "p.finish_time", "--in", "h"),
                                    ("get", no_deadline, "p.gpu_cost"), ("eval", no_tokens), pythonpath=[demo_site])
    assert r.returncode == 0, r.stderr
    assert number(cost) == pytest.approx(48 * number(finish) * 2.5, rel=1e-12)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    line = text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith("plan p"))) + 1
    assert f"{no_tokens}:{line}:6: error[missing-quantity]: `use demo` in plan 'p' needs 'finish_time', which " \
           "`use layout` does not define for this plan" in bad.stderr, bad.stderr
    assert "hint: `use layout` defines 'finish_time' only when the plan's workload has `tokens`" in bad.stderr
    assert "use compute" not in bad.stderr


def test_external_plugin_parameters_are_checked(demo_site, tmp_path):
    text = PLAN.replace("use demo { gpu_hour = 2.5 USD/h }", "use demo { gpu_hours = 2.5 USD/h }")
    p = tmp_path / "t.plan"
    p.write_text(text, encoding="utf-8")
    r = run("eval", str(p), pythonpath=[demo_site])
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert re.search(rf"^{re.escape(str(p))}:\d+:\d+: error\[unknown-name\]: `use demo` has no parameter 'gpu_hours'",
                     r.stderr, re.M), r.stderr
    assert "did you mean 'gpu_hour'?" in r.stderr

    p.write_text(PLAN.replace("use demo { gpu_hour = 2.5 USD/h }", "use demo {}"), encoding="utf-8")
    r = run("eval", str(p), pythonpath=[demo_site])
    assert r.returncode == 1
    assert "error[missing-parameter]" in r.stderr and "gpu_hour" in r.stderr

    p.write_text(PLAN.replace("gpu_hour = 2.5 USD/h", "gpu_hour = -1 USD/h"), encoding="utf-8")
    r = run("eval", str(p), pythonpath=[demo_site])
    assert r.returncode == 1
    assert "error[out-of-range]" in r.stderr and "gpu_hour" in r.stderr


def test_external_plugin_can_be_solved_for(demo_site, demo_plan):
    r = run("solve", str(demo_plan), "--query", "p.gpus for p.gpu_cost == 100000 USD", pythonpath=[demo_site])
    assert r.returncode == 0, r.stderr
    assert "p.gpus =" in r.stdout


# ---------------------------------------------------------------- broken plugins
def test_plugin_that_fails_to_import_is_a_warning(demo_site, demo_plan, tmp_path):
    broken = tmp_path / "broken_site"
    broken.mkdir()
    (broken / "plan_ext_broken.py").write_text('raise RuntimeError("boom: missing dependency")\n', encoding="utf-8")
    write_dist_info(broken / "plan_ext_broken-0.1.dist-info", "plan-ext-broken", "0.1",
                    {"plan.plugins": {"broken": "plan_ext_broken", "ghost": "plan_ext_no_such_module"}})

    r = run("plugins", pythonpath=[broken])
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"warning: plugin 'broken' \(plan_ext_broken\) failed to load: boom", r.stderr), r.stderr
    assert "warning: plugin 'ghost'" in r.stderr
    for b in BUILTIN_BLOCKS:
        assert f"use {b} {{" in r.stdout

    # a plan still evaluates, with the warnings; the working external plugin still loads
    r = run("eval", str(demo_plan), pythonpath=[broken, demo_site])
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "warning[plugin]" in r.stderr and "'broken'" in r.stderr
    assert re.search(r"^gpu_cost\b", r.stdout, re.M)


def test_plugin_hook_that_raises_is_reported_not_a_crash(tmp_path, demo_plan):
    site = tmp_path / "site"
    site.mkdir()
    (site / "plan_ext_crash.py").write_text(
        "from dsl.plugin import Param, UseSpec, hookimpl\n\n"
        "@hookimpl\ndef plan_blocks_register():\n"
        "    return [UseSpec('demo', 'crashes while pricing', params=(Param('gpu_hour'),))]\n\n"
        "@hookimpl\ndef plan_quantities_price(ctx):\n"
        "    if ctx.block('demo') is not None:\n        raise ZeroDivisionError('oops')\n",
        encoding="utf-8")
    write_dist_info(site / "plan_ext_crash-0.1.dist-info", "plan-ext-crash", "0.1",
                    {"plan.plugins": {"crash": "plan_ext_crash"}})
    r = run("eval", str(demo_plan), pythonpath=[site])
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert re.search(r":\d+:\d+: error\[plugin\]: plugin 'crash' failed while pricing 'p': ZeroDivisionError: oops",
                     r.stderr), r.stderr
    assert "hint:" in r.stderr
