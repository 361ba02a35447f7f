"""Canonical text of expressions (used in messages and query echoes)."""
from __future__ import annotations

from . import ast as A

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 4}


def require_text(r) -> str:
    """A requirement's condition as canonical text: ``finish_time <= workload.deadline``."""
    return f"{format_expr(r.lhs)} {r.op} {format_expr(r.rhs)}"


def query_text(q) -> str:
    """A ``solve`` query as canonical text: ``gpus32.mfu for gpus32.finish_time == cpt.deadline``."""
    return f"{q.target.dotted} for {format_expr(q.lhs)} {q.op} {format_expr(q.rhs)}"


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


# ---------------------------------------------------------------- whole files (`plan fmt`)
def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def format_assign(a: A.Assign) -> str:
    """`name = value [in [lo, hi]] [source "…"]`."""
    s = f"{a.name} = {format_expr(a.value)}"
    if a.range is not None:
        s += f" in [{format_expr(a.range[0])}, {format_expr(a.range[1])}]"
    if a.source is not None:
        s += f" source {_quote(a.source)}"
    return s


def format_require(r: A.Require) -> str:
    return "require " + (f"{r.name}: " if r.name else "") + require_text(r)


class _Fmt:
    """Canonical layout of a parsed module with its comments re-attached.

    Statements that shared a source line stay on one line (joined by ``; ``); a body written
    on one line without comments stays on one line; every other body is one member group per
    line, indented by two spaces; runs of blank lines become one; a comment at the end of a
    line stays there (two spaces before ``#``); a comment on its own line stays before the
    statement that follows it.
    """

    def __init__(self, text: str, module: A.Module, comments: list):
        from dsl.syntax.diagnostics import split_lines
        self.lines = split_lines(text)
        self.comments = sorted(comments)           # (line, column, text)
        self.used: set[int] = set()
        self.module = module
        self.out: list[str] = []

    # comments -------------------------------------------------------------
    def _take(self, pred) -> list[tuple]:
        got = [c for i, c in enumerate(self.comments) if i not in self.used and pred(c)]
        for i, c in enumerate(self.comments):
            if i not in self.used and pred(c):
                self.used.add(i)
        return got

    def _blank_between(self, a: int, b: int) -> bool:
        """True when a source line strictly between lines a and b is empty."""
        return any(not self.lines[i - 1].strip() for i in range(a + 1, b) if 1 <= i <= len(self.lines))

    def _emit_leading(self, start: int, prev_end: int, indent: str) -> None:
        """Comments on their own lines between ``prev_end`` and ``start``, blank lines kept."""
        last = prev_end
        for (ln, col, txt) in self._take(lambda c: prev_end < c[0] < start):
            if self._blank_between(last, ln) and self.out and self.out[-1].strip() and not \
                    self.out[-1].rstrip().endswith("{"):
                self.out.append("")
            self.out.append(indent + txt.rstrip())
            last = ln
        if self._blank_between(last, start) and self.out and self.out[-1].strip() and not \
                self.out[-1].rstrip().endswith("{"):
            self.out.append("")

    def _trailing(self, line: int, after_col: int) -> str:
        got = self._take(lambda c: c[0] == line and c[1] >= after_col)
        return ("  " + "  ".join(t.rstrip() for _, _, t in got)) if got else ""

    def _has_comment_in(self, a: int, b: int) -> bool:
        return any(a <= c[0] <= b for i, c in enumerate(self.comments) if i not in self.used)

    # members --------------------------------------------------------------
    @staticmethod
    def _member_text(m) -> str:
        if isinstance(m, A.Assign):
            return format_assign(m)
        if isinstance(m, A.Require):
            return format_require(m)
        raise TypeError(m)

    def _body(self, members: list, start_line: int, end_line: int, indent: str) -> None:
        """Members of a multi-line body, between the lines of '{' and '}'."""
        members = sorted(members, key=lambda m: (m.span.line, m.span.column))
        groups: list[list] = []
        for m in members:
            one_line = m.span.line == m.span.end_line and not isinstance(m, A.UseBlock)
            if groups and one_line and groups[-1][-1].span.end_line == m.span.line and \
                    not isinstance(groups[-1][-1], A.UseBlock):
                groups[-1].append(m)
            else:
                groups.append([m])
        prev = start_line
        for g in groups:
            first, last = g[0], g[-1]
            self._emit_leading(first.span.line, prev, indent)
            if isinstance(first, A.UseBlock):
                self._use(first, indent)
                prev = first.span.end_line
                continue
            # comments inside a member that spans lines go before it
            for (_, _, txt) in self._take(lambda c: first.span.line <= c[0] < last.span.end_line):
                self.out.append(indent + txt.rstrip())
            text = "; ".join(self._member_text(m) for m in g)
            self.out.append(indent + text + self._trailing(last.span.end_line, last.span.end_column))
            prev = last.span.end_line
        # comments before the closing brace
        for (_, _, txt) in self._take(lambda c: prev < c[0] < end_line or
                                      (c[0] == end_line and c[1] < self._close_col(end_line))):
            self.out.append(indent + txt.rstrip())

    def _close_col(self, line: int) -> int:
        src = self.lines[line - 1] if 1 <= line <= len(self.lines) else ""
        return src.find("}") + 1 if "}" in src else 10 ** 9

    def _inline(self, members: list) -> str:
        members = sorted(members, key=lambda m: (m.span.line, m.span.column))
        parts = []
        for m in members:
            if isinstance(m, A.UseBlock):
                parts.append(f"use {m.plugin} " + self._inline_body(m.assigns))
            else:
                parts.append(self._member_text(m))
        return "; ".join(parts)

    def _inline_body(self, members) -> str:
        inner = self._inline(list(members))
        return "{ " + inner + " }" if inner else "{}"

    def _use(self, u: A.UseBlock, indent: str) -> None:
        head = f"{indent}use {u.plugin} "
        if u.span.line == u.span.end_line and not self._has_comment_in(u.span.line, u.span.line - 1):
            self.out.append(head + self._inline_body(u.assigns) + self._trailing(u.span.end_line, u.span.end_column))
            return
        self.out.append(head + "{" + self._brace_comment(u.span, list(u.assigns)))
        self._body(list(u.assigns), u.span.line, u.span.end_line, indent + "  ")
        self.out.append(indent + "}" + self._trailing(u.span.end_line, u.span.end_column))

    def _brace_comment(self, span, members) -> str:
        """A comment after the opening '{', unless a member follows on that line (it is then
        the member's)."""
        if any(m.span.line == span.line for m in members):
            return ""
        return self._trailing(span.line, self._brace_col(span))

    def _brace_col(self, span) -> int:
        src = self.lines[span.line - 1]
        i = src.find("{", span.column - 1)
        return i + 2 if i >= 0 else span.end_column

    # items ----------------------------------------------------------------
    def _decl(self, d: A.Decl) -> None:
        head = f"{d.kind} {d.name}"
        if d.extends:
            head += f" extends {d.extends}"
        if d.source is not None:
            head += f" from {_quote(d.source)}"
        members = list(d.assigns) + list(d.uses) + list(d.requires)
        src_end = self.lines[d.span.end_line - 1][: d.span.end_column - 1].rstrip()
        has_body = src_end.endswith("}")
        if not has_body:
            self.out.append(head + self._trailing(d.span.end_line, d.span.end_column))
            return
        one_line = d.span.line == d.span.end_line
        if one_line and not any(c[0] == d.span.line and c[1] < d.span.end_column
                                for i, c in enumerate(self.comments) if i not in self.used):
            self.out.append(head + " " + self._inline_body(members) + self._trailing(d.span.end_line, d.span.end_column))
            return
        self.out.append(head + " {" + self._brace_comment(d.span, members))
        self._body(members, d.span.line, d.span.end_line, "  ")
        self.out.append("}" + self._trailing(d.span.end_line, d.span.end_column))

    def run(self) -> str:
        items = sorted(list(self.module.imports) + list(self.module.decls) + list(self.module.queries)
                       + list(self.module.requires),
                       key=lambda it: (it.span.line, it.span.column))
        prev_end, prev_multi = 0, False
        for it in items:
            multi = isinstance(it, A.Decl) and (it.span.line != it.span.end_line)
            n_before = len(self.out)
            self._emit_leading(it.span.line, prev_end, "")
            if self.out and (multi or prev_multi) and len(self.out) == n_before and self.out[-1].strip():
                self.out.append("")
            if isinstance(it, A.Import):
                self.out.append(f"import {_quote(it.path)}" + (f" as {it.alias}" if it.alias else "")
                                + self._trailing(it.span.end_line, it.span.end_column))
            elif isinstance(it, A.Query):
                self.out.append("solve " + (f"{it.name}: " if it.name else "") + query_text(it)
                                + self._trailing(it.span.end_line, it.span.end_column))
            elif isinstance(it, A.Require):
                self.out.append(format_require(it) + self._trailing(it.span.end_line, it.span.end_column))
            else:
                self._decl(it)
            prev_end, prev_multi = it.span.end_line, multi
        rest = self._take(lambda c: True)
        if rest and self._blank_between(prev_end, rest[0][0]) and self.out:
            self.out.append("")
        for (_, _, txt) in rest:
            self.out.append(txt.rstrip())
        return "\n".join(self.out).strip("\n") + "\n" if self.out else ""


def format_source(text: str, file: str = "<string>") -> str:
    """Canonical text of a whole `.plan` file, comments kept (see :class:`_Fmt`).

    Idempotent: ``format_source(format_source(t)) == format_source(t)``; the result parses to
    the same declarations, values, requirements and queries.

    :raises PlanError: with the syntax diagnostic when ``text`` does not parse.
    """
    from dsl.syntax.parser import parse_with_comments
    module, comments = parse_with_comments(text, file)
    return _Fmt(text if text.endswith("\n") else text + "\n", module, comments).run()
