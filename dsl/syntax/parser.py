"""Parsing: `.plan` text -> :class:`~dsl.syntax.ast.Module`.

The Lark parser is built lazily and once (LALR with the contextual lexer and
``propagate_positions``).  Syntax errors become :class:`~dsl.syntax.diagnostics.Diagnostic`
objects with the position, the offending token, the tokens that were expected and,
for common mistakes, a hint.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from . import ast as A
from dsl.syntax.diagnostics import Diagnostic, PlanError, Span, remember_source, split_lines


def grammar_path() -> Path:
    """Locate ``grammar.lark``: inside the installed package, else at the repository root
    (looked up beside the package directory like the catalog, ``dsl.resolve.loader.catalog_dir``;
    ``importlib.resources`` costs a few ms on every run for the same directory)."""
    here = Path(__file__).resolve().parents[1]      # the dsl package
    packaged = here / "grammar.lark"
    return packaged if packaged.is_file() else here.parent / "grammar.lark"


def cache_dir() -> Path | None:
    """Per-user cache directory of the analysed grammar and of parsed files' ASTs
    (``$XDG_CACHE_HOME/plan-dsl`` or ``~/.cache/plan-dsl``; ``PLAN_CACHE_DIR`` overrides it, an
    empty value disables the cache)."""
    import os

    d = os.environ.get("PLAN_CACHE_DIR")
    if d is not None:
        return Path(d) if d else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "plan-dsl"


@lru_cache(maxsize=64)
def _trusted(d: Path) -> bool:
    """Whether directory ``d`` may hold pickles this process loads: created if missing (mode
    0700), then a real directory (not a symbolic link) owned by this user that no other user
    can write.  A shared or world-writable ``XDG_CACHE_HOME``/``PLAN_CACHE_DIR`` turns the
    caches off instead of loading what another user could have written there."""
    import os
    import stat

    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o022:
        return False
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


@lru_cache(maxsize=None)
def _parser():
    """The LALR parser.  Building its tables takes longer than loading them, so they are cached
    on disk (lark's ``cache=``): the file name carries a hash of the grammar text, lark's
    version and Python's, and lark checks the same hash inside the file, so an edited grammar
    is re-analysed, never served stale.  Without a writable cache directory it is built in memory."""
    import hashlib
    import sys

    import lark
    from lark import Lark

    text = grammar_path().read_text(encoding="utf-8")
    opts = dict(parser="lalr", lexer="contextual", propagate_positions=True,
                start=["start", "query", "expr_only"], maybe_placeholders=True)
    d = cache_dir()
    if d is not None and _trusted(d):
        key = hashlib.sha256(f"{text}{sorted(opts.items())}{lark.__version__}{sys.version_info[:2]}"
                             .encode()).hexdigest()[:20]
        try:
            return Lark(text, cache=str(d / f"grammar-{key}.lark-cache"), **opts)
        except OSError:
            pass
    return Lark(text, **opts)


def _span(file: str, meta) -> Span:
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


def _tok_span(file: str, tok) -> Span:
    return Span(file, tok.line, tok.column, tok.end_line or tok.line,
                tok.end_column or tok.column + len(tok))


def _unescape(s: str) -> str:
    body = s[1:-1]
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            out.append({"n": "\n", "t": "\t"}.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _make_transformer(file: str):
    """A transformer of parse trees of ``file`` into AST nodes (the class is built once)."""
    t = _transformer_class()()
    t.file = file
    return t


@lru_cache(maxsize=None)
def _transformer_class():
    from lark import v_args
    from lark.visitors import Transformer_NonRecursive

    @v_args(meta=True)
    class ToAST(Transformer_NonRecursive):   # iterative: a deep tree cannot exhaust the stack
        def quantity(self, meta, ch):
            num, unit = ch[0], (ch[1] if len(ch) > 1 else None)
            return A.Number(str(num), str(unit) if unit is not None else None, _span(self.file, meta))

        def ref(self, meta, ch):
            return A.Ref(tuple(str(t) for t in ch), _span(self.file, meta))

        def string(self, meta, ch):
            return A.String(_unescape(str(ch[0])), _span(self.file, meta))

        def list(self, meta, ch):
            return A.List(tuple(c for c in ch if c is not None), _span(self.file, meta))

        def true(self, meta, ch):
            return A.Bool(True, _span(self.file, meta))

        def false(self, meta, ch):
            return A.Bool(False, _span(self.file, meta))

        def _bin(op):
            def f(self, meta, ch):
                return A.BinOp(op, ch[0], ch[1], _span(self.file, meta))
            return f

        add, sub, mul, div, pow = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("^")

        def neg(self, meta, ch):
            return A.Neg(ch[0], _span(self.file, meta))

        def call(self, meta, ch):
            name, args = ch[0], [a for a in ch[1:] if a is not None]
            return A.Call(str(name), tuple(args), _span(self.file, meta), _tok_span(self.file, name))

        def assign(self, meta, ch):
            name, value, rng, src = ch
            return A.Assign(str(name), value, _span(self.file, meta), _tok_span(self.file, name),
                            rng[:2] if rng else None, src[0] if src else None,
                            rng[2] if rng else None, src[1] if src else None)

        def range_clause(self, meta, ch):
            return (ch[0], ch[1], _span(self.file, meta))

        def source_clause(self, meta, ch):
            return (_unescape(str(ch[0])), _tok_span(self.file, ch[0]))

        def require_stmt(self, meta, ch):
            name, lhs, op, rhs = ch
            return A.Require(str(name) if name is not None else None, lhs, str(op), rhs, _span(self.file, meta),
                             _tok_span(self.file, name) if name is not None else None)

        def body(self, meta, ch):
            return list(ch)

        def use_block(self, meta, ch):
            name, members = ch[0], ch[1]
            return A.UseBlock(str(name), tuple(members), _span(self.file, meta), _tok_span(self.file, name))

        def extends_clause(self, meta, ch):
            sp_ = _tok_span(self.file, ch[0])
            if len(ch) > 1:
                last = _tok_span(self.file, ch[-1])
                sp_ = Span(sp_.file, sp_.line, sp_.column, last.end_line, last.end_column)
            return ("extends", ".".join(str(t) for t in ch), sp_)

        def from_clause(self, meta, ch):
            return ("from", _unescape(str(ch[0])), _tok_span(self.file, ch[0]))

        def decl(self, meta, ch):
            kind, name, ext, frm, members = ch
            members = members or []
            assigns = tuple(m for m in members if isinstance(m, A.Assign))
            uses = tuple(m for m in members if isinstance(m, A.UseBlock))
            reqs = tuple(m for m in members if isinstance(m, A.Require))
            return A.Decl(str(kind), str(name), ext[1] if ext else None, frm[1] if frm else None,
                          assigns, uses, _span(self.file, meta), _tok_span(self.file, kind),
                          _tok_span(self.file, name), ext[2] if ext else None, frm[2] if frm else None, reqs)

        def import_stmt(self, meta, ch):
            alias = ch[1] if len(ch) > 1 else None
            return A.Import(_unescape(str(ch[0])), _span(self.file, meta), str(alias) if alias is not None else None,
                            _tok_span(self.file, alias) if alias is not None else None)

        def query_rel(self, meta, ch):
            return (ch[0], str(ch[1]), ch[2])

        def query(self, meta, ch):
            lhs, op, rhs = ch[1]
            return A.Query(ch[0], lhs, op, rhs, _span(self.file, meta))

        def solve_stmt(self, meta, ch):
            name, target, (lhs, op, rhs) = ch
            return A.Query(target, lhs, op, rhs, _span(self.file, meta), str(name) if name is not None else None,
                           _tok_span(self.file, name) if name is not None else None)

        def expr_only(self, meta, ch):
            return ch[0]

        def start(self, meta, ch):
            return A.Module(self.file,
                            tuple(c for c in ch if isinstance(c, A.Import)),
                            tuple(c for c in ch if isinstance(c, A.Decl)),
                            tuple(c for c in ch if isinstance(c, A.Query)),
                            tuple(c for c in ch if isinstance(c, A.Require)))

    return ToAST


# Names of terminals as people read them.
_TOKEN_NAMES = {
    "NAME": "a name", "NUMBER": "a number", "UNIT": "a unit", "STRING": "a string",
    "_NL": "a new line", "SEMICOLON": "';'", "_LBRACE": "'{'", "_RBRACE": "'}'",
    "LPAR": "'('", "RPAR": "')'", "EQUAL": "'='", "PLUS": "'+'", "MINUS": "'-'",
    "STAR": "'*'", "SLASH": "'/'", "CIRCUMFLEX": "'^'", "COMMA": "','", "DOT": "'.'",
    "CMP": "a comparison (== <= >= < >)", "$END": "end of file", "FOR": "'for'",
    "IMPORT": "'import'", "AS": "'as'", "SOLVE": "'solve'", "USE": "'use'", "EXTENDS": "'extends'",
    "FROM": "'from'", "TRUE": "'true'", "FALSE": "'false'", "IN": "'in'", "SOURCE": "'source'",
    "REQUIRE": "'require'", "COLON": "':'", "LSQB": "'['", "RSQB": "']'",
}


def _describe_expected(expected) -> str:
    names = sorted({_TOKEN_NAMES.get(e, e) for e in expected if not e.startswith("__")})
    return ", ".join(names)


def _fragment_expected(expected, text: str, line: int, col: int, fragment: str) -> set:
    """The tokens that can really follow in a one-line fragment (a command-line query or value):
    the parser's state is shared with whole files, so its expected set also holds what only a
    file allows there (a new line, ';', '}', `in`, `source`), closing brackets that nothing
    opened, and a comparison where the fragment has one already or takes none."""
    import re

    before = split_lines(text)[line - 1][:col - 1] if text else ""
    before = re.sub(r'"(?:[^"\\]|\\.)*"', '""', before)
    opened = before.count("(") - before.count(")"), before.count("[") - before.count("]")
    drop = {"_NL", "SEMICOLON", "_RBRACE", "IN", "SOURCE"}
    if opened[0] <= 0:
        drop.add("RPAR")
    if opened[1] <= 0:
        drop.add("RSQB")
    if opened[0] <= 0 and opened[1] <= 0:
        drop.add("COMMA")
    if fragment == "value" or opened[0] > 0 or opened[1] > 0 or re.search(r"[<>]|==", before):
        drop.add("CMP")
    if fragment == "value" or re.search(r"\bfor\b", before):
        drop.add("FOR")
    kept = {e for e in expected if e not in drop}
    if fragment == "query" and not re.search(r"\bfor\b", before):
        kept &= {"DOT", "FOR", "NAME"}          # `TARGET for …`: the target is a dotted name
    return kept or set(expected)


def _syntax_diagnostic(file: str, text: str, err, fragment: str | None = None) -> Diagnostic:
    """A ``syntax`` diagnostic for Lark's error on ``text``.  ``fragment`` is ``"query"`` or
    ``"value"`` for a one-line text given on the command line: its end is "the end of the
    query" (or value), not of a file, and the expected tokens are those the fragment allows."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    line = getattr(err, "line", 1) or 1
    col = getattr(err, "column", 1) or 1
    hint = ""
    end = f"end of the {fragment}" if fragment else "end of file"
    if isinstance(err, UnexpectedToken):
        tok = err.token
        expected = err.expected
        if fragment and tok.type != "$END":
            expected = _fragment_expected(expected, text, line, col, fragment)
        elif fragment:
            lines = split_lines(text)
            expected = _fragment_expected(expected, text, len(lines), len(lines[-1]) + 1, fragment)
        described = _describe_expected(expected).replace("end of file", end)
        shown = end if tok.type == "$END" else repr(str(tok)).replace("\\n", "newline")
        if len(shown) > 60:
            shown = shown[:59] + "…"
        if tok.type == "$END":
            lines = split_lines(text)
            line, col = len(lines), len(lines[-1]) + 1
            summary = f"unexpected {end}; expected {described}"
            width = 1
        else:
            summary = f"unexpected {shown}; expected {described}"
            width = max(1, len(str(tok).rstrip("\n")))
        if tok.type == "NAME" and "UNIT" not in err.expected and _prev_is_number(text, line, col):
            hint = "a unit is written right after its number without spaces inside it (e.g. 32 GB/s)"
        elif tok.type in ("NAME", "UNIT") and _prev_is_prefixed_number(text, line, col):
            hint = ("a number carries one unit written without spaces; for a count with a prefix write "
                    f"the power of ten, e.g. 1e12 {tok} instead of 1T {tok}")
        elif "EQUAL" in err.expected:
            hint = "each member of a block is `name = value`"
        elif "_RBRACE" in err.expected and tok.type == "$END":
            hint = "a '{' is not closed"
        elif tok.type == "COMMA" and _prev_is_number(text, line, col):
            hint = "numbers are written without thousands separators (use 1_024 or 1024)"
        elif tok.type == "EQUAL" and "CMP" in err.expected:
            hint = "write == to compare"
    elif isinstance(err, UnexpectedCharacters):
        lines = split_lines(text)
        ch = lines[line - 1][col - 1:col] or "?" if line - 1 < len(lines) else "?"
        summary = f"unexpected character {ch!r}"
        if err.allowed:
            summary += f"; expected {_describe_expected(err.allowed)}"
        width = 1
        if ch == ",":
            hint = "numbers are written without thousands separators (use 1_024 or 1024)"
        elif ch in "'":
            hint = 'strings use double quotes: "like this"'
    elif isinstance(err, UnexpectedEOF):
        lines = split_lines(text)
        line, col = len(lines), len(lines[-1]) + 1
        summary = f"unexpected {end}; expected {_describe_expected(err.expected)}"
        width = 1
    else:  # pragma: no cover - defensive
        summary, width = str(err), 1
    related: tuple = ()
    opened = _unclosed_brace(text, line, col)
    if opened is not None and (not hint or hint == "each member of a block is `name = value`" or
                               hint == "a '{' is not closed"):
        ol, oc = opened
        hint = f"the '{{' opened at line {ol} may be missing its '}}'"
        related = (("'{' opened here", Span(file, ol, oc, ol, oc + 1)),)
    elif not hint and isinstance(err, UnexpectedToken) and err.token.type == "_NL":
        hint = "an expression must end on the line it starts (or continue it with a trailing '\\')"
    return Diagnostic("error", "syntax", summary, Span(file, line, col, line, col + width), hint, related)


_QUOTED_RE = None


def _code_only(text: str) -> str:
    """``text`` with its strings and comments (as the error hints read them) made spaces of the
    same length: lines and columns stay, and what is left of ``{``/``}`` is code.  A string runs
    from a ``"`` not preceded by a backslash to the next such ``"`` on the line (or the line's
    end); a comment from a ``#`` outside strings to the line's end.  One regular-expression
    pass (a character-by-character loop cost 1.3 s for 1 MB of text after an early error)."""
    global _QUOTED_RE
    if _QUOTED_RE is None:
        import re
        _QUOTED_RE = re.compile(r'(?<!\\)"[^"\n]*(?:(?<=\\)"[^"\n]*)*"?|#[^\n]*')
    if '"' not in text and "#" not in text:
        return text
    return _QUOTED_RE.sub(lambda m: " " * len(m.group()), text)


def _brace_balance(text: str) -> int:
    """Number of '{' minus number of '}' outside strings and comments."""
    code = _code_only(text)
    return code.count("{") - code.count("}")


def _unclosed_brace(text: str, line: int, col: int):
    """(line, column) of a '{' still open before an error that sits on a later line at the
    start of what looks like a new declaration (``NAME NAME``), else None."""
    import re

    if _brace_balance(text) <= 0:
        return None  # every '{' is closed somewhere: the error is something else
    lines = split_lines(text)
    before = lines[line - 1][: col - 1].split() if line - 1 < len(lines) else []
    if len(before) != 1 or not before[0].isidentifier():
        return None
    code = split_lines(_code_only(text))
    prefix = "\n".join(code[:line - 1] + [code[line - 1][:col - 1]] if line - 1 < len(code) else code)
    stack: list[int] = []
    for m in re.finditer(r"[{}]", prefix):
        if prefix[m.start()] == "{":
            stack.append(m.start())
        elif stack:
            stack.pop()
    if not stack:
        return None
    at = stack[-1]
    ol = prefix.count("\n", 0, at) + 1
    if ol >= line:
        return None
    return ol, at - (prefix.rfind("\n", 0, at) + 1) + 1


def _prev_is_prefixed_number(text: str, line: int, col: int) -> bool:
    """True when the text before the error ends like ``1T`` or ``2.5M`` (a bare SI prefix)."""
    import re

    lines = split_lines(text)
    if line - 1 >= len(lines):
        return False
    return bool(re.search(r"\d\s*[kKMGTPE]\s*$", lines[line - 1][: col - 1]))


def _prev_is_number(text: str, line: int, col: int) -> bool:
    lines = split_lines(text)
    if line - 1 >= len(lines):
        return False
    before = lines[line - 1][: col - 1].rstrip()
    return bool(before) and (before[-1].isdigit() or before[-1] == ".")


_EXPR_RULES = frozenset({"add", "sub", "mul", "div", "pow", "neg", "call", "list", "unary"})
_STMT_RULES = frozenset({"assign", "require_stmt", "query_rel", "expr_only", "range_clause"})
_NEST_RE = None


def _limit_error(file: str, line: int, col: int, summary: str, name: str) -> PlanError:
    from .limits import raise_hint
    return PlanError([Diagnostic("error", "limit", summary, Span(file, line, col, line, col + 1), raise_hint(name))])


_OPERAND_END = frozenset("_)]\"%.")
_ITEMS_RE = None
_KEYWORDS = frozenset({"for", "in", "require", "source", "solve", "import", "as", "extends", "from", "use"})
_FAMILY = {"add": "+", "sub": "+", "mul": "*", "div": "*", "neg": "-"}
_CHAIN_WORDS = {"+": "'+'/'-' terms", "*": "'*'/'/' factors", "-": "'-' signs"}


def _chain_error(file: str, line: int, col: int, family: str, limit: int) -> PlanError:
    """The expression-depth limit hit by a flat run of one operator: ``a + b + c …`` nests each
    term in the next (the grammar is left-associative), so a run longer than the depth limit
    is refused, with the remedy."""
    from .limits import raise_hint
    return PlanError([Diagnostic(
        "error", "limit", f"an expression chains more than {limit} {_CHAIN_WORDS[family]} in a row; each one "
        f"nests the rest one level deeper, and expressions nest at most {limit} deep",
        Span(file, line, col, line, col + 1),
        ("a sign repeated is a sign at most once: remove the repeats; or " if family == "-" else
         f"write it as parenthesized groups each shorter than the limit, `(a {family} b {family} …) {family} "
         f"(c {family} d {family} …)` (a '{'-' if family == '+' else '/'}' before a group applies to all of it); "
         "or ") + raise_hint("expr_depth"))])


def check_text_limits(text: str, file: str) -> None:
    """Refuse, before parsing, a text above the size limit, with brackets nested deeper than the
    expression-depth limit, with a list longer than the list limit, with a run of one operator
    (``1 + 1 + …``, ``1*1*…``, ``- - 1``) longer than the depth limit, with more operators
    in one statement than the expression-size limit, or with more assignments in one
    declaration (or `use` block) than the fields limit.

    One regular-expression pass over the text, with memory bounded by the bracket depth: a
    hostile file is refused in well under a second instead of after Lark has built a tree of
    millions of nodes (a 900,000-item list took 35 s and 690 MB; a declaration of 100,000 fields
    on one line followed by a syntax error, 7–10 s).  The counts are lower bounds of what
    :func:`check_tree_limits` measures on the tree (a ``/`` or ``*`` that may be inside a unit
    such as ``GB/s`` and a ``-`` after ``^`` are not counted; of a body's members only the
    assignments, one ``=`` each, are), so a text that passes here may still be refused there,
    never the reverse.  A run of separators (``;;;``, newlines) is one match, so the scan costs
    one regular-expression match per bracket, operator or statement.

    :raises PlanError: one ``limit`` diagnostic."""
    global _NEST_RE, _ITEMS_RE
    import re

    from .limits import current
    lim = current()
    if len(text) > lim.file_mb * 1024 * 1024:
        raise _limit_error(file, 1, 1, f"the text is {len(text) / 2**20:.1f} MiB, above the limit of "
                           f"{lim.file_mb:g} MiB", "file_mb")
    if _NEST_RE is None:
        _ITEMS_RE = re.compile(r'[^\[\]()"#+*/=<>:;{}\\-]*')   # list items without operators or brackets
        _NEST_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*'
                              r'|(?<![A-Za-z0-9_.])(?:[0-9][0-9_]*(?:\.[0-9]*)?|\.[0-9]+)[eE][+-]'   # 1e-5
                              r'|\\[\t ]*\r?\n|[\n;][\n;\t \f]*|[(\[\]),{}=<>:+*/-]')
    max_depth, max_items, max_size = lim.expr_depth, lim.list_items, lim.expr_size
    max_fields = lim.fields

    def at(i):                  # (line, column) of position i (counted only when reporting)
        return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1

    # one frame per open bracket (frame 0: the statement): [bracket, its position, (unused),
    # commas, position after the last comma, run of +/-, run of * and /, run of signs,
    # position where the runs started]
    frames = [["", 0, 0, 0, 0, 0, 0, 0, 0]]
    # one entry per open '{': [its position, assignments ('=' outside brackets) directly inside it]
    braces: list[list[int]] = []
    size, pos, search, items_run = 0, 0, _NEST_RE.search, _ITEMS_RE.match
    while True:
        m = search(text, pos)
        if m is None:
            break
        i, pos = m.start(), m.end()
        c = text[i]
        if c == '"' or c == "#" or c.isdigit() or c == ".":
            continue
        if c == "\\":
            continue
        f = frames[-1]
        if c == "\n" or c == ";":          # a run of separators (newlines, ';'): one match
            if len(frames) == 1:
                f[5] = f[6] = f[7] = size = 0
                f[8] = pos
            elif text.find(";", i, pos) >= 0:     # ';' inside brackets (a syntax error)
                f[5] = f[6] = f[7] = 0
                f[8] = pos
            continue
        if c in "([":
            if len(frames) > max_depth:
                raise _limit_error(file, *at(i), f"brackets are nested more than {max_depth} deep", "expr_depth")
            if c == "[" and text[max(0, i - 4):i].rstrip(" \t\f").endswith("in"):
                c = "r"         # `in [lo, hi]`: a range, not a list
            frames.append([c, i, 0, 0, i + 1, 0, 0, 0, i + 1])
            f[7] = 0
            continue
        if c in ")]":
            if len(frames) > 1:
                frames.pop()
                if f[0] == "[" and f[3] >= max_items:
                    tail = re.sub(r"#[^\n]*", "", text[f[4]:i]).strip()
                    items = f[3] + (1 if tail else 0)
                    if items > max_items:
                        raise _limit_error(file, *at(f[1]), f"a list has {items} items, above the limit of "
                                           f"{max_items}", "list_items")
            continue
        if c in ",=<>:{}":
            if c == ",":
                f[3] += 1
                f[4] = i + 1
                if f[0] == "[":           # plain items (numbers, names, units) up to the next comma: at C speed
                    end = items_run(text, pos).end()
                    n = text.count(",", pos, end)
                    if n:
                        f[3] += n
                        f[4] = text.rfind(",", pos, end) + 1
                    pos = end
            elif c == "=" and len(frames) == 1 and braces and text[i - 1] not in "=<>" \
                    and text[i + 1:i + 2] != "=":
                b = braces[-1]        # an assignment (an EQUAL token: not part of ==, <=, >=)
                b[1] += 1
                if b[1] > max_fields:
                    raise _limit_error(file, *at(b[0]), f"a declaration has more than {max_fields} members, "
                                       f"above the limit of {max_fields} fields", "fields")
            elif c == "{":
                braces.append([i, 0])
            elif c == "}" and braces:
                braces.pop()
            f[5] = f[6] = f[7] = 0
            f[8] = i + 1
            if len(frames) == 1 and c in ";{}":
                size = 0
            continue
        # an operator: + - * /
        j = i - 1
        while j >= 0 and text[j] in " \t\f":
            j -= 1
        prev = text[j] if j >= 0 else "\n"
        if prev == "^":
            continue            # an exponent's sign (2^-1, s^-1): not counted
        after_operand = prev.isalnum() or prev in _OPERAND_END
        if after_operand and prev.isalpha() and f[5] == 0:      # `for -x`, `require -x`: a sign
            w = j
            while w >= 0 and (text[w].isalnum() or text[w] == "_"):
                w -= 1
            after_operand = text[w + 1:j + 1] not in _KEYWORDS
        if c in "*/":
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if j == i - 1 and (prev.isalnum() or prev in "_%µ") and (nxt.isalpha() or nxt == "µ"):
                continue        # perhaps inside a unit (GB/s, GiB*s): not counted
            f[6] += 1
            f[7] = 0
            family, run = "*", f[6]
        elif after_operand:     # binary + or -
            f[5] += 1
            f[6] = f[7] = 0
            family, run = "+", f[5]
        elif c == "+":
            continue            # a '+' sign adds no node
        else:                   # a '-' sign
            f[7] += 1
            family, run = "-", f[7]
        size += 1
        if run > max_depth:
            k = f[8]
            while k < i and text[k] in " \t\f\r\n":
                k += 1
            raise _chain_error(file, *at(k), family, max_depth)
        if size > max_size:
            raise _limit_error(file, *at(i), f"an expression has more than {max_size} terms", "expr_size")


_SEP_RUN_RE = _SEP_PAIR_RE = None


def _quiet_separators(text: str) -> str:
    """``text`` with every ``;`` of a run of separators but the first replaced by a space (a
    run: ``;`` and newlines, with blanks between): the text Lark is given.

    The grammar's only use of ``;`` is ``_sep: (_NL | ";")+``, so once the first ``;`` of a run
    is accepted the rest are too, and the parser's state after the run is the same with or
    without them; a ``;`` the grammar refuses is the first of its run, and stays.  Lines,
    columns, the tree and every error are therefore unchanged, but a file of a million ``;``
    is one token instead of a million (Lark handles each token in Python, ≈5–10 µs: 10 s
    for 1 MB of ``;``).  Strings and comments are left alone."""
    global _SEP_RUN_RE, _SEP_PAIR_RE
    if ";" not in text:
        return text
    if _SEP_RUN_RE is None:
        import re
        _SEP_RUN_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|;[;\t \f\r\n]*;')
        _SEP_PAIR_RE = re.compile(r';[\t \f\r\n]*;')
    if _SEP_PAIR_RE.search(text) is None:      # no run anywhere (the usual file): nothing to do
        return text

    def quiet(m) -> str:
        run = m.group()
        return run if run[0] != ";" else ";" + run[1:].replace(";", " ")
    return _SEP_RUN_RE.sub(quiet, text)


def check_tree_limits(tree, file: str) -> None:
    """Refuse a parse tree whose expressions are nested deeper than the expression-depth
    limit, or larger than the expression-size limit, a list longer than the list limit, or a
    declaration with more members than the fields limit (iterative: any depth is safe).

    :raises PlanError: one ``limit`` diagnostic at the first offending place."""
    from lark import Tree

    from .limits import current
    lim = current()
    # (node, expression depth, [size] of the enclosing statement, operator family of the run of
    # one operator the node continues, length of that run)
    stack = [(tree, 0, None, None, 0)]
    while stack:
        t, depth, size, family, run = stack.pop()
        if not isinstance(t, Tree):
            continue
        rule = t.data
        meta = t.meta
        where = (getattr(meta, "line", 1) or 1, getattr(meta, "column", 1) or 1)
        if rule in _STMT_RULES and size is None:
            size = [0]
        fam = _FAMILY.get(rule)
        run = run + 1 if fam is not None and fam == family else (1 if fam is not None else 0)
        if rule in _EXPR_RULES:
            depth += 1
            if depth > lim.expr_depth:
                if 2 * run > depth:     # mostly a flat run (1 + 1 + …), not nesting the user wrote
                    raise _chain_error(file, *where, fam, lim.expr_depth)
                raise _limit_error(file, *where, f"an expression is nested more than {lim.expr_depth} deep "
                                   "(operators, calls, signs and lists inside each other)", "expr_depth")
        if size is not None:
            size[0] += 1
            if size[0] > lim.expr_size:
                raise _limit_error(file, *where, f"an expression has more than {lim.expr_size} terms", "expr_size")
        if rule == "list" and len(t.children) > lim.list_items:
            raise _limit_error(file, *where, f"a list has {len(t.children)} items, above the limit of "
                               f"{lim.list_items}", "list_items")
        if rule == "body" and len(t.children) > lim.fields:
            raise _limit_error(file, *where, f"a declaration has {len(t.children)} members, above the limit of "
                               f"{lim.fields} fields", "fields")
        for c in t.children:
            if isinstance(c, Tree):
                stack.append((c, depth, size, fam, run))


def parse(text: str, file: str = "<string>") -> A.Module:
    """Parse ``text`` into a :class:`~dsl.syntax.ast.Module`.

    A file parsed before with the same text, grammar, parser code and limits is read back
    from the on-disk AST cache (:func:`_ast_cache_get`) instead of being parsed again.

    :raises PlanError: with one ``syntax`` diagnostic on malformed input.
    """
    remember_source(file, text)
    if not text.endswith("\n"):
        text += "\n"
    check_text_limits(text, file)
    key = _ast_key("file", file, text)
    mod = _ast_cache_get(key)
    if mod is not None:
        return mod
    from lark.exceptions import LarkError, UnexpectedInput
    try:
        tree = _parser().parse(_quiet_separators(text), start="start")
    except UnexpectedInput as e:
        raise PlanError([_syntax_diagnostic(file, text, e)]) from None
    except LarkError as e:  # pragma: no cover - defensive
        raise PlanError([Diagnostic("error", "syntax", str(e), Span(file, 1, 1, 1, 2))]) from None
    check_tree_limits(tree, file)
    mod = _make_transformer(file).transform(tree)
    _ast_cache_put(key, mod)
    return mod


# ------------------------------------------------------------------ on-disk AST cache
#
# Parsing is pure Python (≈1 ms per 1,000 characters, plus ≈40 ms to import lark and load the
# parser tables once per process); the catalog a plan imports is the same text run after run.
# An AST (frozen dataclasses of strings, numbers and spans) is stored per parsed file name,
# pickled with the digest of everything it depends on: the text, the file name (spans carry
# it), the grammar, the code of this module and of the AST classes, lark's version, Python's
# version and the limits checked on the tree.  A different digest is a miss, so an edited
# file, grammar or parser is parsed again, never served stale; the entry is then replaced.
# Defaults of plugin parameters (many tiny expressions) share one entry.  The directory is
# :func:`cache_dir` ``/ast``, pruned to the most recently written entries (looked at on one
# write in eight); an unreadable or unwritable cache only costs the parse.

_AST_CACHE_ENTRIES = 512
_PRUNE_DIGITS = "01"        # the size is looked at when a digest starts with one of these
_expr_cache: dict | None = None
_expr_cache_pending = False         # a new entry waits for the write at exit


@lru_cache(maxsize=None)
def _code_digest() -> str:
    """Digest of what an AST depends on besides the text, the file name and the limits."""
    import hashlib
    import importlib.util
    import sys

    h = hashlib.sha256(repr(sys.version_info[:2]).encode())
    h.update(grammar_path().read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(Path(A.__file__).read_bytes())
    spec = importlib.util.find_spec("lark")
    if spec is not None and spec.origin:
        h.update(Path(spec.origin).read_bytes())        # carries lark's __version__
    return h.hexdigest()


def _ast_key(kind: str, file: str, text: str) -> tuple[str, str]:
    """``(entry name, digest)`` of one parse."""
    import hashlib

    from .limits import current
    lim = current()
    code = _code_digest()
    name = hashlib.sha256(f"{code}\0{kind}\0{file}".encode()).hexdigest()[:32]
    digest = hashlib.sha256(f"{code}\0{kind}\0{file}\0{lim.expr_depth},{lim.expr_size},{lim.list_items},"
                            f"{lim.fields}\0{text}".encode()).hexdigest()
    return name, digest


def _ast_dir() -> Path | None:
    """The AST cache's directory, or None when the cache is off or not trusted (:func:`_trusted`)."""
    d = cache_dir()
    if d is None or not _trusted(d) or not _trusted(d / "ast"):
        return None
    return d / "ast"


def _ast_cache_get(key: tuple[str, str]):
    """The cached AST of ``key`` (see :func:`_ast_key`), or None."""
    import pickle

    d = _ast_dir()
    if d is None:
        return None
    try:
        data = (d / key[0]).read_bytes()
        digest, obj = pickle.loads(data)
    except TimeoutError:    # the CPU-time safety net fired: not the cache's failure
        raise
    except Exception:       # absent, unreadable, truncated or from another version: a miss
        return None
    return obj if digest == key[1] else None


def _ast_cache_put(key: tuple[str, str], obj) -> None:
    """Store ``obj`` under ``key`` (atomically: a concurrent reader sees the old or new entry)."""
    import os
    import pickle

    d = _ast_dir()
    if d is None:
        return
    try:
        tmp = d / f".{key[0]}.{os.getpid()}.tmp"
        tmp.write_bytes(pickle.dumps((key[1], obj), protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, d / key[0])
        if key[1][0] in _PRUNE_DIGITS:      # one write in eight (digests are uniform)
            entries = [e for e in os.scandir(d) if not e.name.startswith(".")]
            if len(entries) > _AST_CACHE_ENTRIES:      # keep the most recently written half
                entries.sort(key=lambda e: e.stat().st_mtime)
                for e in entries[:len(entries) - _AST_CACHE_ENTRIES // 2]:
                    os.unlink(e.path)
    except TimeoutError:    # the CPU-time safety net fired: not the cache's failure
        raise
    except Exception:       # read-only home, a full disk, a concurrent prune: no cache
        pass


@lru_cache(maxsize=None)
def _comment_parser():
    """A second parser whose lexer hands every (ignored) COMMENT token to a collector."""
    from lark import Lark

    sink: list = []

    def collect(tok):
        sink.append((tok.line, tok.column, str(tok)))
        return tok
    lark = Lark(grammar_path().read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=True, start=["start"], maybe_placeholders=True,
                lexer_callbacks={"COMMENT": collect})
    return lark, sink


def parse_with_comments(text: str, file: str = "<string>") -> tuple[A.Module, list[tuple[int, int, str]]]:
    """Parse ``text`` and also return its comments as ``(line, column, text)`` (for `plan fmt`).

    :raises PlanError: with one ``syntax`` diagnostic on malformed input.
    """
    from lark.exceptions import UnexpectedInput

    remember_source(file, text)
    if not text.endswith("\n"):
        text += "\n"
    check_text_limits(text, file)
    lark, sink = _comment_parser()
    sink.clear()
    try:
        tree = lark.parse(_quiet_separators(text), start="start")
    except UnexpectedInput as e:
        sink.clear()
        raise PlanError([_syntax_diagnostic(file, text, e)]) from None
    check_tree_limits(tree, file)
    comments = sorted(set(sink))
    sink.clear()
    return _make_transformer(file).transform(tree), comments


def parse_query(text: str, file: str = "<query>") -> A.Query:
    """Parse a command-line query ``TARGET for LHS op RHS``.

    :raises PlanError: with a ``syntax`` diagnostic on malformed input.
    """
    from lark.exceptions import UnexpectedInput

    remember_source(file, text)
    check_text_limits(text, file)
    try:
        tree = _parser().parse(text.strip(), start="query")
    except UnexpectedInput as e:
        raise PlanError([_syntax_diagnostic(file, text, e, "query")]) from None
    check_tree_limits(tree, file)
    return _make_transformer(file).transform(tree)


def _save_expr_cache() -> None:
    """Write the plugin defaults' parsed expressions at exit, merged with the entry on disk (a
    run of another plan may have added others meanwhile)."""
    key = _ast_key("defaults", "", "")
    merged = dict(_ast_cache_get(key) or {})
    merged.update(_expr_cache or {})
    _ast_cache_put(key, merged)


@lru_cache(maxsize=None)
def parse_expression(text: str, file: str = "<expr>"):
    """Parse one expression (used for plugin parameter defaults).

    Expressions of files named ``<default of …>`` (plugin defaults: the same few dozen texts
    in every run) are kept in one entry of the on-disk AST cache."""
    global _expr_cache, _expr_cache_pending
    remember_source(file, text)
    check_text_limits(text, file)
    shared = file.startswith("<default of ")
    if shared:
        key = _ast_key("expr", file, text)
        if _expr_cache is None:
            _expr_cache = _ast_cache_get(_ast_key("defaults", "", "")) or {}
        hit = _expr_cache.get(key)
        if hit is not None:
            return hit
    from lark.exceptions import UnexpectedInput
    try:
        tree = _parser().parse(text, start="expr_only")
    except UnexpectedInput as e:
        raise PlanError([_syntax_diagnostic(file, text, e, None if file.startswith("<default of ") else "value")]) \
            from None
    check_tree_limits(tree, file)
    out = _make_transformer(file).transform(tree)
    if shared:
        if not _expr_cache_pending:         # written once, when the process ends, with what it added
            import atexit
            atexit.register(_save_expr_cache)
            _expr_cache_pending = True
        _expr_cache[key] = out
    return out
