"""plan — a declarative modelling language for LLM training and inference systems.

Public API::

    import dsl
    ev = dsl.load("specs/cases/cpt-qwen3-8b-4090.plan")   # a read-only evaluation
    ev["gpus48"].value("finish_time", "day")            # 24.64…
    ev.value("gpus48.finish_time")                      # the same float (unit=, exact=True)
    ev.base_value(ev.lookup("gpus48.finish_time"))      # the engine's: exact, base units (s)

Imports are lazy so that ``import dsl`` and ``plan --help`` stay fast.
"""
from __future__ import annotations

__version__ = "0.1.0"


def load(path, **kw):
    """Load and evaluate a `.plan` file; see :func:`dsl.api.load`."""
    from dsl.api import load as _load
    return _load(path, **kw)
