"""The notebook API::

    import dsl
    ws = dsl.load("specs/cases/cpt-qwen3-8b-4090.plan")
    p = ws["gpus48"]                      # a Plan handle
    p.value("finish_time", "day")         # 24.64…
    p.expr("finish_time")                 # sympy expression of the inputs (base units)
    p.requirements                        # {"meets_deadline": True, …}
    p.sweep(mfu=("30 %", "50 %", 21))     # pandas DataFrame (dict of numpy arrays without pandas)
    p                                     # in Jupyter: the HTML report of this plan
    ws.report("md")                       # the report of every plan of the file as Markdown

Names are relative to the plan (``finish_time``, ``memory.usable``) or fully dotted
(``cpt.deadline``).  Values in ``unit`` (default: the unit ``plan eval`` shows).

``Plan.value`` and ``Results.get`` agree: a float in the requested unit, or with
``exact=True`` the exact sympy number in that unit.  ``Results.value`` takes a dotted
name and answers the same (``r.value("p.y") == r["p"].value("y")``); the engine's accessor,
exact and in base units (s, B, FLOP …), is ``base_value(node_id)``.  A text plan shows how they read:

>>> import dsl
>>> r = dsl.load("toy.plan", text="plan p { x = 2 s; y = x * 3 }; solve need: p.x for p.y == 12 s")
>>> r["p"].value("y"), r.get("p.y"), r.get("p.y", "ms")
(6.0, 6.0, 6000.0)
>>> r["p"].value("y", "min", exact=True)
1/10
>>> r.solves
{'need': 4.0}
>>> r["q"]
Traceback (most recent call last):
...
KeyError: "no plan 'q' (plans: p)"
"""
from __future__ import annotations

from dsl.results.evaluation import Evaluation
from dsl.syntax.diagnostics import Diagnostic, PlanError, did_you_mean


class Plan:
    """One plan of a loaded workspace."""

    def __init__(self, ws, name: str):
        self.ws, self.name = ws, name

    def __repr__(self) -> str:
        return f"<plan {self.name} of {self.ws.path}>"

    def _id(self, name: str) -> str:
        local = f"{self.name}.{name}"
        return self.ws.lookup(local if local in self.ws.nodes else name)

    def value(self, name: str, unit: str | None = None, exact: bool = False):
        """Nominal value of ``name`` in ``unit`` (default: its display unit): a float, or with
        ``exact`` the exact sympy number in that unit.

        :raises PlanError: unknown name (naming the nearest); :class:`dsl.engine.units.UnitError`
            for a unit of another dimension.
        """
        return self.ws.value(self._id(name), unit, exact)

    def expr(self, name: str):
        """The sympy expression of ``name`` in terms of the declared inputs (base units)."""
        return self.ws.full_expr(self._id(name))

    @property
    def requirements(self) -> dict:
        """{requirement name: holds?} at the nominal point."""
        return {r["name"]: r["ok"] for r in self.ws.requirement_results(self.name)}

    def explain(self, name: str) -> str:
        """The derivation tree of ``name`` as text (``plan explain``)."""
        from dsl.present import explain
        return explain.render(explain.tree(self.ws, self._id(name)), self.name)

    def report(self, fmt: str = "html") -> str:
        """This plan's report as ``html``, ``md`` or ``text`` (``plan report``)."""
        from dsl.present import report
        return report.render(report.build(self.ws, [self.name], figures=fmt == "html"), fmt)

    def _repr_html_(self) -> str:
        return self.report("html")

    def sweep(self, random: int | None = None, seed: int = 0, **vary):
        """Evaluate the plan over a grid (or ``random`` samples) of inputs.

        Each keyword is a name with underscores for dots (``checkpoint_interval`` is not
        ambiguous with a plan field named so: a plan field wins) mapped to ``(start, stop, n)``
        with `.plan` value strings (``mfu=("30 %", "50 %", 21)``), or ``None`` for the
        declared range.  Returns a pandas DataFrame when pandas is installed, else a dict of
        numpy arrays.
        """
        from dsl.results import sweep
        varies = []
        for key, spec in vary.items():
            name = key if f"{self.name}.{key}" in self.ws.nodes else key.replace("__", ".")
            nid = self._id(name)
            if spec is None:
                varies.append(sweep.parse_vary(self.ws, nid))
            else:
                start, stop, n = spec
                varies.append(sweep.parse_vary(self.ws, f"{nid}={start}:{stop}:{n}"))
        return sweep.run(self.ws, self.name, varies, random=random, seed=seed).to_frame()


def workspace_report(ws, fmt: str = "html") -> str:
    """The report of every plan of the root file."""
    from dsl.present import report
    return report.render(report.build(ws, ws.plans(own=True), figures=fmt == "html"), fmt)


class Results(Evaluation):
    """An evaluated `.plan` file for notebooks: the read-only :class:`Evaluation` plus plan
    handles (``results["gpus48"]``), reports and HTML display in Jupyter."""

    __slots__ = ()

    def __getitem__(self, plan: str) -> Plan:
        """``results["gpus48"]``: a :class:`Plan` handle.

        :raises KeyError: naming the plans of the file (and the nearest one).
        """
        if plan not in self.plans():
            g = did_you_mean(plan, self.plans())
            raise KeyError(f"no plan '{plan}'" + (f"; did you mean '{g}'?" if g else "")
                           + f" (plans: {', '.join(self.plans())})")
        return Plan(self, plan)

    def get(self, name: str, unit: str | None = None, exact: bool = False):
        """The value of dotted ``name`` (``gpus48.finish_time``, ``cpt.deadline``) in ``unit``
        as :meth:`Plan.value` gives it, or a named solve's answer (``min_mfu``: a float in the
        target's unit or ``unit``).

        :raises PlanError: unknown name (naming the nearest).
        """
        if name in self.solve_names:
            from dsl.engine.units import check_unit_for, convert
            from dsl.results.solver import named_solutions
            sol = named_solutions(self, {name})[name]
            if sol.answer is None:
                raise PlanError([Diagnostic("error", "solve", f"'{name}' has no answer: {sol.note}",
                                            self.solve_names[name].span, "")])
            u = sol.unit if unit is None else unit
            check_unit_for(self.nodes[sol.target].dim, u)
            return float(convert(sol.answer, u))
        return Evaluation.value(self, name, unit, exact)

    value = get

    @property
    def solves(self) -> dict:
        """{named solve: its answer (float in the target's unit, None without an answer)}."""
        from dsl.engine.units import convert
        from dsl.results.solver import named_solutions
        return {n: None if s.answer is None else float(convert(s.answer, s.unit))
                for n, s in named_solutions(self).items()}

    def report(self, fmt: str = "html") -> str:
        """The report of the root file's plans (``plan report``) as html, md or text."""
        return workspace_report(self, fmt)

    def _repr_html_(self) -> str:
        return self.report("html")


def load(path, text: str | None = None, evaluate: bool = True, disable: tuple[str, ...] = (),
         extra: tuple = (), plans=None) -> Results:
    """Load and evaluate a `.plan` file (the notebook API and the CLI's loader).

    :param disable: plugin names not to load (as ``plan --disable-plugin NAME``; the
        ``PLAN_DISABLE_PLUGINS`` environment variable adds more, comma-separated).
    :param extra: plugin objects to register besides the installed ones (tests, notebooks).
    :param plans: price only these plans and the plans they depend on (``extends``, names
        they read), as ``plan eval --plan``; the others are left out of the result.
    :raises PlanError: with every diagnostic when the file has errors.  When every error is
        confined to one declaration (a model whose config cannot be read), the rest of the file
        is still evaluated and ``PlanError.partial`` holds that evaluation (else it is absent).
    """
    from dsl.evaluate.workspace import Workspace
    from dsl.plugin.manager import get_plugins
    from dsl.syntax.diagnostics import PlanError
    plugins = get_plugins(blocked=disabled_plugins(disable), extra=tuple(extra))
    try:
        return Results(Workspace(path, text=text, plugins=plugins, evaluate=evaluate, only=plans))
    except PlanError as e:
        ws = getattr(e, "workspace", None)
        if ws is not None:
            # errors confined to one declaration (a bad config): the rest of the file evaluated
            e.partial = Results(ws)
        raise


def disabled_plugins(names=()) -> tuple[str, ...]:
    """``names`` plus those in ``PLAN_DISABLE_PLUGINS`` (comma-separated), sorted, unique."""
    import os
    env = [n.strip() for n in os.environ.get("PLAN_DISABLE_PLUGINS", "").split(",") if n.strip()]
    return tuple(sorted(set(names) | set(env)))
