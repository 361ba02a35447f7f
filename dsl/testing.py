"""Helpers for testing a plugin: a fresh plugin manager and the evaluation of a snippet.

Use them from a plugin's own test-suite (pytest or not)::

    from dsl.testing import evaluate_snippet, fresh_plugins

    import my_plugin

    def test_power_cost(tmp_path):
        ev = evaluate_snippet('''
            import "@catalog/hardware.plan"
            import "@catalog/models.plan"
            workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 }
            plan p { model = qwen3_8b; workload = w; device = h100_sxm; gpus = 8; mfu = 40 %
                     use compute {}
                     use power { watts = 700 W } }
        ''', plugins=[my_plugin], directory=tmp_path)
        assert ev.base_value("p.energy") > 0

``fresh_plugins`` builds a new :class:`~dsl.plugin.manager.Plugins` facade every call (no cache
shared with other tests), with the installed plugins, ``plugins`` added and ``disable``
blocked; a pytest fixture is one line: ``fixture = pytest.fixture(fresh_plugins)``.
"""
from __future__ import annotations

import textwrap
from pathlib import Path


def fresh_plugins(plugins=(), disable=()):
    """A new plugin facade: every installed plugin (minus ``disable``) plus ``plugins``.

    :param plugins: plugin objects (modules, classes, instances) to register.
    :param disable: plugin names not to load.
    :return: :class:`dsl.plugin.manager.Plugins` (``.blocks``, ``.vocabulary``, ``.conflicts`` …).
    """
    from dsl.plugin.manager import Plugins
    return Plugins(tuple(disable), tuple(plugins))


def evaluate_snippet(text: str, plugins=(), disable=(), directory=None, name: str = "snippet.plan",
                     evaluate: bool = True):
    """Evaluate `.plan` text with extra plugins and return the read-only evaluation.

    :param text: the file's text (dedented first, so it can be an indented triple-quoted string).
    :param plugins: plugin objects to register besides the installed ones.
    :param disable: plugin names not to load.
    :param directory: where the file is written (relative imports resolve from there); default
        a temporary directory that is removed afterwards.
    :param evaluate: False only checks (``plan check``).
    :return: :class:`dsl.results.evaluation.Evaluation`.
    :raises PlanError: with the diagnostics, when the snippet has errors.
    """
    import tempfile

    from dsl.evaluate.workspace import Workspace
    from dsl.results.evaluation import Evaluation

    src = textwrap.dedent(text).lstrip("\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(directory or tmp) / name
        path.write_text(src, encoding="utf-8")
        return Evaluation(Workspace(path, plugins=fresh_plugins(plugins, disable), evaluate=evaluate))
