"""The on-disk AST cache of the parser (dsl/syntax/parser.py): a hit is the AST a parse would
give, an edit / a limit / a syntax error is never served from it, a damaged entry is a miss."""
from __future__ import annotations

import pytest

from dsl.syntax import limits
from dsl.syntax import parser as P
from dsl.syntax.diagnostics import PlanError

TEXT = """plan p {
  a = 3 s
  b = (a + 2 s) * 4
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_CACHE_DIR", str(tmp_path))
    return tmp_path / "ast"


def _fresh(text, file):
    """The AST with no cache at all."""
    import os
    old = os.environ.get("PLAN_CACHE_DIR")
    os.environ["PLAN_CACHE_DIR"] = ""
    try:
        return P.parse(text, file)
    finally:
        os.environ["PLAN_CACHE_DIR"] = old


def test_a_hit_is_the_parsed_ast(cache):
    first = P.parse(TEXT, "x.plan")
    assert len(list(cache.iterdir())) == 1
    second = P.parse(TEXT, "x.plan")
    assert second is not first                  # read back from disk
    assert second == first == _fresh(TEXT, "x.plan")
    assert second.decls[0].assigns[1].span.file == "x.plan"


def test_an_edit_is_parsed_again(cache):
    P.parse(TEXT, "x.plan")
    edited = TEXT.replace("4", "5")
    got = P.parse(edited, "x.plan")
    assert got == _fresh(edited, "x.plan") != _fresh(TEXT, "x.plan")
    assert len(list(cache.iterdir())) == 1      # the file's entry was replaced


def test_same_text_under_another_name_has_its_own_spans(cache):
    a = P.parse(TEXT, "a.plan")
    b = P.parse(TEXT, "b.plan")
    assert a.file == "a.plan" and b.file == "b.plan"
    assert b.decls[0].span.file == "b.plan"


def test_limits_are_checked_on_a_hit(cache):
    deep = "plan p {\n  a = " + "(" * 30 + "1" + ")" * 30 + "\n}\n"
    P.parse(deep, "d.plan")
    with limits.override(expr_depth=10):
        with pytest.raises(PlanError) as e:
            P.parse(deep, "d.plan")
    assert e.value.diagnostics[0].code == "limit"


def test_syntax_errors_are_not_cached(cache):
    bad = "plan p {\n  a = = 1\n}\n"
    for _ in range(2):
        with pytest.raises(PlanError) as e:
            P.parse(bad, "bad.plan")
        assert e.value.diagnostics[0].code == "syntax"
    assert not cache.exists() or not list(cache.iterdir())


def test_a_damaged_entry_is_a_miss(cache):
    P.parse(TEXT, "x.plan")
    (entry,) = cache.iterdir()
    entry.write_bytes(b"not a pickle")
    assert P.parse(TEXT, "x.plan") == _fresh(TEXT, "x.plan")


def test_the_cache_is_pruned(cache, monkeypatch):
    monkeypatch.setattr(P, "_AST_CACHE_ENTRIES", 8)
    monkeypatch.setattr(P, "_PRUNE_DIGITS", "0123456789abcdef")     # look at every write
    for i in range(12):
        P.parse(TEXT, f"f{i}.plan")
    assert 4 <= len(list(cache.iterdir())) <= 8


def test_no_cache_directory_no_files(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_CACHE_DIR", "")
    assert P.parse(TEXT, "x.plan") == _fresh(TEXT, "x.plan")
    assert not list(tmp_path.iterdir())


def test_a_cache_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    """Entries are pickles: a directory another user can write (a shared XDG_CACHE_HOME), or a
    symbolic link, turns the cache off — nothing is read from it or written to it."""
    import os
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("PLAN_CACHE_DIR", str(shared))
    assert P.parse(TEXT, "x.plan") == _fresh(TEXT, "x.plan")
    assert list(shared.iterdir()) == []
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(own, target_is_directory=True)
    monkeypatch.setenv("PLAN_CACHE_DIR", str(link))
    P.parse(TEXT, "y.plan")
    assert list(own.iterdir()) == []
    monkeypatch.setenv("PLAN_CACHE_DIR", str(own))      # the same directory by its own name
    P.parse(TEXT, "y.plan")
    assert [p.name for p in own.iterdir()] == ["ast"] and len(list((own / "ast").iterdir())) == 1
