"""Large and hostile inputs cost work in proportion to what they hold, not to their bytes.

No test here times anything (the figures are in benchmarks/bench_large_inputs.py and
benchmarks/RESULTS.md): each counts what the slow path did — regular-expression matches of the
text pre-scan, tokens handed to Lark, calls of the parser, pairwise ``Max`` comparisons of
sympy — so that a quadratic or per-character path coming back fails here.
"""
from __future__ import annotations

import pytest
import sympy as sp

from dsl.syntax import limits
from dsl.syntax import parser as P
from dsl.syntax.diagnostics import PlanError


class _Counting:
    """A compiled pattern whose ``search``/``match`` calls are counted."""

    def __init__(self, pattern):
        self.pattern, self.calls = pattern, 0

    def search(self, *a):
        self.calls += 1
        return self.pattern.search(*a)

    def match(self, *a):
        self.calls += 1
        return self.pattern.match(*a)


@pytest.fixture
def prescan_calls(monkeypatch):
    """The number of regular-expression calls of :func:`check_text_limits` (its loop runs once per call)."""
    P.check_text_limits("plan p { a = 1 }\n", "warm.plan")      # compiles the patterns
    nest, items = _Counting(P._NEST_RE), _Counting(P._ITEMS_RE)
    monkeypatch.setattr(P, "_NEST_RE", nest)
    monkeypatch.setattr(P, "_ITEMS_RE", items)
    return lambda: nest.calls + items.calls


# ---------------------------------------------------------------- runs of separators
def test_a_run_of_semicolons_is_one_match_of_the_prescan(prescan_calls):
    P.check_text_limits("plan p {\n  a = 1" + ";" * 100_000 + "\n" + "; \n" * 10_000 + "  b = 2\n}\n", "t.plan")
    assert prescan_calls() < 20


def test_lark_sees_one_semicolon_of_a_run():
    text = 'import "x.plan"\n' + ";" * 50_000 + "\n; ;\t;\r\n;" + "\nplan p { a = 1;;; b = 2 }\n"
    quiet = P._quiet_separators(text)
    assert len(quiet) == len(text) and quiet.count("\n") == text.count("\n")
    assert quiet.count(";") == 2            # the first of each run
    kinds = [t.type for t in P._parser().lex(quiet)]
    assert kinds.count("SEMICOLON") == 2 and len(kinds) < 30


def test_semicolons_in_strings_and_comments_are_kept():
    text = 'plan p { a = "x;;y" # c;; d\n ;; b = 1 }\n'
    quiet = P._quiet_separators(text)
    assert '"x;;y"' in quiet and "# c;; d" in quiet and " ;  b = 1" in quiet


@pytest.mark.parametrize("text", [
    "plan p { a = 1 ;; b = 2 }\n",
    ";;\n;;plan p {;; a = 1 ;\n ; }\n;;",
    "plan p { a = [1 ;; 2] }\n",                  # the first ';' is the error, and stays
    "plan p { a = ;; }\n",
    "plan p { a = 1 +\n;; }\n",
    'plan p { a = "s;;" ;; b = 2 } # ;;\n',
    "plan p {\n  a = 1\n}\n;;;\nplan q { b = 2 ;;; c = }\n",
])
def test_quieted_text_parses_to_the_same_tree_or_error(text):
    """The separators a run repeats change neither the parse tree nor the error Lark reports."""
    from lark.exceptions import UnexpectedInput

    def outcome(t):
        try:
            return P._parser().parse(t, start="start")
        except UnexpectedInput as e:
            return (type(e).__name__, e.line, e.column, sorted(getattr(e, "expected", None) or
                                                               getattr(e, "allowed", None) or []))
    assert outcome(P._quiet_separators(text)) == outcome(text)
    got, want = None, None
    try:
        P.parse(text, "t.plan")
    except PlanError as e:
        got = e.diagnostics[0].summary
    try:       # the same text without the quieting: the same diagnostic
        want_tree = P._parser().parse(text, start="start")
        want = None if want_tree is not None else "?"
    except UnexpectedInput as e:
        want = P._syntax_diagnostic("t.plan", text, e).summary
    assert got == want


# ---------------------------------------------------------------- fields per declaration
def test_fields_above_the_limit_are_refused_before_lark(monkeypatch, prescan_calls):
    """100,000 fields on one line then a syntax error: refused by the pre-scan (Lark built a
    tree of the whole line before finding the error, 7–10 s for 1.6 MB)."""
    def no_lark():
        raise AssertionError("Lark was asked to parse an over-limit text")
    text = ("plan p { " + "; ".join(f"a{i} = {i}" for i in range(30)) + " }\n"
            "plan q {\n  use x { n < 16 }\n}\n")
    monkeypatch.setattr(P, "_parser", no_lark)
    with limits.override(fields=20), pytest.raises(PlanError) as e:
        P.parse(text, "t.plan")
    d = e.value.diagnostics[0]
    assert d.code == "limit" and "above the limit of 20 fields" in d.summary
    assert (d.span.line, d.span.column) == (1, 8)          # the declaration's '{'
    assert prescan_calls() < 70


@pytest.mark.parametrize("body", [
    "a = 1; b = 2; c = 3",
    "a = 1; require a <= 2; require a == 1",
    "a = 1; require a >= 2; b = 1 in [0, 2] source \"x = 1\"",
    "use x { a = 1; b = 2; c = 3 }; d = 1; e = 2",
    'a = max(1, 2); b = [1, 2]; c = "=="',
])
def test_fields_prescan_counts_no_more_than_the_tree(body):
    """A body whose tree has at most ``fields`` members is never refused by the pre-scan."""
    text = "plan p { " + body + " }\n"
    tree = P._parser().parse(text, start="start")
    with limits.override(fields=3):
        P.check_tree_limits(tree, "t.plan")
        P.check_text_limits(text, "t.plan")


def test_fields_prescan_and_tree_agree_on_a_long_body():
    text = "plan p {\n" + "".join(f"  f{i} = {i}\n" for i in range(12)) + "}\n"
    with limits.override(fields=11), pytest.raises(PlanError) as e:
        P.check_text_limits(text, "t.plan")
    assert "above the limit of 11 fields" in e.value.diagnostics[0].summary
    with limits.override(fields=12):
        P.check_text_limits(text, "t.plan")


# ---------------------------------------------------------------- Max/Min are not compared again
@pytest.fixture
def localzeros(monkeypatch):
    """Calls of sympy's pairwise search of a Max/Min's arguments (what an evaluated rebuild costs)."""
    calls = []
    for cls in (sp.Max, sp.Min):
        orig = cls._find_localzeros.__func__

        def counted(c, values, _orig=orig, **kw):
            if not all(v.is_number for v in values):     # a Max of numbers is reduced, cheaply
                calls.append(len(values))
            return _orig(c, values, **kw)
        monkeypatch.setattr(cls, "_find_localzeros", classmethod(counted))
    return calls


def test_lambdify_with_cse_rebuilds_max_unevaluated(localzeros):
    from dsl.engine.piecewise import lambdify
    w, c = sp.Symbol("p.window", positive=True), sp.Symbol("p.capacity", positive=True)
    e = sp.Symbol("p.initial") / w + sp.Max(*[sp.Integer(k * 7 % 59 + 1) / w for k in range(40)], evaluate=False) - c
    syms = sorted(e.free_symbols, key=lambda s: s.name)
    f = lambdify(syms, e, modules="math", cse=True)
    assert localzeros == []
    vals = {"p.capacity": 0.25, "p.initial": 3.0, "p.window": 60.0}
    assert f(*[vals[s.name] for s in syms]) == pytest.approx(3.0 / 60 + max(k * 7 % 59 + 1 for k in range(40)) / 60 - 0.25,
                                                               rel=1e-15)


def test_report_formulas_and_requirement_inputs_do_not_compare_max_arguments(localzeros):
    """The trace's 59-window `peak_decode_rate`, `peak_backlog` and `keeps_up` were rebuilt by
    sympy's evaluated Max (pairwise comparisons): 57 s CPU for `plan report --format md` of
    serving-azure-trace.plan."""
    from dsl.present import report
    from dsl.testing import evaluate_snippet
    rates = "".join(f"  r{k} = {1000 + 37 * (k * 11 % 40)} token/s\n" for k in range(40))
    demand = ", ".join(f"r{k}" for k in range(40))
    ws = evaluate_snippet(f"""
plan p {{
{rates}  use fluid_queue {{ demand = [{demand}]; window = 60 s; capacity = 2000 token/s }}
}}
""")
    ws = getattr(ws, "_ws", ws)
    localzeros.clear()
    texts = [report.formula(ws, n.id, "p")["text"] for n in ws.headline("p")]
    assert any(t.startswith("Max(") and t.count(",") >= 39 for t in texts)
    reqs = [r for r in ws.requirements if r.plan == "p"]
    assert reqs and all(report.requirement_inputs(ws, r) for r in reqs)
    assert localzeros == []


# ---------------------------------------------------------------- the hints of a syntax error
@pytest.mark.parametrize("text, want", [
    ('plan p {\n  a = "{"\nplan q {\n', (1, 8)),
    ('plan p {\n  a = 1 # {\nplan q {\n', (1, 8)),
    ('plan p { a = "x\\"{" }\nplan r {\n  b = 1\nplan q {\n', (2, 8)),
    ('plan p {\n  a = "\\\\"{"\nplan q {\n', (1, 8)),       # a quote after a backslash does not close
    ("plan p {\n  a = 1\n}\nplan q {\n  b = 1\n  c d\n", None),
    ('plan p { a = "}" }\nplan q {\n', None),
])
def test_unclosed_brace_reads_code_not_strings_or_comments(text, want):
    """The hint's brace count skips strings and comments by one regular-expression pass over
    the text (it was a loop over every character: 1.3 s for 1 MB after an early error)."""
    lines = text.split("\n")
    last = len(lines) - 1 if lines[-1] == "" else len(lines)
    col = 6 if lines[last - 1].startswith("plan") else 3
    assert P._unclosed_brace(text, last, col) == want
