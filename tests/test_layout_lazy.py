"""The lazy sympy path of ``plugins.training.layout_model.evaluate``: every value it returns is the
expression the eager text builds (the same sympy object, compared structurally), for dense and
MoE layouts, both efficiency modes, every ZeRO stage and recomputation mode, with and without
offload; a value is built only when read; ``where`` keeps only the branch it takes."""
from __future__ import annotations

import itertools

import pytest
import sympy as sp

from plugins.training import layout_model as lm
from plugins.hardware import ops as ops_mod

SYM = lm.ops("sympy")

# Python-level switches of K (compared with ==, used in `if`), kept as numbers
SWITCHES = {"flash": 1, "dropout": 0, "logits": 1, "prefetch": 1, "gph": 8, "mats": 3, "act_bytes": 2}
MAGNITUDES = ("L h a kv dh V N N_emb N_exp E topk L_moe fwd_tok head_tok s B peak gpus link nic nics latency "
              "overlap input transient f bytes_W bytes_G bytes_M bytes_O mfu exp_tok imb eta_mm F_half eta_mem "
              "mem_bw qkv_w o_w f_dense fe ks host_link host_bw link_alpha link_launch link_eff nic_alpha "
              "nic_launch nic_eff").split()


def constants(mode: str, **switches) -> dict:
    K = {k: sp.Symbol(f"K.{k}", positive=True) for k in MAGNITUDES}
    K.update(SWITCHES, mode=mode, link_nvls=False, nic_nvls=False)
    K.update(switches)
    return K


def knobs(t, p, c, e, v, z, r, sp_on, off=0) -> dict:
    return {"t": t, "p": p, "c": c, "e": e, "et": t, "v": v, "z": z, "r": r, "sp": sp_on, "off": off,
            "d": sp.Symbol("K.gpus", positive=True) / (t * p * c), "b": sp.Symbol("X.b", positive=True)}


CASES = [
    # (mode, moe, activations, knobs, K switches)
    ("mfu", False, "formula", (1, 1, 1, 1, 1, 0, 0, 0), {}),
    ("mfu", False, "formula", (1, 1, 1, 1, 1, 3, 2, 0), {"prefetch": 0}),
    ("mfu", False, "transient", (2, 2, 1, 1, 1, 1, 1, 1), {"flash": 0, "dropout": 1}),
    ("mfu", False, "formula", (2, 4, 2, 1, 2, 2, 0, 1), {}),
    ("mfu", True, "formula", (2, 2, 1, 2, 1, 1, 2, 0), {}),
    ("mfu", False, "formula", (1, 1, 1, 1, 1, 2, 0, 0, 1), {}),     # ZeRO-Offload
    ("roofline", False, "formula", (1, 1, 1, 1, 1, 0, 0, 0), {}),
    ("roofline", False, "formula", (2, 2, 2, 1, 1, 3, 1, 1), {"flash": 0}),
    ("roofline", True, "formula", (2, 1, 1, 2, 1, 1, 0, 0), {}),
]


@pytest.mark.parametrize("mode,moe,activations,x,switches", CASES)
def test_lazy_values_are_the_eager_expressions(mode, moe, activations, x, switches):
    K, X = constants(mode, **switches), knobs(*x)
    eager = lm.evaluate(K, X, SYM, activations, moe, lazy=False)
    lazy = lm.evaluate(K, X, SYM, activations, moe)
    assert set(lazy) == set(eager)
    for k in eager:
        a, b = eager[k], lazy[k]
        assert type(b) is not lm._Lazy, k
        assert a == b and type(a) is type(b), (k, a, b)
    assert dict(lazy.items()) == eager


def test_a_value_is_built_only_when_read():
    K, X = constants("mfu"), knobs(1, 1, 1, 1, 1, 3, 0, 0)
    r = lm.evaluate(K, X, SYM)
    raw = dict.__getitem__
    step = raw(r, "step")
    assert type(step) is lm._Lazy and step.val is lm._UNBUILT
    r["compute"]
    assert step.val is lm._UNBUILT          # reading one value builds nothing else it does not need
    r["step"]
    assert step.val is not lm._UNBUILT


def test_where_keeps_only_the_branch_taken():
    x = sp.Symbol("x", real=True)
    leaf = lm._Lazy(None, None, x)
    built = []
    other = lm._Lazy(lambda v: built.append(v) or v, (leaf,))
    taken = leaf * 2
    assert SYM.where(True, taken, other) is taken
    assert SYM.where(leaf > leaf - 1, taken, other) is taken      # decided by sympy: x > x − 1
    assert built == []                                            # the other branch was never built
    cond = sp.Symbol("y", real=True) > 0
    pw = SYM.where(cond, taken, 1)
    assert type(pw) is lm._Lazy and pw.force() == sp.Piecewise((2 * x, cond), (1, True))


def test_python_dispatch_is_kept():
    """``2 - x``, ``x ** 2``, ``1 / x``, comparisons with a number on the left: the lazy result is
    what the same expression on sympy values gives."""
    x, y = sp.symbols("x y", positive=True)
    lx, ly = (lm._Lazy(None, None, s) for s in (x, y))
    for f in (lambda a, b: 2 - a, lambda a, b: a ** 2 / b, lambda a, b: 1 / (a + b), lambda a, b: -a * b + 3,
              lambda a, b: 1 < a, lambda a, b: (a > 1) & (b <= 2), lambda a, b: b % 3,
              lambda a, b: lm._floor(a / 3), lambda a, b: SYM.max(0, a - b, 1), lambda a, b: abs(-a) + (+b),
              lambda a, b: a // 2, lambda a, b: 7 // b, lambda a, b: ~(a > b)):
        got = f(lx, ly)
        assert (got.force() if type(got) is lm._Lazy else got) == f(x, y)
    for a, b in itertools.product((lx, x), (ly, y)):
        assert sp.sympify(a + b) == x + y


@pytest.mark.parametrize("q", [sp.Float(8.0), 8, sp.Rational(16, 3), 1, sp.Float(0.5)])
@pytest.mark.parametrize("form", ["symbol", "multiple", "explicit"])
def test_spans_of_a_gpu_count_is_what_sympy_builds(q, form):
    """group_bandwidth's k > max(1, min(k, q)) for k = gpus/(tp·pp·cp) or dp (a node symbol, real
    and nothing else) is built unevaluated: the same relation sympy's evaluated constructor gives."""
    g = sp.Symbol("plan.gpus", real=True)
    k = {"symbol": g, "multiple": g / 8, "explicit": sp.Symbol("plan.layout.dp", real=True)}[form]
    per_host = SYM.max(1, SYM.min(k, q))
    got = lm._spans(k, per_host)
    want = k > per_host
    assert got == want and type(got) is type(want)


def test_spans_of_other_expressions_is_left_to_sympy():
    x = sp.Symbol("x", positive=True)
    assert lm._spans(x + 20, 8) is sp.true            # decided: x + 20 > 8 for every positive x
    assert lm._spans(2, 1) is True and lm._spans(1, 1) is False


@pytest.mark.parametrize("q", [sp.Float(8.0), 8, sp.Rational(16, 3), sp.Float(1.5), 1, sp.Float(0.5), sp.Float(4.0)])
@pytest.mark.parametrize("form", ["symbol", "explicit", "multiple"])
def test_group_bandwidth_piecewise_is_what_sympy_builds(q, form):
    """The data-parallel bandwidth's Piecewise((min(link, nics·nic/sharing), k > per_host), (link,
    True)) built without sympy's evaluation (when it would change nothing) is the object sympy's
    evaluated constructor builds, and the reciprocal (a division by the bandwidth) too."""
    g = sp.Symbol("plan.gpus", real=True)
    k = {"symbol": g, "multiple": g / 8, "explicit": sp.Symbol("plan.layout.dp", real=True)}[form]
    link, nic, nics = (sp.Symbol(f"plan.{n}", real=True) for n in ("link", "nic", "nics"))
    per_host = SYM.max(1, SYM.min(k, q))
    cond = lm._spans(k, per_host)
    a = SYM.min(link, nics * nic / (8 / per_host))
    got = ops_mod._piecewise(cond, a, link)
    want = sp.Piecewise((a, cond), (link, True))
    assert got == want and sp.srepr(got) == sp.srepr(want)
    for x in (k * link, sp.Integer(1), 1, 3, sp.Rational(2, 3), 0.5, sp.Float(2.5)):    # a division by it
        assert ops_mod._div(x, got) == x / want and sp.srepr(ops_mod._div(x, got)) == sp.srepr(x / want)
    assert ops_mod._kept_piecewise(cond, a, link) == (form != "multiple")   # q·x: sympy moves q to the right


def test_piecewise_other_conditions_are_left_to_sympy():
    """Equal branches, a condition sympy decides or rewrites, a decided max: sympy evaluates."""
    x = sp.Symbol("plan.gpus", real=True)
    y = sp.Symbol("y", positive=True)
    assert not ops_mod._kept_piecewise(sp.StrictGreaterThan(x, 8, evaluate=False), y, y)
    assert ops_mod._piecewise(sp.StrictGreaterThan(x, 8, evaluate=False), y, y) == y
    assert not ops_mod._kept_piecewise(sp.StrictGreaterThan(y, 0, evaluate=False), x, y)      # y > 0 is true
    assert ops_mod._piecewise(sp.StrictGreaterThan(y, 0, evaluate=False), x, y) == x
    r = sp.Max(x, 2, evaluate=False)                                                    # x > max(x, 2): false
    assert not ops_mod._kept_piecewise(sp.StrictGreaterThan(x, r, evaluate=False), y, 2 * y)
    assert not ops_mod._kept_piecewise(sp.StrictGreaterThan(x, sp.oo, evaluate=False), y, 2 * y)
    assert not ops_mod._kept_piecewise(sp.StrictGreaterThan(x, sp.Max(1, sp.Min(x, sp.Float(0.5), evaluate=False),
                                                                    evaluate=False), evaluate=False), y, 2 * y)
    assert ops_mod._kept_piecewise(sp.StrictGreaterThan(x, 1, evaluate=False), y, 2 * y)
    assert ops_mod._piecewise(sp.StrictGreaterThan(x, 1, evaluate=False), y, 2 * y) == sp.Piecewise((y, x > 1), (2 * y, True))
