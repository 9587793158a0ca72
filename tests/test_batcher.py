"""The batching decisions, without Redis."""

from __future__ import annotations

from wire.settings import QueueSettings
from wire.queue import Head
from workers.batcher import Candidate, LaneState, choose_head, first_segments_any_length, padding_waste, select_batch, tolerance

Q = QueueSettings(window_ms=200, tolerance=0.1, tolerance_max=0.35, bulk_aging_ms=3000, interactive_streak=4)


def cand(t: int, est: float, key: tuple = ("joe",), awaited: bool = False) -> Candidate[str]:
    return Candidate(item=f"{t}:{est}", arrived_ms=t, est_s=est, key=key, awaited=awaited)


def test_tolerance_widens_with_the_heads_wait_and_stops_at_the_max() -> None:
    assert tolerance(0, Q) == 0.1
    assert 0.1 < tolerance(100, Q) < 0.35
    assert tolerance(200, Q) == tolerance(10_000, Q) == 0.35


def test_close_lengths_join_and_far_ones_do_not() -> None:
    cands = [cand(0, 3.0), cand(1, 3.2), cand(2, 6.0), cand(3, 2.9)]
    batch, rest = select_batch(cands, now_ms=10, limit=8, q=Q)
    assert [c.est_s for c in batch] == [3.0, 2.9, 3.2]
    assert [c.est_s for c in rest] == [6.0]


def test_waiting_widens_who_may_join() -> None:
    cands = [cand(0, 3.0), cand(1, 3.9)]
    assert len(select_batch(cands, now_ms=5, limit=8, q=Q)[0]) == 1
    assert len(select_batch(cands, now_ms=500, limit=8, q=Q)[0]) == 2


def test_other_voice_or_options_never_join_and_limit_holds() -> None:
    cands = [cand(0, 3.0), cand(1, 3.0, key=("kumo",)), *[cand(i, 3.0) for i in range(2, 12)]]
    batch, rest = select_batch(cands, now_ms=5, limit=4, q=Q)
    assert len(batch) == 4 and all(c.key == ("joe",) for c in batch)
    assert len(rest) == 8


def test_what_callers_wait_for_leads_and_joins_whatever_its_length() -> None:
    """Claimed together, callers' first segments go in the first batch: the oldest of them is its head and the others
    join it however far their lengths are (not another voice, not past the cap); the rest batch by fit as before."""
    cands = [cand(0, 3.0), cand(1, 3.1), cand(2, 9.0, awaited=True), cand(3, 1.0, awaited=True),
             cand(4, 2.0, key=("kumo",), awaited=True), cand(5, 8.8)]
    batch, rest = select_batch(cands, now_ms=10, limit=8, q=Q)
    assert [c.arrived_ms for c in batch] == [2, 3, 5]  # the awaited head, the awaited joiner, then a close fit
    assert [c.arrived_ms for c in rest] == [4, 0, 1]  # still awaited first
    assert [c.arrived_ms for c in select_batch(cands, now_ms=10, limit=2, q=Q)[0]] == [2, 3]
    assert [c.arrived_ms for c in select_batch(rest, now_ms=10, limit=8, q=Q)[0]] == [4]  # awaited, another voice
    plain = [cand(0, 3.0), cand(1, 9.0)]  # nobody waits: the oldest leads and lengths decide
    assert [c.arrived_ms for c in select_batch(plain, now_ms=10, limit=8, q=Q)[0]] == [0]


def test_first_segments_join_any_length_on_cuda_by_default_and_where_set() -> None:
    assert first_segments_any_length("auto", on_cuda=True) and not first_segments_any_length("auto", on_cuda=False)
    assert first_segments_any_length("any", on_cuda=False) and not first_segments_any_length("fit", on_cuda=True)


def test_interactive_first_bulk_after_a_streak_or_when_old_never_twice_while_interactive_waits() -> None:
    i = Head("q:interactive:0", "interactive", arrived_ms=1000, est_s=1, voice="joe")
    b = Head("q:bulk:0", "bulk", arrived_ms=0, est_s=1, voice="joe")
    state = LaneState()
    assert choose_head([i, b], 1100, state, Q) is i
    state.interactive_streak = 4
    assert choose_head([i, b], 1100, state, Q) is b
    state = LaneState()
    assert choose_head([i, b], 3500, state, Q) is b  # the bulk head aged past bulk_aging_ms
    state.record("bulk")
    assert choose_head([i, b], 3500, state, Q) is i
    assert choose_head([b], 3500, state, Q) is b
    assert choose_head([], 0, state, Q) is None


def test_padding_waste() -> None:
    assert padding_waste([10, 10]) == 0.0
    assert padding_waste([5, 10]) == 0.25
