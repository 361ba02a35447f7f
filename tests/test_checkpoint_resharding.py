"""Re-sharding by global coordinates (book §10.4.2, figure 10-31, footnote 17):
specs/cases/checkpoint-resharding.plan and :func:`plugins.reliability.resharding.reshard`."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval, run_cli
from plugins.reliability.resharding import reshard

FILE = CASES / "checkpoint-resharding.plan"
MiB = 2 ** 20


@pytest.fixture(scope="module")
def ws():
    return dsl.load(FILE)


def test_sizes(ws):
    # [12288, 4096] BF16 = 96 MiB; TP 4: 24 MiB a shard; TP 8: 12 MiB; full state 96 × 7 = 672 MiB
    assert qval(ws, "gate_tp4_to_tp8.tensor_bytes", "MiB") == 96
    assert qval(ws, "gate_tp4_to_tp8.old_shard_bytes", "MiB") == 24
    assert qval(ws, "gate_tp4_to_tp8.new_shard_bytes", "MiB") == 12
    assert qval(ws, "gate_tp4_to_tp8.tensor_state_bytes", "MiB") == 672


def test_new_rank_reads_half_of_old_shard():
    """New rank r reads old shard ⌊r/2⌋: the first half (rows 0-1535 of it) for even r, the
    second (1536-3071) for odd r; 12 MiB contiguous, at byte offset 0 or 12 MiB."""
    pieces = reshard((12288, 4096), 4, 8, dim=0, element=2)
    assert len(pieces) == 8
    for r, p in enumerate(pieces):
        assert (p.new, p.old) == (r, r // 2)
        assert (p.local_lo, p.local_hi) == ((0, 1536) if r % 2 == 0 else (1536, 3072))
        assert (p.lo, p.hi) == (1536 * r, 1536 * (r + 1))
        assert p.offset == (0 if r % 2 == 0 else 12 * MiB) and p.bytes == 12 * MiB and p.segments == 1


def test_table_in_eval(ws):
    code, out, err = run_cli("eval", FILE, "--format", "json")
    assert code == 0, err
    import json
    t = json.loads(out)["plans"]["gate_tp4_to_tp8"]["tables"]["resharding"]
    assert [row[:2] for row in t["rows"]] == [[r, r // 2] for r in range(8)]
    assert t["rows"][3][2] == "[4608, 6144)" and t["rows"][3][3] == "[1536, 3072)"


@pytest.mark.parametrize("shape,old,new,dim", [((12288, 4096), 3, 4, 0), ((12288, 4096), 4, 8, 1),
                                               ((10, 7, 3), 3, 2, 1), ((13,), 5, 3, 0)])
def test_pieces_cover_every_element_once(shape, old, new, dim):
    pieces = reshard(shape, old, new, dim, element=4)
    size = shape[dim]
    owner = [None] * size
    for p in pieces:
        for i in range(p.lo, p.hi):
            assert owner[i] is None
            owner[i] = p.new
    assert None not in owner and owner == sorted(owner)
    total = 4
    for d in shape:
        total *= d
    assert sum(p.bytes for p in pieces) == total


def test_column_split_is_strided():
    p = reshard((12288, 4096), 4, 8, dim=1, element=2)[1]
    # new rank 1: columns 512-1023 of old shard 0 (1,024 columns): 12,288 segments of 1 KiB
    assert (p.old, p.local_lo, p.local_hi) == (0, 512, 1024)
    assert (p.segments, p.length, p.stride, p.offset) == (12288, 1024, 2048, 1024)


def test_bad_dim_is_an_error(write_plan):
    f = write_plan("plan p {\n  use resharding { shape = [8, 4]; old_tp = 2; new_tp = 4; dim = 2 }\n}\n")
    code, out, err = run_cli("eval", f)
    assert code == 1 and "Traceback" not in err
    assert "dim = 2 is outside the 2-dimensional shape [8, 4]" in err and "hint:" in err


def test_too_many_shards_is_an_error(write_plan):
    f = write_plan("plan p {\n  use resharding { shape = [8, 4]; old_tp = 2; new_tp = 16 }\n}\n")
    code, out, err = run_cli("eval", f)
    assert code == 1 and "new_tp = 16 shards exceed the 8 indices of dimension 0" in err
