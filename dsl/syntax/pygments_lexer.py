"""Pygments lexer for `.plan` files.

Registered through the ``pygments.lexers`` entry point (pyproject.toml), so with Pygments
installed ``pygmentize -l plan FILE``, Sphinx/MkDocs code blocks tagged ``plan`` and any
tool using ``pygments.lexers.get_lexer_for_filename("x.plan")`` highlight the language.
Pygments is optional: nothing in the core imports this module.

Tokens follow ``grammar.lark``: keywords (``import``, ``extends``, ``from``, ``use``,
``solve``, ``for``, ``require``, ``in``, ``source``, ``true``/``false``), a declaration's kind
and name, numbers with their unit (``32 GB/s``), strings, comments, comparison and arithmetic
operators, built-in functions (``min``, ``max``, ``ceil`` …).
"""
from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace

__all__ = ["PlanLexer"]

_UNIT = r"(?:[A-Za-zµ][A-Za-z0-9_µ]*(?:\^-?\d+)?|%)(?:[/*·][A-Za-zµ][A-Za-z0-9_µ]*(?:\^-?\d+)?)*"
_NUM = r"(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


class PlanLexer(RegexLexer):
    """Lexer for the `.plan` modelling language."""

    name = "plan"
    aliases = ["plan"]
    filenames = ["*.plan"]
    mimetypes = ["text/x-plan"]
    url = "https://github.com/"  # the project's repository

    tokens = {
        "root": [
            (r"[ \t\f]+", Whitespace),
            (r"\n", Whitespace),
            (r"#[^\n]*", Comment.Single),
            (r'"(?:[^"\\\n]|\\.)*"', String.Double),
            (r"(require)(\s+)([A-Za-z_][A-Za-z0-9_]*)(\s*)(:)",
             bygroups(Keyword, Whitespace, Name.Label, Whitespace, Punctuation)),
            (words(("import", "extends", "from", "use", "solve", "for", "require", "in", "source"),
                   suffix=r"\b"), Keyword),
            (words(("true", "false"), suffix=r"\b"), Keyword.Constant),
            (r"(" + _NUM + r")([ \t]*)(?!(?:in|source)\b)(" + _UNIT + r")",
             bygroups(Number, Whitespace, Keyword.Type)),
            (_NUM, Number),
            (words(("min", "max", "ceil", "floor", "sqrt", "log", "exp", "abs"), suffix=r"(?=\s*\()"),
             Name.Builtin),
            (r"^([ \t]*)([A-Za-z_][A-Za-z0-9_]*)([ \t]+)([A-Za-z_][A-Za-z0-9_]*)(?=[ \t]*(?:\{|extends|from|$))",
             bygroups(Whitespace, Keyword.Declaration, Whitespace, Name.Class)),
            (r"[A-Za-z_][A-Za-z0-9_]*(?=\s*=(?!=))", Name.Attribute),
            (r"[A-Za-z_][A-Za-z0-9_]*", Name),
            (r"==|<=|>=|<|>", Operator),
            (r"[-+*/^=]", Operator),
            (r"[{}()\[\],;:.]", Punctuation),
            (r"\\\n", Text),
        ],
    }
