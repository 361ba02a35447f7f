"""Real-time audio event model (book ch. 3 §3.3.3, figs. 3-19, 3-20, exercise 3-5) from
specs/cases/audio-realtime.plan."""
from __future__ import annotations

import pytest

import dsl
from conftest import CASES, qval
from dsl.results.solver import solve_query

CASE = CASES / "audio-realtime.plan"


@pytest.fixture(scope="module")
def ws():
    return dsl.load(CASE)


def test_chunk_bytes(ws):
    assert qval(ws, "buffer40.chunk_bytes", "B") == 24_000 * 0.020 * 1 * 2 == 960


def test_buffer_40ms_stalls(ws):
    # first arrival 20 + 12 + 1 + 5 = 38 ms; playback 38 + 40 = 78 ms; chunk 3 arrives 60+12+1+50 = 123 ms
    # after its slot 78 + 2*20 = 118 ms -> 5 ms stall
    assert qval(ws, "buffer40.first_arrival", "ms") == pytest.approx(38, abs=0.5)
    assert qval(ws, "buffer40.playback_start", "ms") == pytest.approx(78, abs=0.5)
    assert qval(ws, "buffer40.stall_time", "ms") == pytest.approx(5, abs=0.5)
    tl = ws.timelines[("buffer40", "audio")]
    i = tl.schedule.index()
    assert tl.schedule.finish[i["net2"]] * 1e3 == pytest.approx(123, abs=0.5)
    assert tl.schedule.start[i["play2"]] * 1e3 == pytest.approx(123, abs=0.5)


def test_buffer_60ms_no_stall(ws):
    assert qval(ws, "buffer60.playback_start", "ms") == pytest.approx(98, abs=0.5)
    assert qval(ws, "buffer60.stall_time", "ms") == pytest.approx(0, abs=0.5)


def test_interrupt_mutes_at_130ms(ws):
    # command at 123 ms + 5 ms control -> 128 ms; next 10 ms poll -> 130 ms; 7 ms latency
    assert qval(ws, "buffer40.mute_time", "ms") == pytest.approx(130, abs=0.5)
    assert qval(ws, "buffer40.interrupt_latency", "ms") == pytest.approx(7, abs=0.5)


def test_drain(ws):
    # 0.9x real time with 0.3 s banked: 0.3 / (1 - 0.9) = 3 s
    assert qval(ws, "buffer40.dry_after", "s") == pytest.approx(3, abs=0.5)


def test_smallest_buffer_without_stall(ws):
    # the late chunk arrives 5 ms after its slot: 40 + 5 = 45 ms
    s = solve_query(ws, ws.queries[0])
    assert s.value * 1e3 == pytest.approx(45, abs=0.5)


def test_delays_length_error(write_plan, run_cli):
    p = write_plan('plan p { use audio_stream { chunks = 3; delays = [5 ms, 5 ms] } }\n')
    code, out, err = run_cli("eval", p)
    assert code == 1
    assert "`delays` has 2 items but chunks = 3" in err and "t.plan:1:" in err


def test_audio_figure(tmp_path, run_cli):
    code, out, err = run_cli("figure", CASE, "--plan", "buffer40", "--name", "audio", "-o", tmp_path)
    assert code == 0, err
    svg = (tmp_path / "buffer40-audio.svg").read_text()
    assert svg.startswith("<?xml")
