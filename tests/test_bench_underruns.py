"""The bench client's listener: underruns counted against synthetic streams (bench/load.py ``underruns``,
bench/report.py ``underrun_summary``)."""

from __future__ import annotations

import pytest

from bench.load import JobRecord, PlannedJob, underruns
from bench.report import summarize


def test_a_stream_ahead_of_its_listener_never_runs_dry() -> None:
    # 1 s of audio every 0.5 s: always ahead
    assert underruns([(100.0 + 0.5 * i, 1.0) for i in range(10)]) == (0, 0.0)
    assert underruns([]) == (0, 0.0)
    assert underruns([(5.0, 0.3)]) == (0, 0.0)


def test_a_gap_after_the_audio_in_hand_is_one_underrun_of_that_length() -> None:
    # plays 0.3 s from t=10, then 1 s arriving at t=10.5 (0.2 s of silence), then 1 s at t=11.0 (in hand until 11.5)
    count, silent = underruns([(10.0, 0.3), (10.5, 1.0), (11.0, 1.0)])
    assert count == 1 and silent == pytest.approx(0.2)


def test_playback_resumes_when_the_late_chunk_comes_and_runs_dry_again() -> None:
    # 0.5 s at t=0; 0.5 s at t=1 (0.5 s silent, plays to 1.5); 0.5 s at t=1.4 (in time, plays to 2.0);
    # 0.1 s at t=3 (1.0 s silent)
    count, silent = underruns([(0.0, 0.5), (1.0, 0.5), (1.4, 0.5), (3.0, 0.1)])
    assert count == 2 and silent == pytest.approx(1.5)


def test_a_chunk_just_in_time_is_no_underrun() -> None:
    assert underruns([(0.0, 0.5), (0.5, 0.5), (1.0005, 0.5)]) == (0, 0.0)


def _record(i: int, kind: str, chunks: list[tuple[float, float]]) -> JobRecord:
    rec = JobRecord(PlannedJob(i, kind, "interactive", "joe", "x"), t_sched=chunks[0][0] - 0.1, t_submit=chunks[0][0] - 0.1,
                    job_id=f"job{i}", segments=1, first_chunk=chunks[0][0], last_chunk=chunks[-1][0],
                    ended=chunks[-1][0], state="done")
    rec.chunks = chunks
    rec.audio_s = sum(s for _, s in chunks)
    return rec


def test_the_summary_gives_the_share_of_jobs_with_underruns_and_seconds_per_audio_minute() -> None:
    smooth = _record(0, "en_short", [(100.0, 2.0), (100.5, 2.0)])  # 4 s, fine
    gappy = _record(1, "en_short", [(100.0, 0.5), (101.0, 1.5)])  # 2 s of audio, 0.5 s silent
    book = _record(2, "en_paragraph", [(100.0, 3.0), (110.0, 3.0)])  # 6 s of audio, 7 s silent
    raw = {"records": [smooth, gappy, book], "t0": 99.0, "t_stop_submit": 101.0, "t_end": 111.0, "proc_samples": [],
           "closed_loop": False, "spec": {"mix": "test", "rate": 1.0, "concurrency": 1}}
    under = summarize(raw)["underruns"]
    assert under["all"]["jobs"] == 3 and under["all"]["jobs_with_any"] == 2
    assert under["all"]["share"] == pytest.approx(2 / 3, abs=1e-4)
    assert under["all"]["seconds"] == pytest.approx(7.5)
    assert under["all"]["seconds_per_audio_min"] == pytest.approx(7.5 / (12 / 60), rel=1e-3)
    assert under["en_short"]["share"] == 0.5 and under["en_short"]["seconds"] == pytest.approx(0.5)
    assert under["en_paragraph"]["underruns"] == 1
