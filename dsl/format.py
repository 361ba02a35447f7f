"""Canonical text of expressions (used in messages and query echoes)."""
from __future__ import annotations

from . import ast as A

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 4}


def format_expr(e, parent: int = 0, right: bool = False) -> str:
    """Render an expression AST as canonical `.plan` text with minimal parentheses."""
    if isinstance(e, A.Number):
        return e.text + (f" {e.unit}" if e.unit else "")
    if isinstance(e, A.Ref):
        return e.dotted
    if isinstance(e, A.String):
        return '"' + e.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(e, A.Bool):
        return "true" if e.value else "false"
    if isinstance(e, A.Neg):
        s = "-" + format_expr(e.operand, 3)
        return f"({s})" if parent > _PREC["^"] else s  # (-2) ^ 2 is not -2 ^ 2
    if isinstance(e, A.List):
        return "[" + ", ".join(format_expr(a) for a in e.items) + "]"
    if isinstance(e, A.Call):
        return f"{e.func}(" + ", ".join(format_expr(a) for a in e.args) + ")"
    if isinstance(e, A.BinOp):
        p = _PREC[e.op]
        if e.op == "^":
            s = f"{format_expr(e.left, p + 1)} ^ {format_expr(e.right, p)}"
        else:
            s = f"{format_expr(e.left, p)} {e.op} {format_expr(e.right, p, True)}"
        need = p < parent or (right and p == parent and e.op in "+-*/")
        return f"({s})" if need else s
    raise TypeError(e)
