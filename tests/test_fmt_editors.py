"""Editor support (issue 12 item 10): the Pygments lexer registered by entry point and the
TextMate grammar under editors/."""
from __future__ import annotations

import json
import re

import pytest

from conftest import REPO_ROOT

CASE = REPO_ROOT / "specs" / "cases" / "cpt-qwen3-8b-4090.plan"
SAMPLE = ('plan p extends q {\n  mfu = 40 % in [30 %, 50 %] source "Llama 3"  # note\n'
          '  x = 2 in [0, 5]\n  require fits: a.b <= max(c, 2 GB/s)\n  use zero { stage = 3 }\n}\n'
          'solve p.mfu for p.finish_time == w.deadline\n')


def test_pygments_lexer_is_registered():
    pytest.importorskip("pygments")
    from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
    assert type(get_lexer_for_filename("x.plan")).__name__ == "PlanLexer"
    assert type(get_lexer_by_name("plan")).__name__ == "PlanLexer"


def test_pygments_tokens():
    pytest.importorskip("pygments")
    from dsl.syntax.pygments_lexer import PlanLexer
    toks = [(str(t), v) for t, v in PlanLexer().get_tokens(SAMPLE) if v.strip()]
    assert ("Token.Keyword.Declaration", "plan") in toks and ("Token.Name.Class", "p") in toks
    assert ("Token.Keyword.Type", "%") in toks and ("Token.Keyword.Type", "GB/s") in toks
    assert ("Token.Keyword", "in") in toks and ("Token.Keyword", "source") in toks
    assert ("Token.Name.Label", "fits") in toks and ("Token.Name.Builtin", "max") in toks
    assert ("Token.Comment.Single", "# note") in toks
    # `2 in [0, 5]`: `in` is the keyword, not a unit
    i = toks.index(("Token.Literal.Number", "2"))
    assert toks[i + 1] == ("Token.Keyword", "in")
    # the design case lexes without error tokens and round-trips
    text = CASE.read_text()
    out = list(PlanLexer().get_tokens(text))
    assert not [v for t, v in out if "Error" in str(t)]
    assert "".join(v for _, v in out) == text


def test_textmate_grammar():
    g = json.loads((REPO_ROOT / "editors" / "textmate" / "plan.tmLanguage.json").read_text())
    assert g["scopeName"] == "source.plan" and g["fileTypes"] == ["plan"]
    for key in [p["include"][1:] for p in g["patterns"]]:
        assert key in g["repository"]
    rx = {k: v for k, v in g["repository"].items() if "match" in v}
    # Oniguruma patterns used here are also valid Python regexes
    assert re.search(rx["quantity"]["match"], "32 GB/s").group(2) == "GB/s"
    assert re.search(rx["quantity"]["match"], "2 in [0, 5]").group(2) is None
    assert re.search(rx["declaration"]["match"], "plan gpus48 extends base {").group(2) == "gpus48"
    assert re.search(rx["require"]["match"], "  require fits: a <= b").group(2) == "fits"
    kw = g["repository"]["keyword"]["patterns"][0]["match"]
    assert all(re.search(kw, k) for k in ("import", "use", "solve", "require", "source", "in"))
