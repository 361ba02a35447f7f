"""Evaluation: exact nominal values, Python values, list items, full expressions.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import sympy as sp

from ..engine.deferred import NotReady, deferred
from ..engine.nodes import HUGE, Abort, ListVal, Node, Val, symbol


from ..engine.piecewise import subs_numbers, substitute


def about(v) -> str:
    """``v`` to 3 significant digits for a message, also when it is far beyond float range."""
    try:
        return str(sp.N(v, 3))
    except (ValueError, ArithmeticError, TypeError):
        return "an extreme value"


def clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_HUGE = int(HUGE)


def _beyond_rational(v) -> bool:
    """``abs(v) > HUGE or abs(v) < 1 / HUGE`` for a nonzero sympy Rational ``v`` = p/q (q > 0),
    by integer products (the same truth value, without sympy's comparisons); False for 0."""
    p, q = abs(int(v.p)), int(v.q)
    return p != 0 and (p > _HUGE * q or p * _HUGE < q)


@lru_cache(maxsize=1024)
def _n40(v):
    """``sympy.N(v, 40)`` of a number expression, once per process for equal expressions (sympy's
    equality compares structure and each Float's precision, so equal expressions give the same
    40 digits): plans that extend one another repeat the same non-rational value (a checkpoint
    interval's ``LambertW``, ≈1.5 ms each at 40 digits)."""
    return sp.N(v, 40)


class ValuesMixin:
    """Exact nominal values (sympy rationals) and full expressions of the inputs."""

    # ------------------------------------------------------------ evaluation
    def value(self, nid: str):
        """Exact nominal value (sympy number, base units) of numeric node ``nid``, or None."""
        if nid in self._values:
            return self._values[nid]
        n = self.nodes[nid]
        if n.kind == "field" and n.state != 2:
            self.build(nid)
        d = deferred(n, "expr")         # an exact makespan not built: its own exact evaluator first
        if d is None and n.expr is None:
            self._values[nid] = None
            return None
        if n.kind == "activity":        # durations repeat: one evaluation per distinct expression
            key = ("activity", n.expr)
            if key in self._values:
                v = self._values[nid] = self._values[key]
                return v
        v = None
        if n.input:
            v = n.nominal
        else:
            subs = {}
            for s in (n.expr if d is None else d).free_symbols:
                dv = self.value(s.name) if s.name in self.nodes else None
                if dv is None:
                    self._values[nid] = None
                    return None
                subs[s] = dv
            if d is not None:
                try:
                    v = d.exact(subs)
                except NotReady:
                    return None
        if v is None and not n.input:
            expr = n.expr
            if expr.has(sp.Pow, sp.exp):
                zeros = self._powers_in_range(n, subs)
                if zeros is None:
                    self._values[nid] = None
                    return None
                if zeros:                # powers that underflow: 0 at the nominal values
                    expr = expr.xreplace(zeros)
            try:
                v = subs_numbers(expr, subs)
                if not v.is_Rational:
                    v = _n40(v) if v.is_number else v
            except (ValueError, TypeError, ArithmeticError) as exc:   # min/max of a non-real, decimal overflow
                who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" \
                    else f"'{nid}'"
                self.rep.error("out-of-range", f"{who} cannot be evaluated: "
                               + ("it compares values that are not real numbers" if "comparable" in str(exc)
                                  else "an intermediate value is beyond what a plan can hold"),
                               n.span or self.decls[n.owner].ast.name_span,
                               "a square root or log of a negative or zero value, or an extreme input; "
                               "check the inputs it depends on")
                self._values[nid] = None
                return None
        rational = getattr(v, "is_Rational", False) is True   # most values: the checks below by integers
        if (_beyond_rational(v) if rational else v is not None and v.is_number and v.is_real and v != 0
                and v not in (sp.oo, -sp.oo) and (abs(v) > HUGE or abs(v) < 1 / HUGE)):
            who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" else f"'{nid}'"
            self.rep.error("out-of-range", f"{who} evaluates to about {about(v)}, beyond what a plan can hold "
                           "(magnitudes from 1e-300 to 1e300)", n.span or self.decls[n.owner].ast.name_span,
                           "an input it depends on is extreme; check the exponents and units")
            self._values[nid] = None
            return None
        if rational:
            pass                        # finite and real
        elif v is sp.zoo or v is sp.nan or v in (sp.oo, -sp.oo) or (getattr(v, "is_finite", True) is False):
            span = n.span
            for div, dspan in n.div_checks:
                dv = div.xreplace({s: self.value(s.name) for s in div.free_symbols})
                if dv == 0:
                    span = dspan
                    break
            who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" else f"'{nid}'"
            self.rep.error("division-by-zero", f"division by zero while evaluating {who}",
                           span or self.decls[n.owner].ast.name_span,
                           "an input it depends on is zero: " + ", ".join(sorted(
                               s.name for s in n.expr.free_symbols if self.value(s.name) == 0)))
            v = None
        elif v.is_number and v.is_real is False:
            self.rep.error("out-of-range", f"'{nid}' is not a real number (it evaluates to {v})",
                           n.span or self.decls[n.owner].ast.name_span,
                           "a square root, fractional power or log of a negative value")
            v = None
        self._values[nid] = v
        if n.kind == "activity":
            self._values[("activity", n.expr)] = v
        return v

    def _powers_in_range(self, n: Node, subs: dict) -> dict | None:
        """The powers in ``n``'s expression that underflow at the nominal values, as a mapping
        {power: 0} (empty when none does); None (and an out-of-range error) when one would
        overflow, beyond the exponent limit: ``a ^ a ^ a`` with ``a = 10`` must not be computed
        exactly (10^(10^10) takes hours), nor ``exp(exp(exp(100)))`` handed to mpmath (which
        never finishes); ``exp(x)`` is checked as the power e^x.  A power whose magnitude is below 10^-limit is a
        legitimate 0 — the chance that 10⁹ tokens all miss an expert, (1 − k/E)^T — and is
        taken as 0 instead of being computed exactly (the symbolic expression keeps it)."""
        import math

        from ..syntax import limits as L
        # a power whose exponent is a whole number of at most 16 is skipped below whatever the
        # inputs: when every power is one (x⁻¹ of each division, x², …) there is nothing to check
        stack, pows = [n.expr], False
        while stack:
            e = stack.pop()
            if isinstance(e, sp.exp) or isinstance(e, sp.Pow) and not (e.exp.is_Integer and abs(e.exp) <= 16):
                pows = True
                break
            stack.extend(e.args)
        zeros: dict = {}
        if not pows:
            return zeros
        top = L.current().exponent
        for p in sp.postorder_traversal(n.expr):   # inner powers first
            if isinstance(p, sp.exp):                 # exp(x) is the power e^x
                base, ex = sp.E, p.args[0]
            elif isinstance(p, sp.Pow):
                base, ex = p.base, p.exp
            else:
                continue
            x = (ex.xreplace(zeros) if zeros else ex).xreplace(subs)
            if not x.is_number or (x.is_Integer and abs(x) <= 16):   # bounded exact work
                continue
            b = (base.xreplace(zeros) if zeros else base).xreplace(subs)
            if not b.is_number or b == 0:
                continue
            try:
                lb = (math.log10(math.e) if b is sp.E else float(sp.log(abs(b), 10).evalf(15)) if b.is_Rational
                      else math.log10(abs(complex(b))))
                mag = float(x.evalf(15)) * lb         # log10 of the power's magnitude
            except (OverflowError, ValueError, TypeError, ZeroDivisionError):
                mag = math.inf
            if mag != mag:                            # 0 · inf: no magnitude to judge
                mag = math.inf
            if mag < -top:
                zeros[p] = sp.Integer(0)
            elif abs(mag) > top:
                who = f"quantity '{n.name}' of '{n.owner}' (plugin '{n.plugin}')" if n.kind == "quantity" \
                    else f"'{n.id}'"
                self.rep.error("out-of-range", f"{who} raises a value to a power beyond what a plan can hold "
                               f"(magnitudes from 1e-{top} to 1e{top})", n.span or self.decls[n.owner].ast.name_span,
                               "an input it depends on is extreme; check the exponents")
                return None
        return zeros

    def base_value(self, nid: str):
        """:meth:`value` under the name the evaluated file uses for it (plugins that run both
        while a plan is priced and on the evaluation afterwards call this one)."""
        return self.value(nid)

    def python_value(self, nid: str):
        """Nominal value as Python: float for numbers (base units), else str/bool/DeclRef.

        A parameter with a spec is validated first (choice, whole number and range, kind of
        the declaration referred to), so a plugin never sees a value outside its contract;
        a bad value is reported at its own span and the plugin is stopped (:class:`Abort`).
        """
        n = self.build(nid)
        if n is None or n.state == 3:
            raise Abort()
        if not self.sealed and n.input:   # read as a number while the plan is being built: it shapes it
            self.structural.add(nid)
        if nid in self.param_specs and nid not in self._validated:
            self._validated.add(nid)
            before = len(self.rep.errors)
            self._check_specs(only=nid)
            if len(self.rep.errors) == before and (n.numeric or isinstance(n.value, ListVal)):
                self.check_ranges(only=nid)     # a list's items against the spec's range too
            if len(self.rep.errors) > before:
                self._spec_reported.add(nid)
                raise Abort()
        if nid in self._spec_reported:
            raise Abort()
        if n.numeric:
            v = self.value(nid)
            if v is None:
                raise Abort()
            return float(v)
        if isinstance(n.value, ListVal):
            return self.list_value(nid)
        return n.value

    def file_param(self, nid: str) -> Path:
        """Path named by string field ``nid``, relative to the file the assignment is in."""
        n = self.nodes[nid]
        base = Path(n.assign.span.file).parent if n.assign and n.default is None else Path(self.path).resolve().parent
        if "\0" in str(n.value):   # refused by safeio.check, which reports it
            import os
            return Path(os.path.abspath(base / n.value))
        return (base / n.value).resolve()

    def list_value(self, nid: str) -> tuple:
        """Nominal items of a list field: floats (base units) for numbers, else as written."""
        n = self.build(nid)
        out = []
        for it, isp in zip(n.value.items, n.value.spans or (n.span,) * len(n.value.items)):
            if isinstance(it, Val):
                subs = {s: self.value(s.name) for s in it.expr.free_symbols}
                if any(v is None for v in subs.values()):
                    raise Abort()
                v = it.expr.xreplace(subs)
                if not v.is_number:
                    raise Abort()
                v = v if v.is_Rational else sp.N(v, 30)
                if v.is_real is not True or v in (sp.oo, -sp.oo) or (v != 0 and (abs(v) > HUGE or
                                                                                  abs(v) < 1 / HUGE)):
                    self.rep.error("out-of-range", f"an item of '{nid}' is not a real number a plan can hold "
                                   f"(it evaluates to {clip(str(about(v)))})", isp or n.span,
                                   "a square root or log of a negative value, or an extreme magnitude")
                    raise Abort()
                out.append(float(v))
            else:
                out.append(it)
        return tuple(out)

    def full_expr(self, nid: str, free: frozenset = frozenset(), keep: frozenset | None = None):
        """Expression of ``nid`` in terms of inputs (and of nodes in ``free``, kept as symbols).

        With ``keep`` given, only nodes in ``keep`` are expanded; others stay as their symbols
        (used to show a readable answer in terms of neighbouring quantities).
        """
        key = (nid, free, keep)
        if key in self._full:
            return self._full[key]
        n = self.nodes[nid]
        if nid in free or n.input or n.expr is None or (keep is not None and nid not in keep):
            r = symbol(nid)
        else:
            r = substitute(n.expr, {s: self.full_expr(s.name, free, keep) for s in n.expr.free_symbols})
        self._full[key] = r
        return r

    def nominal_map(self, exclude=()) -> dict:
        return {symbol(nid): n.nominal for nid, n in self.nodes.items() if n.input and nid not in exclude}

    def requirement_results(self, plan: str) -> list[dict]:
        out = []
        for r in self.requirements:
            if r.plan != plan:
                continue
            lv, rv = self.subs_value(r.lhs), self.subs_value(r.rhs)
            if lv is None or rv is None:
                continue
            ok = {"<=": lv <= rv, ">=": lv >= rv, "<": lv < rv, ">": lv > rv, "==": lv == rv}[r.op]
            out.append({"name": r.name, "ok": bool(ok), "lhs_si": float(lv), "rhs_si": float(rv), "op": r.op,
                        "unit": r.unit, "doc": r.doc, "plugin": r.plugin,
                        "expr": f"{_req_text(r.lhs, plan)} {r.op} {_req_text(r.rhs, plan)}",
                        "inputs": self._req_inputs(r, plan)})
            if r.span is not None:
                out[-1]["where"] = f"{r.span.file}:{r.span.line}:{r.span.column}"
        return out

    def _req_inputs(self, r, plan: str) -> dict:
        """{short name: value in its display unit} of the symbols a requirement reads, when a
        side is more than one name (a bare name's value is the side's own value)."""
        from dsl.engine.units import convert
        if all(side.is_Symbol or side.is_Number for side in (r.lhs, r.rhs)):
            return {}
        out = {}
        for s in sorted(r.lhs.free_symbols | r.rhs.free_symbols, key=lambda s: s.name):
            n, v = self.nodes.get(s.name), self.value(s.name)
            if n is None or v is None:
                continue
            out[_short(s.name, plan)] = (float(convert(float(v), n.unit)), n.unit or "")
        return out

    def requirement(self, plan: str, name: str) -> dict | None:
        """One requirement's result (see :meth:`requirement_results`), or None."""
        return next((r for r in self.requirement_results(plan) if r["name"] == name), None)

    def subs_value(self, expr):
        """``expr`` over node symbols at the nominal point, or None when a value is missing."""
        subs = {}
        for s in expr.free_symbols:
            v = self.value(s.name)
            if v is None:
                return None
            subs[s] = v
        return subs_numbers(expr, subs)

    def critical_path(self, plan: str, timeline: str) -> dict | None:
        """Critical path of a timeline at nominal values: activities with start, finish, slack,
        and the symbolic length of the path (``expr``)."""
        tl = self.timelines.get((plan, timeline))
        if tl is None or tl.schedule is None:
            return None
        sc = tl.schedule
        acts = []
        for i, a in enumerate(sc.ids):
            act = tl.activities[a]
            acts.append({"id": a, "start": sc.start[i], "finish": sc.finish[i],
                         "duration": sc.finish[i] - sc.start[i], "slack": sc.slack[i],
                         "resource": act.resource, "plugin": act.plugin, "doc": act.doc, "kind": act.kind})
        pos = {a: i for i, a in enumerate(sc.ids)}
        acts.sort(key=lambda r: (r["start"], pos[r["id"]]))
        return {"timeline": timeline, "makespan": sc.makespan, "path": list(sc.path),
                "activities": acts, "expr": tl.path_expr(sc)}

    def memory_profile(self, plan: str, timeline: str, pool: str):
        """:class:`~dsl.engine.timeline.Profile` of memory ``pool`` on a timeline, or None."""
        tl = self.timelines.get((plan, timeline))
        return None if tl is None else tl.profiles.get(pool)


def _short(name: str, plan: str) -> str:
    """A node id as its plan shows it: the plan's own nodes without the plan prefix."""
    return name[len(plan) + 1:] if name.startswith(plan + ".") else name


def _req_text(expr, plan: str) -> str:
    """A requirement side as text over the plan's names (``heads mod tp``), deterministic."""
    from sympy.printing.str import StrPrinter

    class _P(StrPrinter):
        def _print_Symbol(self, e):
            return _short(e.name, plan)

        def _print_Mod(self, e):
            a, b = e.args
            return f"{self.parenthesize(a, 60)} mod {self.parenthesize(b, 60)}"

    return _P({"order": "lex"}).doprint(expr)
