"""Property tests of the parser, the evaluator and the expression formatter.

1. No input crashes: arbitrary text (and "token soup" built from the language's own
   vocabulary) makes ``parse`` and ``Workspace`` either succeed or raise ``PlanError``.
2. Arithmetic with units is exact: generated expressions over numbers, units and
   ``+ - * / ^`` evaluate to the value of an independent computation with
   :class:`fractions.Fraction` and a unit table written here, with the same dimension.
3. ``format_expr`` round-trips: formatting a parsed expression and parsing it again gives
   the same tree (and value), and formatting is idempotent.
"""
from __future__ import annotations

import tempfile
from dataclasses import fields, is_dataclass
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dsl.syntax.diagnostics import PlanError
from dsl.syntax.format import format_expr
from dsl.results.evaluation import evaluate_file as Workspace
from dsl.syntax.parser import parse, parse_expression

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

_TMP = Path(tempfile.mkdtemp(prefix="plan-fuzz-"))


def _workspace(text: str, name: str = "fuzz.plan") -> Workspace:
    p = _TMP / name
    p.write_text(text, encoding="utf-8")
    return Workspace(p)


# ---------------------------------------------------------------- 1. nothing but PlanError
printable = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)

VOCAB = ["device", "plan", "model", "workload", "link", "storage", "d", "p", "x", "y", "extends", "from",
         "use", "compute", "memory", "zero", "finish", "import", "solve", "for", "true", "false",
         '"bf16"', '"@catalog/hardware.plan"', '"x.json"', "{", "}", "(", ")", "=", "==", "<=", ">", ";",
         "\n", ",", ".", "+", "-", "*", "/", "^", "1", "0", "2.5", "1e3", "1_000", ".5", "GB", "GB/s", "s",
         "KB", "%", "s^-1", "min", "max", "sqrt", "log", "ceil", "#c\n", "\\\n", "'", "@", "\t"]
token_soup = st.lists(st.sampled_from(VOCAB), max_size=40).map(" ".join)

# Mostly well-formed files with one random damage, to reach the later passes.
TEMPLATE = """import "@catalog/hardware.plan"
device d extends rtx4090 { x = 5 GB / 2 s; y = x * 3 s; z = min(x, 1 GB/s) }
workload w { tokens = 1e9 token; seq_len = 4096 token; global_batch = 64 seq; deadline = 3 day }
plan p {
  model = m; workload = w; device = d; gpus = 8; mfu = 40 %
  use memory { usable = 20 GiB }
  use compute {}
  use finish {}
}
model m { layers = 2; hidden = 256; ffn = 1024; heads = 4; vocab = 1000 }
solve p.mfu for p.finish_time == w.deadline
"""


@st.composite
def damaged(draw):
    text = TEMPLATE
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 8)))
        text = text[:i] + draw(st.sampled_from(VOCAB + [""])) + text[j:]
    return text


def _only_plan_errors(text: str) -> None:
    try:
        parse(text, "<fuzz>")
    except PlanError as e:
        assert e.diagnostics and all(d.code for d in e.diagnostics)
        assert str(e)  # renders


def _workspace_only_plan_errors(text: str) -> None:
    try:
        _workspace(text)
    except PlanError as e:
        assert e.diagnostics
        assert any(d.severity == "error" for d in e.diagnostics)
        assert str(e)


@SETTINGS
@given(printable)
def test_parse_random_text_raises_only_plan_error(text):
    _only_plan_errors(text)


@SETTINGS
@given(token_soup)
def test_parse_token_soup_raises_only_plan_error(text):
    _only_plan_errors(text)


@SETTINGS
@given(st.one_of(printable, token_soup))
def test_workspace_random_text_raises_only_plan_error(text):
    _workspace_only_plan_errors(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_workspace_damaged_file_raises_only_plan_error(text):
    _workspace_only_plan_errors(text)


# Well-formed expressions rich in what the text pre-scan must not over-count: units with '/',
# '*' and '^-', exponents with a sign, keywords before a sign, signs, lists, calls, comments.
_atoms = st.sampled_from(["1", "2.5", "1e-3", "1E+2", "x", "p.gpus", "1 GB/s", "2 GiB*s", "3 s^-1", "4 %",
                          "5 token/s/GPU", '"s"'])
_gap = st.sampled_from(["", " ", "  "])


def _combine(children):
    binary = st.tuples(children, _gap, st.sampled_from("+-*/^"), _gap, children).map("".join)
    signed = st.tuples(st.sampled_from(["-", "+", "- ", "-("]), children).map(
        lambda t: t[0] + t[1] + (")" if t[0].endswith("(") else ""))
    bracket = children.map(lambda e: f"({e})")
    listed = st.lists(children, min_size=0, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]")
    trailing = st.lists(children, min_size=1, max_size=3).map(lambda xs: "[" + ", ".join(xs) + ", # c\n]")
    call = st.lists(children, min_size=1, max_size=3).map(lambda xs: "max(" + ", ".join(xs) + ")")
    return st.one_of(binary, binary, signed, bracket, listed, trailing, call)


well_formed = st.recursive(_atoms, _combine, max_leaves=25)
STATEMENTS = ["plan p {{ a = {} }}", "plan p {{ a = 1 in [{}, 2] }}", "plan p {{ require {} < 2 }}",
              "solve p.a for -{} == 1", "plan p {{ use x {{ a = {} }} }}", "plan p {{ a = 1; b = {}; c = 2 }}"]


@SETTINGS
@given(st.sampled_from(STATEMENTS), well_formed, st.integers(1, 4), st.integers(1, 3), st.integers(2, 8),
       st.integers(1, 3))
def test_text_prescan_never_refuses_what_the_tree_accepts(stmt, expr, depth, items, size, members):
    """The pre-scan (run before Lark builds a tree, so a hostile file is refused at once) counts
    lower bounds of the tree's depth, list lengths, statement sizes and members of a
    declaration: under tiny limits, any
    text whose parse tree passes the tree check passes the pre-scan too (the one rule of the
    pre-scan alone, brackets nested deeper than the depth limit, is left out)."""
    from dsl.syntax import limits
    from dsl.syntax import parser as P
    text = stmt.format(expr) + "\n"
    level, deepest = 0, 0
    for ch in text:
        level += (ch in "([") - (ch in ")]")
        deepest = max(deepest, level)
    assume(deepest <= depth)
    try:
        tree = P._parser().parse(text, start="start")
    except Exception:
        assume(False)
    with limits.override(expr_depth=depth, list_items=items, expr_size=size, fields=members):
        try:
            P.check_tree_limits(tree, "t.plan")
        except PlanError:
            assume(False)
        P.check_text_limits(text, "t.plan")


def _lark_outcome(text: str):
    from lark.exceptions import UnexpectedInput

    from dsl.syntax import parser as P
    try:
        return P._parser().parse(text, start="start")
    except UnexpectedInput as e:
        tok = getattr(e, "token", None)
        return (type(e).__name__, e.line, e.column, None if tok is None else (tok.type, str(tok)),
                sorted(getattr(e, "expected", None) or getattr(e, "allowed", None) or ()))


@SETTINGS
@given(st.lists(st.sampled_from(VOCAB + [";", ";;", "; ;", "\n;", ";\n", '"a;;b"', "#;;\n"]), max_size=40)
       .map(" ".join))
def test_repeated_separators_change_neither_the_tree_nor_the_error(text):
    """Lark is given the text with each ';' that follows another ';' of the same run of
    separators made a space (a file of a million ';' is one token): the same tree, or the same
    error at the same place with the same expected tokens."""
    from dsl.syntax import parser as P
    text += "\n"
    assert _lark_outcome(P._quiet_separators(text)) == _lark_outcome(text)


def test_template_is_valid():
    ws = _workspace(TEMPLATE)
    assert float(ws.base_value("d.x")) == 2.5e9


# ---------------------------------------------------------------- 2. exact arithmetic with units
def _dim(**kw) -> tuple:
    return tuple(sorted((k, Fraction(v)) for k, v in kw.items() if v))


def _dmul(a: tuple, b: tuple, sign: int = 1) -> tuple:
    d = dict(a)
    for k, v in b:
        d[k] = d.get(k, 0) + sign * v
    return tuple(sorted((k, v) for k, v in d.items() if v))


def _dpow(a: tuple, n: int) -> tuple:
    return tuple(sorted((k, v * n) for k, v in a if v * n))


T, I, F, TOK = _dim(time=1), _dim(info=1), _dim(flop=1), _dim(token=1)
# unit -> (base units per one, dimension); written independently of dsl.engine.units
UNITS: dict[str, tuple[Fraction, tuple]] = {
    "": (Fraction(1), ()),
    "%": (Fraction(1, 100), ()),
    "ns": (Fraction(1, 10**9), T), "ms": (Fraction(1, 1000), T), "s": (Fraction(1), T),
    "min": (Fraction(60), T), "h": (Fraction(3600), T), "day": (Fraction(86400), T),
    "B": (Fraction(1), I), "kB": (Fraction(1000), I), "MB": (Fraction(10**6), I), "GB": (Fraction(10**9), I),
    "KiB": (Fraction(1024), I), "MiB": (Fraction(2**20), I), "GiB": (Fraction(2**30), I),
    "bit": (Fraction(1, 8), I), "Gbit": (Fraction(10**9, 8), I),
    "FLOP": (Fraction(1), F), "TFLOP": (Fraction(10**12), F),
    "token": (Fraction(1), TOK),
    "GB/s": (Fraction(10**9), _dmul(I, T, -1)), "Gbit/s": (Fraction(10**9, 8), _dmul(I, T, -1)),
    "TFLOP/s": (Fraction(10**12), _dmul(F, T, -1)), "token/s": (Fraction(1), _dmul(TOK, T, -1)),
    "s^-1": (Fraction(1), _dpow(T, -1)), "GiB*s": (Fraction(2**30), _dmul(I, T)),
    "B/token": (Fraction(1), _dmul(I, TOK, -1)),
}
BASE = {"time": "s", "info": "B", "flop": "FLOP", "token": "token"}
BY_DIM: dict[tuple, list[str]] = {}
for _u, (_s, _d) in UNITS.items():
    BY_DIM.setdefault(_d, []).append(_u)
DIMS = sorted(BY_DIM)


@st.composite
def number(draw):
    """(text, exact value) of a non-negative literal: 12, 1_024, 2.50, .5, 3e2, 15e-3."""
    whole = draw(st.integers(0, 10**6))
    frac = draw(st.text("0123456789", max_size=3))
    exp = draw(st.one_of(st.none(), st.integers(-6, 6)))
    style = draw(st.sampled_from(["plain", "underscore", "leading_dot"]))
    if style == "leading_dot" and frac:
        text = "." + frac
        whole = 0
    elif style == "underscore" and whole >= 1000:
        text = f"{whole:_}" + ("." + frac if frac else "")
    else:
        text = str(whole) + ("." + frac if frac else "")
    value = Fraction(whole) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    if exp is not None:
        text += draw(st.sampled_from(["e", "E"])) + (f"{exp:+d}" if draw(st.booleans()) else str(exp))
        value *= Fraction(10) ** exp
    return text, value


@st.composite
def quantity(draw, dim=None):
    text, value = draw(number())
    if dim is not None and dim not in BY_DIM:  # e.g. s^2 from a power: base units
        unit = "*".join(f"{BASE[k]}^{v}" for k, v in dim)
        return f"{text} {unit}", value, dim
    unit = draw(st.sampled_from(BY_DIM[dim] if dim is not None else list(UNITS)))
    scale, d = UNITS[unit]
    return (f"{text} {unit}" if unit else text), value * scale, d


@st.composite
def _arith(draw, dim, depth):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(quantity(dim)) + (True,)
    kind = draw(st.sampled_from(["+", "-", "*", "/", "neg", "pow", "paren"]))

    def sub(d=None):
        t, v, dd, atom = draw(_arith(d, depth - 1))
        return (t if atom else f"({t})"), v, dd

    if kind in "+-":
        lt, lv, ld = sub(dim)
        rt, rv, _ = sub(ld)
        return f"{lt} {kind} {rt}", (lv + rv if kind == "+" else lv - rv), ld, False
    if kind == "neg":
        t, v, d = sub(dim)
        return f"-{t}", -v, d, False
    if kind == "paren":
        t, v, d, _ = draw(_arith(dim, depth - 1))
        return f"({t})", v, d, True
    if kind == "pow":
        if dim is None:
            base_dim, n = draw(st.sampled_from(DIMS)), draw(st.integers(-2, 3))
        elif dim == ():
            base_dim, n = (), draw(st.integers(-2, 3))
        else:
            base_dim, n = dim, 1
        t, v, d = sub(base_dim)
        if n < 0:
            assume(v != 0)
        return f"{t} ^ {n}", v ** n, _dpow(d, n), False
    if kind == "*":
        if dim is None:
            (lt, lv, ld), (rt, rv, rd) = sub(), sub()
        elif draw(st.booleans()):
            (lt, lv, ld), (rt, rv, rd) = sub(dim), sub(())
        else:
            (lt, lv, ld), (rt, rv, rd) = sub(()), sub(dim)
        return f"{lt} * {rt}", lv * rv, _dmul(ld, rd), False
    # "/"
    if dim is None:
        (lt, lv, ld), (rt, rv, rd) = sub(), sub()
    else:
        (lt, lv, ld), (rt, rv, rd) = sub(dim), sub(())
    assume(rv != 0)
    return f"{lt} / {rt}", lv / rv, _dmul(ld, rd, -1), False


def arith(dim=None, depth=3):
    """(text, exact value in base units, dimension) of an expression of dimension ``dim``
    (any when None).  Sub-expressions other than literals are parenthesized, so the text's
    structure is the generated tree's (the round-trip tests cover minimal parentheses)."""
    return _arith(dim, depth).map(lambda c: c[:3])


def _eval(text: str):
    ws = _workspace(f"device d {{\n  x = {text}\n}}\n", "arith.plan")
    n = ws.nodes["d.x"]
    v = ws.base_value("d.x")
    return Fraction(int(v.p), int(v.q)), tuple(sorted(n.dim.exps))


@SETTINGS
@given(arith())
def test_arithmetic_with_units_is_exact(case):
    text, value, dim = case
    got, got_dim = _eval(text)
    assert got == value, (text, got, value)
    assert got_dim == dim, (text, got_dim, dim)


@SETTINGS
@given(st.sampled_from(DIMS).flatmap(lambda d: st.tuples(arith(d), arith(d))))
def test_same_dimension_sums_and_comparisons(pair):
    (lt, lv, ld), (rt, rv, _) = pair
    got, got_dim = _eval(f"({lt}) + ({rt})")
    assert got == lv + rv and got_dim == ld


@SETTINGS
@given(st.sampled_from(DIMS).flatmap(lambda d: st.tuples(arith(d, 1), st.sampled_from([x for x in DIMS if x != d]))
                                     .flatmap(lambda a: st.tuples(st.just(a[0]), arith(a[1], 1)))))
def test_adding_different_dimensions_is_a_unit_mismatch(pair):
    (lt, _, _), (rt, _, _) = pair
    with pytest.raises(PlanError) as ei:
        _eval(f"({lt}) + ({rt})")
    assert [d.code for d in ei.value.diagnostics if d.severity == "error"] == ["unit-mismatch"]


@pytest.mark.parametrize("text,value,dim", [
    ("2 ^ 3 ^ 2", Fraction(2) ** 9, ()),                # right-associative
    ("-2 ^ 2", Fraction(-4), ()),                       # unary minus binds looser than ^
    ("(-2) ^ 2", Fraction(4), ()),
    ("2 * 3 + 4", Fraction(10), ()),
    ("2 + 3 * 4", Fraction(14), ()),
    ("8 / 4 / 2", Fraction(1), ()),                     # left-associative
    ("8 - 4 - 2", Fraction(2), ()),
    ("1 GB/s * 2 s", Fraction(2 * 10**9), I),           # unit right after its number
    ("1 GB / 2 s", Fraction(10**9, 2), _dmul(I, T, -1)),
    ("1 Gbit/s", Fraction(10**9, 8), _dmul(I, T, -1)),
    ("1 GiB - 1 MiB * 1024", Fraction(0), I),
    ("50 % * 2", Fraction(1), ()),
    ("1_000.5e-1 s", Fraction(2001, 20), T),
])
def test_precedence_and_literals(text, value, dim):
    assert _eval(text) == (value, dim)


# ---------------------------------------------------------------- 3. format_expr round trip
def _strip(node):
    """An AST without spans, for structural comparison."""
    if isinstance(node, tuple):
        return tuple(_strip(x) for x in node)
    if is_dataclass(node):
        return (type(node).__name__,) + tuple(_strip(getattr(node, f.name)) for f in fields(node)
                                              if not f.name.endswith("span"))
    return node


NAMES = st.sampled_from(["x", "y", "gpus", "d.x", "p.memory.usable"])
STRINGS = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\r") | st.sampled_from(
    ["\n", "\t", "\\", '"']), max_size=12)


@st.composite
def any_expr(draw, depth=3):
    """Expression text with minimal or redundant parentheses, names, calls and strings."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(["num", "num", "name", "str", "bool"]))
        if kind == "num":
            return draw(quantity())[0]
        if kind == "name":
            return draw(NAMES)
        if kind == "bool":
            return draw(st.sampled_from(["true", "false"]))
        s = draw(STRINGS)
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'
    kind = draw(st.sampled_from(["bin", "bin", "neg", "call", "paren"]))
    if kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/", "^"]))
        left = draw(any_expr(depth - 1))
        if op == "^" or draw(st.booleans()):
            left = f"({left})"
        right = draw(any_expr(depth - 1))
        if draw(st.booleans()):
            right = f"({right})"
        return f"{left} {op} {right}"
    if kind == "neg":
        return f"-({draw(any_expr(depth - 1))})"
    if kind == "call":
        args = draw(st.lists(any_expr(depth - 1), max_size=3))
        return f"{draw(st.sampled_from(['min', 'max', 'sqrt', 'ceil']))}({', '.join(args)})"
    return f"({draw(any_expr(depth - 1))})"


def _parse(text: str):
    return parse(f"device d {{ x = {text} }}\n", "<rt>").decls[0].assigns[0].value


@SETTINGS
@given(any_expr())
def test_format_round_trip_structure(text):
    e1 = _parse(text)
    t1 = format_expr(e1)
    e2 = _parse(t1)
    assert _strip(e2) == _strip(e1), (text, t1)
    assert format_expr(e2) == t1  # idempotent
    assert _strip(parse_expression(t1)) == _strip(e1)


@SETTINGS
@given(arith())
def test_format_round_trip_value(case):
    text, value, dim = case
    t1 = format_expr(_parse(text))
    assert _eval(t1) == (value, dim), (text, t1)
    assert len(t1) <= len(text)  # minimal parentheses never add text


@pytest.mark.parametrize("text,canonical", [
    ("(-2) ^ 2", "(-2) ^ 2"),
    ("-(2 ^ 2)", "-2 ^ 2"),
    ("(2 s) ^ 2", "2 s ^ 2"),
    ("((1 + 2)) * 3", "(1 + 2) * 3"),
    ("1 - (2 - 3)", "1 - (2 - 3)"),
    ("(1 - 2) - 3", "1 - 2 - 3"),
    ("1 / (2 * 3)", "1 / (2 * 3)"),
    ("2 ^ (3 ^ 2)", "2 ^ 3 ^ 2"),
    ("(2 ^ 3) ^ 2", "(2 ^ 3) ^ 2"),
    ('"a\\nb \\"c\\" \\\\"', '"a\\nb \\"c\\" \\\\"'),
])
def test_format_canonical(text, canonical):
    assert format_expr(_parse(text)) == canonical
