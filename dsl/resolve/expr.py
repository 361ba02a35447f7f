"""Expression building: AST expressions to sympy expressions with dimensions, field by field.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from ..syntax import ast as A
from ..syntax.diagnostics import Diagnostic, Span, did_you_mean
from ..engine.units import DIMENSIONLESS, Dim, UnitError, default_unit_for, describe_dim, parse_unit
from ..engine.nodes import BlockRef, Cycle, DeclRef, Fail, ListVal, Node, Val, rational, symbol


_NUMBER_RE = None


def is_number(s: str) -> bool:
    """True when ``s`` is written like a number of the language (checked by pattern: turning a
    hostile ``"1e999999999"`` into a Fraction would take hours)."""
    global _NUMBER_RE
    if _NUMBER_RE is None:
        import re
        _NUMBER_RE = re.compile(r"[+-]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
    return _NUMBER_RE.fullmatch(s.strip()) is not None


def clip(text: str, n: int = 40) -> str:
    """``text`` cut to ``n`` characters for a message (a hostile literal can be megabytes)."""
    return text if len(text) <= n else text[: n - 1] + "…"


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in JSON text (strings skipped), without recursion."""
    import re
    depth = top = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', text):
        c = m.group()
        if c in "[{":
            depth += 1
            top = max(top, depth)
        elif c in "]}":
            depth -= 1
    return top



def display_unit(e, dim: Dim) -> str:
    """The unit a user wrote for a value (first literal unit of the same dimension)."""
    stack = [e]
    while stack:
        x = stack.pop(0)
        if isinstance(x, A.Number) and x.unit:
            try:
                if parse_unit(x.unit).dim == dim:
                    return x.unit
            except UnitError:
                pass
        elif isinstance(x, A.BinOp):
            stack += [x.left, x.right]
        elif isinstance(x, A.Neg):
            stack.append(x.operand)
        elif isinstance(x, A.Call):
            stack += list(x.args)
    return default_unit_for(dim)



class ExprMixin:
    """Builds fields: AST expressions to sympy with units, checked as they are built."""

    # ------------------------------------------------------------ expectations
    def expect(self, nid: str, dim: Dim, who: str, span: Span | None) -> None:
        self.expectations.append((nid, dim, who, span))

    # ------------------------------------------------------------ building fields
    def build(self, nid: str) -> Node | None:
        """Build the local expression of field ``nid`` (memoized; cycles are reported)."""
        node = self.nodes.get(nid)
        if node is None:
            return None
        if node.state == 2 or node.state == 3:
            return node
        if node.state == 1:
            i = self._stack.index(nid)
            cyc = self._stack[i:] + [nid]
            related = tuple((f"'{c}' is defined here", self.nodes[c].span) for c in cyc[1:-1] if self.nodes[c].span)
            self.rep.error("cycle", "cyclic definition: " + " -> ".join(cyc), node.span,
                           "break the cycle by giving one of these a value that does not depend on the others",
                           related=related)
            raise Cycle()
        node.state = 1
        if len(self._stack) >= self._chain_limit:
            from ..syntax import limits as L
            self.rep.error("limit", f"'{nid}' is defined from a chain of more than {self._chain_limit} fields, "
                           "each defined from the next", node.span, L.raise_hint("chain"))
            node.state = 3
            raise Fail()
        self._stack.append(nid)
        start = len(self.rep.items)
        try:
            from .uncertain import build_distribution, is_distribution
            if is_distribution(node.assign.value):
                v = build_distribution(self, node.assign.value, node)
            else:
                v = self._eval(node.assign.value, node.scope, node)
        except Fail:
            if node.default is not None:
                self._relocate_default_errors(node, start)
            node.state = 3
            self._stack.pop()
            return node
        except Cycle:
            node.state = 3
            self._stack.pop()
            if self._stack:
                raise
            return node
        except Fail:
            node.state = 3
            self._stack.pop()
            return node
        self._stack.pop()
        if isinstance(v, Val):
            node.expr, node.dim = v.expr, v.dim
            free = v.expr.free_symbols
            node.input = not free
            if node.input:
                node.nominal = self.overrides.get(nid, v.expr)
            node.unit = display_unit(node.assign.value, v.dim)
        else:
            node.value = v
        node.source = node.assign.source if node.default is None else None
        node.state = 2     # built: a range that names the field itself reads it as a formula, not a cycle
        if node.assign.range is not None and node.default is None:
            self._declared_range(node, v)
        return node

    def _declared_range(self, node: Node, v) -> None:
        """Check and store `in [lo, hi]` of an input: constant bounds of the value's dimension,
        lo <= nominal <= hi."""
        a = node.assign
        if not isinstance(v, Val) or not node.input:
            self.rep.error("range", f"'{node.id}' is not an input number, so it cannot have a range",
                           a.range_span, "a range belongs to a literal value (`mfu = 40 % in [30 %, 50 %]`); "
                           "a derived value's range follows from its inputs'")
            return
        bounds = []
        for e in a.range:
            try:
                b = self._num(self._eval(e, node.scope, None), e)
            except (Fail, Cycle):
                return
            if b.expr.free_symbols:
                self.rep.error("range", "the bounds of a range must be numbers, not formulas of other values",
                               e.span, "write both bounds as literals with units")
                return
            if b.dim != v.dim:
                self.rep.error("unit-mismatch", f"the range of '{node.id}' is in {describe_dim(b.dim)} but its "
                               f"value is {describe_dim(v.dim)}", e.span, "give the bounds the value's unit")
                return
            bounds.append(b.expr)
        lo, hi = bounds
        if bool(lo > hi):
            self.rep.error("range", f"the range of '{node.id}' is empty (lower bound above the upper one)",
                           a.range_span, "write `in [low, high]`")
            return
        if bool(v.expr < lo) or bool(v.expr > hi):
            self.rep.error("out-of-range", f"the value of '{node.id}' lies outside its declared range",
                           a.value.span, "a range brackets the nominal value: widen it or fix the value")
            return
        node.range = (lo, hi)

    def wanted_block(self, plugin: str) -> str:
        """The block name a plugin registered (for messages), or the plugin's own name."""
        spec = self.plugins.block_of(plugin)
        return spec.name if spec else plugin

    def _provider_hint(self, name: str, plan: str) -> str | None:
        """"'x' is priced by `use B`" when a block that plan does not use provides ``name``; when a
        block the plan uses lists ``name`` but its settings leave it undefined (``tp_comm`` at
        tp = 1), says so instead of pointing at another block."""
        uses = self.decls[plan].uses
        for spec in sorted(self.plugins.blocks.values(), key=lambda s: s.name):
            if name in spec.provides and spec.name in uses:
                when = dict(spec.provides_when).get(name)
                if when:
                    return f"`use {spec.name}` defines '{name}' only when {when}, which plan '{plan}' does not meet"
                return (f"`use {spec.name}` defines '{name}' only for some of its settings, and those of "
                        f"plan '{plan}' leave it undefined (`plan eval` lists the quantities it has)")
        for spec in sorted(self.plugins.blocks.values(), key=lambda s: s.name):
            if name in spec.provides and spec.name not in self.decls[plan].uses:
                return f"'{name}' is priced by `use {spec.name}`, which plan '{plan}' does not use"
        return None

    def _relocate_default_errors(self, node: Node, start: int) -> None:
        """Errors inside a plugin's default expression point at the plan (or its block)
        that relies on the default, since the default's own text is not in any file."""
        owner = self.decls[node.owner]
        block = node.scope[1] if node.scope else None
        span = owner.use_spans.get(block, owner.ast.name_span) if block else owner.ast.name_span
        where = f"`use {block}` parameter" if block else "plan parameter"
        for i in range(start, len(self.rep.items)):
            d = self.rep.items[i]
            if d.span is not None and d.span.file.startswith("<default"):
                self.rep.replace(i, Diagnostic(d.severity, d.code,
                                               f"{d.summary} (in the default `{node.default}` of {where} "
                                               f"'{node.name}')", span,
                                               d.hint or f"set `{node.name} = …` explicitly", d.related))

    def _eval(self, e, scope, node: Node | None):
        if isinstance(e, A.Number):
            from ..syntax import limits as L
            text = e.text.replace("_", "").strip()
            mant, _, exp = text.lower().partition("e")
            digits = len(mant.split(".")[0].lstrip("+-").lstrip("0"))
            top = L.current().exponent
            if len(exp.lstrip("+-").lstrip("0")) > 12 or len(mant) > 4000 or \
                    (int(exp) if exp else 0) + digits - 1 > top or (int(exp) if exp else 0) < -top:
                self._fail("out-of-range", f"the number '{clip(e.text)}' is outside the range a plan can hold "
                           f"(magnitudes from 1e-{top} to 1e{top})", e.span, "use another unit or check the exponent")
            try:
                val = Fraction(text)
            except (ValueError, ZeroDivisionError):
                self._fail("syntax", f"bad number '{e.text}'", e.span)
            dim = DIMENSIONLESS
            if e.unit:
                try:
                    u = parse_unit(e.unit)
                except UnitError as ue:
                    usp = Span(e.span.file, e.span.end_line, e.span.end_column - len(e.unit), e.span.end_line,
                               e.span.end_column)
                    self._fail("unknown-unit", str(ue), usp, ue.hint)
                val *= u.scale
                dim = u.dim
            return Val(rational(val), dim)
        if isinstance(e, A.String):
            return e.value
        if isinstance(e, A.List):
            items = []
            for it in e.items:
                v = self._eval(it, scope, node)
                if isinstance(v, ListVal):
                    self._fail("type", "a list cannot contain a list", it.span, "flatten it: [a, b, c]")
                items.append(v)
            return ListVal(tuple(items), tuple(it.span for it in e.items))
        if isinstance(e, A.Bool):
            return e.value
        if isinstance(e, A.Ref):
            if scope is None and len(e.parts) == 1 and e.parts[0] in getattr(self, "_answer_vals", {}) \
                    and e.parts[0] not in self.decls:
                return self._answer_vals[e.parts[0]]      # a named solve's answer (file-level `require`)
            t = self._resolve(e.parts, scope, e.span)
            if isinstance(t, DeclRef):
                return t
            if isinstance(t, BlockRef):
                self._fail("type", f"'{e.dotted}' is a `use` block, not a value", e.span, "refer to one of its parameters")
            n = self.build(t)
            if n is None or n.state == 3:
                raise Fail()
            self.used.add(t)
            if n.kind == "quantity" or n.numeric:
                return Val(symbol(t), n.dim)
            return n.value
        if isinstance(e, A.Neg):
            v = self._num(self._eval(e.operand, scope, node), e.operand)
            return Val(-v.expr, v.dim)
        if isinstance(e, A.BinOp):
            a = self._num(self._eval(e.left, scope, node), e.left)
            b = self._num(self._eval(e.right, scope, node), e.right)
            if e.op in "+-":
                if a.dim != b.dim:
                    self._fail("unit-mismatch", f"cannot {'add' if e.op == '+' else 'subtract'} "
                               f"{describe_dim(a.dim)} and {describe_dim(b.dim)}", e.span,
                               f"both sides of '{e.op}' need the same dimension: left is {describe_dim(a.dim)}, "
                               f"right is {describe_dim(b.dim)}")
                return Val(a.expr + b.expr if e.op == "+" else a.expr - b.expr, a.dim)
            if e.op == "*":
                return Val(a.expr * b.expr, a.dim * b.dim)
            if e.op == "/":
                if b.expr == 0:
                    self._fail("division-by-zero", "division by zero", e.right.span,
                               "the divisor is zero")
                if node is not None:
                    node.div_checks.append((b.expr, e.right.span))
                return Val(a.expr / b.expr, a.dim / b.dim)
            if e.op == "^":
                if not b.dim.dimensionless:
                    self._fail("unit-mismatch", f"an exponent must be dimensionless, not {describe_dim(b.dim)}",
                               e.right.span)
                if a.expr.is_number and b.expr.is_number and a.expr != 0:
                    import math
                    try:
                        mag = abs(float(b.expr) * math.log10(abs(float(a.expr))))
                    except (OverflowError, ValueError, TypeError):
                        mag = math.inf
                    from ..syntax import limits as L
                    top = L.current().exponent
                    if mag > top:
                        self._fail("out-of-range", "the power is outside the range a plan can hold "
                                   f"(magnitudes from 1e-{top} to 1e{top})", e.span, "check the exponent")
                if a.dim.dimensionless:
                    return Val(a.expr ** b.expr, a.dim)
                if not b.expr.is_Rational:
                    self._fail("unit-mismatch", "a quantity with units can only be raised to a constant power",
                               e.right.span, "make the exponent a plain number")
                from ..syntax import limits as L
                if abs(b.expr) > L.current().unit_exponent:
                    self._fail("limit", f"a quantity with units raised to the power {clip(str(b.expr))} is beyond "
                               f"the limit of {L.current().unit_exponent} on unit exponents", e.right.span,
                               L.raise_hint("unit_exponent"))
                return Val(a.expr ** b.expr, a.dim ** Fraction(int(b.expr.p), int(b.expr.q)))
        if isinstance(e, A.Call):
            return self._call(e, scope, node)
        raise TypeError(e)  # pragma: no cover

    def _num(self, v, e) -> Val:
        if isinstance(v, Val):
            return v
        what = {str: "a string", bool: "a boolean", DeclRef: "a declaration",
                ListVal: "a list"}.get(type(v), "not a number")
        self._fail("type", f"expected a number, got {what}", e.span,
                   "arithmetic needs numbers with units" if not isinstance(v, DeclRef)
                   else "refer to one of its fields, e.g. name.field")

    def _call(self, e: A.Call, scope, node):
        f = e.func
        known = ("min", "max", "ceil", "floor", "sqrt", "log", "exp", "abs")
        from ..engine.distributions import KINDS
        if f in KINDS:
            self._fail("distribution", f"{f}() is a distribution: it can only be the whole value of an input",
                       e.span, "give the uncertain value its own field (`mfu = normal(40 %, 3 %)`) and use that "
                       "field here")
        if f not in known:
            guess = did_you_mean(f, known)
            self._fail("unknown-name", f"unknown function '{f}'", e.func_span,
                       (f"did you mean '{guess}'? " if guess else "") + "functions: " + ", ".join(known))
        args = [self._num(self._eval(a, scope, node), a) for a in e.args]
        if f in ("min", "max"):
            if not args:
                self._fail("arity", f"{f}() needs at least one argument", e.span)
            for a, ast_a in zip(args[1:], e.args[1:]):
                if a.dim != args[0].dim:
                    self._fail("unit-mismatch", f"{f}() arguments must share a dimension: "
                               f"{describe_dim(args[0].dim)} vs {describe_dim(a.dim)}", ast_a.span)
            fn = sp.Min if f == "min" else sp.Max
            return Val(fn(*[a.expr for a in args]), args[0].dim)
        if len(args) != 1:
            self._fail("arity", f"{f}() takes one argument, got {len(args)}", e.span)
        a = args[0]
        if f == "abs":
            return Val(sp.Abs(a.expr), a.dim)
        if f == "sqrt":
            if a.expr.is_number and a.expr.is_negative:
                self._fail("out-of-range", f"sqrt() of a negative number ({sp.N(a.expr, 6)}) is not a real number",
                           e.args[0].span, "a square root of a negative value has no real answer: check the signs")
            return Val(sp.sqrt(a.expr), a.dim ** Fraction(1, 2))
        if not a.dim.dimensionless:
            self._fail("unit-mismatch", f"{f}() needs a dimensionless argument, got {describe_dim(a.dim)}",
                       e.args[0].span, "divide by a unit first, e.g. ceil(x / y)")
        if f == "log" and a.expr.is_number and not a.expr.is_positive:
            self._fail("out-of-range", f"log() of {sp.N(a.expr, 6)} is not a real number", e.args[0].span,
                       "log() needs a positive argument")
        if f == "exp" and a.expr.is_number:
            # e^x of a number is bounded here, before mpmath sees it: exp(exp(exp(100))) has a
            # 10^(10^43)-digit exponent, which no evaluation finishes
            import math
            from ..syntax import limits as L
            try:
                mag = abs(float(a.expr)) * math.log10(math.e)
            except (OverflowError, ValueError, TypeError):
                mag = math.inf
            top = L.current().exponent
            if not mag <= top:
                self._fail("out-of-range", "exp() of this argument is outside the range a plan can hold "
                           f"(magnitudes from 1e-{top} to 1e{top})", e.span,
                           f"exp(x) needs |x| ≤ {top * math.log(10):.0f}; check the argument")
        fn = {"ceil": sp.ceiling, "floor": sp.floor, "log": sp.log, "exp": sp.exp}[f]
        return Val(fn(a.expr), DIMENSIONLESS)

    def eval_expr(self, e, scope=None) -> Val:
        """Build an expression AST in global scope (queries).

        :raises PlanError: with the diagnostics of this expression only.
        """
        start = len(self.rep.items)
        try:
            return self._num(self._eval(e, scope, None), e)
        except Fail:
            self._raise_since(start)
