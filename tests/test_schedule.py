"""The deadline scheduler's choices on constructed situations (workers/schedule.py: pure, no Redis)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.errors import InputError
from wire.settings import SchedulingSettings, load_settings
from workers.layout import Urgency
from workers.schedule import (
    ACOUSTIC,
    CARRIED,
    WINDOW,
    Clock,
    Unit,
    Work,
    at_risk,
    choose,
    deadline,
    due,
    publish_slack,
    urgency_by_slack,
    window_end_ms,
)

S = SchedulingSettings(first_chunk_target_ms=100, bulk_deadline_s=20.0, risk_slack_ms=500, play_margin_ms=0)
MARGIN = SchedulingSettings(first_chunk_target_ms=100, bulk_deadline_s=20.0, risk_slack_ms=500, play_margin_ms=200)
NOW = 1_000_000.0


def test_clock_slack_is_audio_delivered_minus_time_played() -> None:
    clock = Clock(started=NOW - 2.0, delivered_s=5.0)
    assert clock.runs_dry() == NOW + 3.0
    assert clock.slack(NOW) == pytest.approx(3.0)
    assert Clock(started=NOW - 6.0, delivered_s=5.0).slack(NOW) == pytest.approx(-1.0)  # ran dry a second ago
    assert Clock().slack(NOW) is None and Clock().runs_dry() is None


def test_clock_from_the_status_hash_fields() -> None:
    assert Clock.from_status(b"1000.5", b"2.25") == Clock(1000.5, 2.25)
    assert Clock.from_status(None, None) == Clock()
    assert Clock.from_status(b"garbage", None) == Clock()


def test_due_of_a_new_interactive_job_is_its_arrival_plus_the_target() -> None:
    assert due(Work("interactive", created=NOW), Clock(), S) == pytest.approx(NOW + 0.1)
    # a later segment of a job not playing yet: after the audio in front of it (its own length per segment)
    assert due(Work("interactive", created=NOW, seg=2, est_s=3.0), Clock(), S) == pytest.approx(NOW + 6.1)


def test_due_of_a_playing_job_is_when_its_listener_runs_dry_less_the_margin() -> None:
    assert due(Work("interactive", created=NOW - 10), Clock(NOW - 2.0, 6.0), S) == pytest.approx(NOW + 4.0)
    assert due(Work("interactive", created=NOW - 10), Clock(NOW - 2.0, 6.0), MARGIN) == pytest.approx(NOW + 3.8)
    assert deadline(Work("interactive", created=NOW - 10), Clock(NOW - 2.0, 6.0), MARGIN) == pytest.approx(NOW + 4.0)
    # not playing yet, or bulk: no margin
    assert due(Work("interactive", created=NOW), Clock(), MARGIN) == pytest.approx(NOW + 0.1)
    assert due(Work("bulk", created=NOW), Clock(NOW, 1.0), MARGIN) == pytest.approx(NOW + 20.0)


def test_the_margin_lets_a_window_due_soon_go_before_a_caller_due_sooner() -> None:
    """A listener that runs dry in 150 ms vs a caller due in 100 ms: the window takes time, so it goes first."""
    held = Unit(WINDOW, due(Work("interactive", created=NOW - 3), Clock(NOW - 4.85, 5.0), MARGIN), (0, 1), "held")
    caller = Unit(ACOUSTIC, due(Work("interactive", created=NOW), Clock(), MARGIN), (NOW * 1000, 0), "caller")
    assert choose([caller, held], NOW) is held
    assert choose([Unit(WINDOW, due(Work("interactive", created=NOW - 3), Clock(NOW - 4.85, 5.0), S), (0, 1), "held"),
                   caller], NOW) is caller  # without the margin the caller would go first


def test_bulk_is_due_far_away_or_at_its_own_deadline() -> None:
    assert due(Work("bulk", created=NOW), Clock(NOW, 0.5), S) == pytest.approx(NOW + 20.0)  # its clock does not matter
    assert due(Work("bulk", created=NOW, deadline=NOW + 5), Clock(), S) == pytest.approx(NOW + 5.0)
    assert due(Work("bulk", created=NOW, deadline=NOW + 50), Clock(), S) == pytest.approx(NOW + 20.0)


def test_a_new_caller_goes_before_the_next_window_of_a_job_seconds_ahead() -> None:
    """The issue's case: a long job with 4 s of audio in hand vs a caller that just arrived."""
    held = Unit(WINDOW, due(Work("interactive", created=NOW - 3), Clock(NOW - 1.0, 5.0), S), (0, 1), "long job")
    caller = Unit(ACOUSTIC, due(Work("interactive", created=NOW), Clock(), S), (NOW * 1000, 0), "caller")
    assert choose([held, caller], NOW) is caller


def test_a_window_whose_listener_is_about_to_run_dry_goes_before_a_new_caller() -> None:
    held = Unit(WINDOW, due(Work("interactive", created=NOW - 3), Clock(NOW - 4.95, 5.0), S), (0, 1), "nearly dry")
    caller = Unit(ACOUSTIC, due(Work("interactive", created=NOW), Clock(), S), (NOW * 1000, 0), "caller")
    assert choose([caller, held], NOW) is held


def test_late_work_is_still_chosen_most_overdue_first_never_dropped() -> None:
    units = [Unit(WINDOW, NOW - 0.5, (3, 0), "late"), Unit(ACOUSTIC, NOW - 2.0, (5, 0), "later"),
             Unit(CARRIED, NOW + 1.0, (1, 0), "fine")]
    order = []
    while units:
        u = choose(units, NOW)
        assert u is not None
        order.append(u.ref)
        units.remove(u)
    assert order == ["later", "late", "fine"]


def test_a_playing_listener_about_to_run_dry_goes_before_callers_already_waiting_too_long() -> None:
    """Under a backlog every waiting caller is past its first-chunk target; a playing listener whose unit is due now
    still goes first (it would hear a gap), and only then: one that holds seconds waits its turn."""
    waiting = Unit(ACOUSTIC, due(Work("interactive", created=NOW - 0.8), Clock(), MARGIN), (NOW * 1000 - 800, 0), "caller")
    dry_soon = Unit(WINDOW, due(Work("interactive", created=NOW - 2), Clock(NOW - 1.0, 1.1), MARGIN), (NOW * 1000 - 2000, 0),
                    "dry soon", playing=True)
    assert dry_soon.due > waiting.due  # by plain EDF the caller would go first
    assert choose([waiting, dry_soon], NOW) is dry_soon
    ahead = Unit(WINDOW, due(Work("interactive", created=NOW - 2), Clock(NOW - 1.0, 5.0), MARGIN), (NOW * 1000 - 2000, 0),
                 "ahead", playing=True)
    assert choose([ahead, waiting], NOW) is waiting


def test_bulk_fills_idle_time_and_ages_in() -> None:
    book = Unit(ACOUSTIC, due(Work("bulk", created=NOW), Clock(), S), (NOW * 1000, 0), "book")
    assert choose([book], NOW) is book  # nothing else: the book runs
    caller = Unit(ACOUSTIC, due(Work("interactive", created=NOW + 1), Clock(), S), (NOW * 1000 + 1000, 0), "caller")
    assert choose([book, caller], NOW) is caller
    # 25 s later the book's sentence is overdue and goes before a fresh caller
    fresh = Unit(ACOUSTIC, due(Work("interactive", created=NOW + 25), Clock(), S), (NOW * 1000 + 25_000, 0), "fresh")
    assert choose([fresh, book], NOW) is book


def test_ties_go_to_the_earlier_arrival_then_to_a_held_window() -> None:
    a = Unit(ACOUSTIC, NOW, (10, 0), "a")
    b = Unit(ACOUSTIC, NOW, (5, 0), "b")
    assert choose([a, b], NOW) is b
    w = Unit(WINDOW, NOW, (5, 0), "w")
    assert choose([b, w], NOW) is w
    assert choose([], NOW) is None


def test_slack_at_publish() -> None:
    job = Work("interactive", created=NOW - 0.25)
    assert publish_slack(job, Clock(), NOW, S) == pytest.approx(-0.15)  # its first chunk, 150 ms past the target
    assert publish_slack(job, Clock(NOW - 1.0, 3.0), NOW, S) == pytest.approx(2.0)  # 2 s still in hand
    assert publish_slack(job, Clock(NOW - 1.0, 3.0), NOW, MARGIN) == pytest.approx(2.0)  # against the listener, no margin


def test_underrun_risk_counts_units_due_within_the_risk_slack() -> None:
    assert at_risk([NOW - 1, NOW + 0.2, NOW + 0.6, NOW + 10], NOW, S) == 2


def test_the_gathering_window_closes_when_a_held_unit_falls_due() -> None:
    assert window_end_ms(1000, 200, []) == 1200
    assert window_end_ms(1000, 200, [1.05, 3.0]) == 1050
    assert window_end_ms(1000, 200, [5.0]) == 1200


def test_urgency_follows_slack() -> None:
    assert urgency_by_slack("interactive", NOW + 0.1, NOW, S) is Urgency.URGENT
    assert urgency_by_slack("interactive", NOW + 3.0, NOW, S) is Urgency.BACKGROUND  # its listener holds 3 s: it can yield the cores
    assert urgency_by_slack("bulk", NOW - 5.0, NOW, S) is Urgency.BACKGROUND


def test_the_scheduling_section_is_loaded_and_checked() -> None:
    s = load_settings(env={"TTSFARM_SCHEDULING_MODE": "fifo", "TTSFARM_SCHEDULING_FIRST_CHUNK_TARGET_MS": "150"})
    assert s.scheduling.mode == "fifo" and s.scheduling.first_chunk_target_ms == 150
    assert load_settings().scheduling.mode == "deadline"
    with pytest.raises(InputError) as err:
        load_settings(env={"TTSFARM_SCHEDULING_MODE": "lifo"})
    assert err.value.code == "BAD_OPTION"


def test_with_the_shipped_settings_a_callers_second_window_follows_its_first_at_once() -> None:
    """Measured (docs/lab/scheduling-and-first-audio.md): a listener holding only the small first window ran dry in 7-10 % of short jobs
    when a new caller's pass could go between its first two windows. The shipped margin exceeds the first window, so
    the second is due the moment the first is out and goes before a caller already waiting too long."""
    s = load_settings()
    first_s = s.streaming.first_window_ms / 1000
    just_started = Unit(WINDOW, due(Work("interactive", created=NOW - 0.3), Clock(NOW, first_s), s.scheduling),
                        (NOW * 1000 - 300, 0), "second window", playing=True)
    assert just_started.due <= NOW
    waiting = Unit(ACOUSTIC, due(Work("interactive", created=NOW - 0.5), Clock(), s.scheduling), (NOW * 1000 - 500, 0),
                   "caller")
    assert choose([waiting, just_started], NOW) is just_started


def test_a_held_segments_own_clock_stands_in_for_interactive_jobs_only() -> None:
    """The scheduler takes a held interactive segment's job clock from that segment's last publish (the furthest,
    where one job has several held), and reads the rest: a bulk job is due by its arrival and never counts as playing."""
    from types import SimpleNamespace

    from workers.scheduler import _own_clocks

    def held(job_id: str, lane: str, clock: tuple[float, float] | None) -> Any:
        job = SimpleNamespace(job_id=job_id, lane=lane)
        return SimpleNamespace(progress=SimpleNamespace(job=job, clock=lambda: clock))

    batches = [SimpleNamespace(live=[held("a", "interactive", (100.0, 2.0)), held("b", "bulk", (100.0, 9.0))]),
               SimpleNamespace(live=[held("a", "interactive", (100.0, 3.5)), held("c", "interactive", None)])]
    own = _own_clocks(batches)  # type: ignore[arg-type]
    assert set(own) == {"a"} and (own["a"].started, own["a"].delivered_s) == (100.0, 3.5)
