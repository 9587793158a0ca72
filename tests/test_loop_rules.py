"""Rules of a loop, on its real parts: the small first window only while the loop has nothing else, and a caller's
first window at once after its acoustic pass (``workers/runner.py``); ``scheduling.max_open``
(``workers/scheduler.py``); a finished job's end off the loop; continuous batching.

An ``InferenceLoop`` is built as a worker builds it (its ``Claimer``, ``DeadlineScheduler``, ``BatchRunner``,
``Outcomes`` and ``Publisher`` are the real ones) on the in-memory stub broker and again on Redis (``broker_kind``),
with the same assertions: jobs are admitted through the client's step, the loop peeks and claims them off the queue,
and a spy (it passes every call through) counts what the loop asked of the broker. The voice is the tiny generated
two-stage voice (``tests/generate_tiny_voice.py``): 100 frames a second, so with the windows below a segment's first
window is 10 frames when small and 40 when not.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid
import wave
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from generate_tiny_voice import write_tiny_voice

from pipeline.errors import ModelError
from pipeline.settings import Catalogue, RuntimeSettings, VoiceSpec
from pipeline.voices import twostage
from pipeline.voices.bank import VoiceBank
from pipeline.voices.device_use import DEVICE_USE
from pipeline.voices.null.device import device as null_device
from pipeline.voices.runtime import SessionFactory, StageSession
from wire.broker import Broker, Consumer, run_blocking
from wire.connect import connect
from wire.keys import Keys
from wire.pieces import Piece, PieceReply
from wire.queue import Entry, Head
from wire.records import SegmentJob, Submission, record_type
from wire.settings import Settings, load_settings
from workers.context import LoopContext, LoopHooks
from workers.events import JobEvents
from workers.finisher import Finisher
from workers.loop import InferenceLoop
from workers.metrics import WorkerMetrics
from workers.publisher import Publisher
from workers.scheduler import DeadlineScheduler

SMALL, LARGE = 10, 40  # first-window frames: streaming.first_window_ms 100 and window_ms 400 at 100 frames/s
CALLER = "the first segment of a caller is long enough for several windows of audio"
BOOK = "a segment of a book that runs in the background for several windows too"
_ids = itertools.count(1)


class ConsumerSpy:
    """The loop's queue consumer, passed through: counts its peeks, keeps what it claimed and acked."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.peeks = 0
        self.claimed: list[Entry] = []
        self.acked: list[Entry] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)

    def heads(self, block_ms: int) -> list[Head]:
        self.peeks += 1
        return self.consumer.heads(block_ms)

    def claim(self, stream: str, count: int) -> list[Entry]:
        taken = self.consumer.claim(stream, count)
        self.claimed += taken
        return taken

    def ack(self, entries: Sequence[Entry]) -> None:
        self.acked += entries
        self.consumer.ack(entries)


class BrokerSpy:
    """A broker, passed through: notes the pieces the loop published (their jobs, claims and segment ends) and the
    jobs it ended."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pieces = 0
        self.published: list[str] = []  # the job of each piece, in order
        self.claims: list[tuple[int, Any]] = []  # each claim with the index of the piece that carried it
        self.ends: list[Any] = []  # each segment end's ``SegmentEnd``
        self.finished: list[str] = []  # jobs ended (final record written)
        self.acked_with_end: list[Entry] = []  # entries acked in the step that ended their job

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)

    def consumer(self, name: str, streams: Sequence[str]) -> ConsumerSpy:
        return ConsumerSpy(self.broker.consumer(name, streams))

    def publish_pieces(self, pieces: Sequence[Piece], **kwargs: Any) -> list[PieceReply]:
        self.pieces += len(pieces)
        self.claims += [(p.piece, p.claim) for p in pieces if p.claim is not None]
        self.ends += [p.end for p in pieces if p.end is not None]
        self.published += [p.job_id for p in pieces]
        return self.broker.publish_pieces(pieces, **kwargs)

    def finalize(self, job_id: str, *args: Any, **kwargs: Any) -> int:
        self.finished.append(job_id)
        self.acked_with_end += kwargs.get("ack", ())
        return self.broker.finalize(job_id, *args, **kwargs)


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> VoiceBank:
    root = tmp_path_factory.mktemp("tiny")
    acoustic, vocoder = write_tiny_voice(root)
    spec = VoiceSpec("tiny", "twostage", ("en",), source="tiny", acoustic=str(acoustic), vocoder=str(vocoder),
                     max_batch=1, sample_rate=6400)
    runtime = RuntimeSettings(device="cpu", intra_op_threads=1, model_cache_dir=str(root / "cache"))
    b = VoiceBank(Catalogue({"tiny": spec}, "tiny"), runtime)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(twostage.STAGE_BUILDERS, "tiny", "generate_tiny_voice:build_tiny")
        assert isinstance(b.get("tiny"), twostage.TwoStageVoice)  # loaded now; the loop gets it from the bank
    return b


def settings(url: str, **extra: str) -> Settings:
    env = {"scheduling_mode": "deadline", "scheduling_max_open": "2", "streaming_windowed": "true",
           "streaming_first_window_ms": "100", "streaming_window_ms": "400",
           "streaming_first_window_when_queued": "false", "redis_url": url,
           "redis_key_prefix": f"rules{uuid.uuid4().hex[:8]}", **extra}
    return load_settings(env={f"TTSFARM_{k.upper()}": v for k, v in env.items()})


@pytest.fixture(params=["stub", "redis"])
def broker_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_loop(bank: VoiceBank, broker_kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    loops: list[InferenceLoop] = []
    url = f"memory://rules-{uuid.uuid4().hex}"
    if broker_kind == "redis":
        url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(url).flushdb()

    def make(storage: Any = None, device_busy: Any = None, first_any: bool = False, **extra: str) -> InferenceLoop:
        s = settings(url, **extra)
        broker = BrokerSpy(connect(s.redis))
        publisher = Publisher(broker, storage=storage, chunk_ms=s.queue.chunk_ms,  # type: ignore[arg-type]
                              maxlen=s.queue.results_maxlen, ttl_s=s.queue.job_ttl_s)
        ctx = LoopContext(s, "rules", broker, bank, bank, publisher, JobEvents(None, "rules", enabled=False),  # type: ignore[arg-type]
                          WorkerMetrics(enabled=False), threading.Event(), LoopHooks(), device_max_batch=lambda: 8,
                          reserved_loop_free=lambda: False, shared_loop_serving_interactive=lambda: False,
                          finisher=Finisher(s.queue.finisher_threads), first_segments_any_length=lambda: first_any,
                          **({"device_busy": device_busy} if device_busy is not None else {}))
        loop = InferenceLoop(ctx, 0)
        loop.queue.ensure_groups()
        assert isinstance(loop.scheduler, DeadlineScheduler)
        loops.append(loop)
        return loop

    yield make
    for loop in loops:
        loop.runner.close()
        loop.ctx.finisher.close(timeout=10)
        loop.ctx.broker.close()


def queued(loop: InferenceLoop, lane: str, text: str, *, segments: int = 1, est_s: float = 1.0) -> str:
    """A job admitted through the client's step (its segments on the queue, for the loop to peek and claim): its id."""
    job_id = f"rules{next(_ids):05d}{uuid.uuid4().hex[:6]}"
    now = time.time()
    keys: Keys = loop.ctx.broker.keys
    segs = [SegmentJob(job_id=job_id, seg=i, total=segments, text=text, lang="en", voice="tiny", request_voice="tiny",
                       format="wav", sample_rate=8000, lane=lane, est_s=est_s, created=now) for i in range(segments)]
    status = {"state": "queued", "total": segments, "done": 0, "voice": "tiny", "format": "wav", "sample_rate": 8000,
              "lane": lane, "created": now}
    sub = Submission(job_id, segs, status, [keys.queue(lane, 0)] * segments)
    run_blocking(loop.ctx.broker, loop.ctx.broker.admit(sub, loop.ctx.settings.queue))
    return job_id


def entry(loop: InferenceLoop, lane: str, text: str, *, segments: int = 1) -> Entry:
    """A job's first segment (or its last, of ``segments``), admitted and claimed off the queue by a hand other than the
    loop: the entry a test hands the loop's runner itself."""
    job_id = queued(loop, lane, text, segments=segments)
    hand = loop.ctx.broker.consumer(f"hand-{uuid.uuid4().hex[:6]}", [loop.ctx.broker.keys.queue(lane, 0)])
    taken = hand.claim(hand.streams[0], 100)
    (e,) = [x for x in taken if x.job is not None and x.job.job_id == job_id and x.job.seg == segments - 1]
    return e


def status_of(loop: InferenceLoop, job_id: str) -> Any:
    return run_blocking(loop.ctx.broker, loop.ctx.broker.job_status(job_id))


def job_of(e: Entry) -> str:
    assert e.job is not None
    return e.job.job_id


def first_window(loop: InferenceLoop, e: Entry) -> int:
    """Frames in the first window of ``e``'s segment, as the loop's runner plans it (the batch is held after its
    acoustic pass, as the deadline scheduler holds it)."""
    loop.runner.run([e], hold=loop.scheduler.held.append)
    batch = loop.scheduler.held[-1]
    (streamed,) = batch.live
    assert streamed.entry is e and len(streamed.item.windows) > 2
    return streamed.item.windows[0].end


# -- the small first window ------------------------------------------------------------------------------------
def test_a_first_segment_gets_the_small_first_window_when_the_loop_has_nothing_else(make_loop: Any) -> None:
    loop = make_loop()
    assert first_window(loop, entry(loop, "interactive", CALLER)) == SMALL


@pytest.mark.parametrize("situation", ["others wait", "it carries a claimed batch", "it holds a segment"])
def test_no_small_first_window_while_the_loop_has_other_work(make_loop: Any, situation: str) -> None:
    loop = make_loop()
    if situation == "others wait":
        loop.claimer.waiting = 3  # entries of its lanes left in the queue when it claimed
    elif situation == "it carries a claimed batch":
        loop.claimer.take_back([entry(loop, "interactive", CALLER)])
    else:  # a segment between two windows, held by the scheduler (the runner asks the loop through ``holding``)
        loop.runner.run([entry(loop, "bulk", BOOK)], hold=loop.scheduler.held.append)
        assert len(loop.scheduler.held) == 1
    assert first_window(loop, entry(loop, "interactive", CALLER)) == LARGE


@pytest.mark.parametrize("join", ["any", "fit"])
def test_callers_first_segments_claimed_together_share_a_batch_where_the_setting_says(make_loop: Any, monkeypatch: pytest.MonkeyPatch,
                                                                                    join: str) -> None:
    """``queue.first_segments_join`` any (auto on CUDA): two callers' first segments claimed together go in one batch
    however far apart their lengths; fit: by length, so the longer one waits for the next batch."""
    loop = make_loop(first_any=join == "any")
    monkeypatch.setattr(loop.claimer, "limit", lambda voice: 8)
    short, long_, later = (entry(loop, "interactive", CALLER) for _ in range(3))
    assert short.job and long_.job and later.job
    long_.job = dataclasses.replace(long_.job, est_s=4.0)
    later.job = dataclasses.replace(later.job, seg=1, total=2, est_s=4.0)  # not a first segment: joins by length only
    loop.claimer.take_back([short, long_, later])
    assert loop.claimer.next_batch() == ([short, long_] if join == "any" else [short])
    assert loop.claimer.carry == ([later] if join == "any" else [long_, later])


@pytest.mark.parametrize("replayable", [False, True])
def test_a_claim_carries_frames_only_from_a_voice_that_cannot_make_them_again(make_loop: Any, monkeypatch: pytest.MonkeyPatch,
                                                                              replayable: bool) -> None:
    """The tiny voice's acoustic graph takes no seed; made replayable here, its claims carry the plan alone and its
    segment's end drops no frames. The claim rides with the segment's first window, once."""
    monkeypatch.setattr(twostage.TwoStageVoice, "replayable", property(lambda self: replayable))
    loop = make_loop()
    frames = first_window(loop, entry(loop, "interactive", CALLER))
    batch = loop.scheduler.held[-1]
    while batch.step():
        pass
    ((piece, claim),) = loop.ctx.broker.claims
    assert piece == 0 and loop.ctx.broker.pieces > 2
    assert claim.replay.startswith(f"{frames},{LARGE},") and int(claim.replay.rsplit(",", 1)[1]) > 2 * LARGE
    assert bool(claim.frames) is not replayable
    assert [end.frames for end in loop.ctx.broker.ends] == [not replayable]


def test_first_window_when_queued_gives_it_anyway(make_loop: Any) -> None:
    loop = make_loop(streaming_first_window_when_queued="true")
    loop.claimer.waiting = 3
    loop.runner.run([entry(loop, "bulk", BOOK)], hold=loop.scheduler.held.append)
    assert first_window(loop, entry(loop, "interactive", CALLER)) == SMALL


# -- scheduling.max_open ---------------------------------------------------------------------------------------
def test_a_loop_holding_max_open_segments_looks_at_no_new_work(make_loop: Any) -> None:
    loop = make_loop(scheduling_max_open="2")
    for _ in range(2):  # two book segments held between windows: max_open
        loop.runner.run([entry(loop, "bulk", BOOK)], hold=loop.scheduler.held.append)
    held = list(loop.scheduler.held)
    consumer, broker = loop.queue, loop.ctx.broker
    caller = queued(loop, "interactive", CALLER)  # a caller's first segment, due long before the book's windows

    loop.scheduler.step()
    assert consumer.peeks == 0 and consumer.claimed == []  # the queue was not even looked at
    assert broker.pieces == 1 and loop.scheduler.held == held  # a held segment's window ran instead

    loop.scheduler.held.remove(held[1])  # one fewer held: under max_open, the loop takes the caller's segment
    loop.scheduler.step()
    assert consumer.peeks == 1 and [job_of(e) for e in consumer.claimed] == [caller]
    assert loop.scheduler.held[0] is held[0] and loop.scheduler.held[1].live[0].entry is consumer.claimed[0]


# -- a caller's first window follows its acoustic pass ---------------------------------------------------------
def test_a_callers_first_window_follows_its_acoustic_pass_with_nothing_between(make_loop: Any) -> None:
    loop = make_loop(scheduling_max_open="4")
    broker, consumer = loop.ctx.broker, loop.queue
    loop.runner.run([entry(loop, "bulk", BOOK)], hold=loop.scheduler.held.append)
    assert broker.pieces == 0 and len(loop.scheduler.held) == 1  # a book's segment: held, its windows left for later

    caller = queued(loop, "interactive", CALLER)
    loop.scheduler.step()  # one unit: the caller's (due first), its acoustic pass and its first window
    assert [job_of(e) for e in consumer.claimed] == [caller]
    assert broker.published == [caller]
    assert loop.scheduler.held[-1].live[0].entry is consumer.claimed[0]  # its later windows are the scheduler's

    later = entry(loop, "interactive", CALLER, segments=2)  # a job's second segment (its listener is playing)
    loop.runner.run([later], hold=loop.scheduler.held.append)
    assert broker.pieces == 1  # a later segment waits for its deadline like a book's


# -- a finished job's end, off the loop ------------------------------------------------------------------------
class GatedStorage:
    """Local storage whose puts wait until the test opens the gate: an encoder or an S3 round trip that takes long."""

    def __init__(self, root: Path) -> None:
        from wire.storage import LocalStorage

        self.local, self.gate, self.waiting = LocalStorage(root), threading.Event(), threading.Event()

    def put(self, key: str, data: bytes, content_type: str) -> str:
        self.waiting.set()
        assert self.gate.wait(30)
        return self.local.put(key, data, content_type)


@pytest.mark.parametrize("threads", [1, 0])
def test_a_finished_job_is_stored_while_the_loop_goes_on(make_loop: Any, tmp_path: Path, threads: int) -> None:
    """With a finisher (``queue.finisher_threads``) the loop runs its next segment while the last job's audio is
    stored; the entry that ended the job is acked only once the job is stored, in the step that ends it (and in no
    other). Without one the loop stores the job itself before it takes anything else."""
    storage = GatedStorage(tmp_path / "store")
    loop = make_loop(storage=storage, queue_finisher_threads=str(threads), streaming_windowed="false")
    broker, consumer = loop.ctx.broker, loop.queue
    first, second = queued(loop, "interactive", "The first job has one short sentence."), \
        queued(loop, "interactive", "So has the second one.")
    stepping = threading.Thread(target=lambda: [loop.scheduler.step() for _ in range(2)], daemon=True)
    stepping.start()
    assert storage.waiting.wait(30)  # the first job's audio is being stored
    stepping.join(3 if threads else 0.5)
    if threads:
        assert not stepping.is_alive() and broker.published == [first, second]
        assert consumer.acked == [] and broker.acked_with_end == [] and broker.finished == []  # not before the end
        assert loop.ctx.finisher.pending >= 1
    else:
        assert stepping.is_alive() and broker.published == [first]  # the loop waits for the storage
    storage.gate.set()
    stepping.join(30)
    assert loop.ctx.finisher.close(timeout=30)
    assert broker.finished == [first, second]
    assert [job_of(e) for e in broker.acked_with_end] == [first, second] and consumer.acked == []
    snapshot = loop.ctx.broker.queue_snapshot(loop.ctx.settings.queue.n_buckets)
    assert sum(b.pending + b.length for b in snapshot.buckets) == 0  # acked and deleted where the queue is, not only asked
    assert snapshot.backlog["interactive"].segments == 0  # and off the lane's backlog
    assert (tmp_path / "store").exists() and loop.ctx.finisher.describe()["done"] == (2 if threads else 0)


class FailingOnceStorage:
    """Local storage whose first put fails (an outage the end does not wait out): the end leaves its entry unacked."""

    def __init__(self, root: Path) -> None:
        from wire.storage import LocalStorage

        self.local, self.failed = LocalStorage(root), False

    def put(self, key: str, data: bytes, content_type: str) -> str:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the storage is down")
        return self.local.put(key, data, content_type)


@pytest.mark.parametrize("windowed", ["false", "true"])
def test_a_job_whose_end_failed_is_ended_by_the_redo_with_the_audio_its_listener_heard(make_loop: Any, tmp_path: Path,
                                                                                      windowed: str) -> None:
    """A job of one segment, published whole or window by window (its PCM kept in its results stream only): its end
    fails, the entry is left unacked, a reclaim redoes the segment (nothing of it written again) and ends the job; the
    stored audio is what the results stream carried."""
    storage = FailingOnceStorage(tmp_path / "store")
    loop = make_loop(storage=storage, queue_finisher_threads="1", streaming_windowed=windowed, queue_claim_idle_ms="200")
    job = queued(loop, "interactive", CALLER)
    deadline = time.monotonic() + 30
    while status_of(loop, job).state != "done" and time.monotonic() < deadline:
        loop.claimer.housekeeping(loop.in_flight())  # as the loop runs them (``InferenceLoop.run``): reclaims too
        loop.scheduler.step()
        time.sleep(0.05)
    assert storage.failed and status_of(loop, job).state == "done"
    assert loop.ctx.finisher.close(timeout=30)
    pieces = loop.ctx.broker.pieces  # the first attempt's, and the redo's (written: none)
    assert loop.ctx.broker.finished.count(job) == 1 and (pieces == 2 if windowed == "false" else pieces > 2)
    records = run_blocking(loop.ctx.broker, loop.ctx.broker.read_results(job, "0-0", 100, 0))
    heard = b"".join(bytes(f[b"pcm"]) for _, f in records if record_type(f) == "chunk")
    with wave.open(str(tmp_path / "store" / job / "audio.wav")) as stored:
        assert heard and stored.readframes(stored.getnframes()) == heard


def test_a_full_finisher_hands_the_end_back_and_close_waits_for_the_pending() -> None:
    finisher, gate, ran = Finisher(1), threading.Event(), []
    assert finisher.take(lambda: (gate.wait(30), ran.append(1)))
    assert finisher.take(lambda: ran.append(2))  # two places per thread
    assert not finisher.take(lambda: ran.append(3))  # full: the loop runs this one itself
    assert not finisher.close(timeout=0.2) and finisher.pending == 2
    gate.set()
    assert finisher.close(timeout=30) and ran == [1, 2]
    assert finisher.describe() == {"threads": 1, "pending": 0, "done": 2, "inline": 1}
    assert not Finisher(0).take(lambda: None)


# -- continuous batching ---------------------------------------------------------------------------------------
# A 1 s window (not the shipped 200 ms) so that a slow machine's scheduling delays stay small beside the bounds.
@pytest.mark.parametrize("continuous, busy_for_s, waited_s", [
    ("true", 0.0, (0.0, 0.25)),  # the device is idle: the batch goes at once with what is queued
    ("true", 99.0, (0.9, 3.0)),  # busy all along: joiners are gathered for the whole window
    ("true", 0.4, (0.35, 0.8)),  # busy, then free: the batch goes when it frees
    ("false", 0.0, (0.9, 3.0)),  # a fixed window is waited out whatever the device does
])
def test_a_batch_gathers_joiners_only_while_the_device_is_busy(make_loop: Any, continuous: str, busy_for_s: float,
                                                                waited_s: tuple[float, float]) -> None:
    started = time.monotonic()
    loop = make_loop(device_busy=lambda: time.monotonic() - started < busy_for_s, queue_continuous_batching=continuous,
                     queue_window_ms="1000")
    loop.claimer.limit = lambda voice: 4  # a device that batches (the tiny voice's catalogue says 1)
    caller = queued(loop, "interactive", CALLER)
    (head,) = loop.queue.heads(0)
    started = time.monotonic()
    assert [job_of(e) for e in loop.claimer.claim(head)] == [caller]
    assert waited_s[0] <= time.monotonic() - started <= waited_s[1]


def test_the_device_is_busy_only_while_a_stage_call_is_on_it(tmp_path: Path) -> None:
    """What continuous batching asks (``FarmWorker.device_busy``): a stage call of the process on its device, not a
    loop somewhere inside a batch. The null voice's fake device and a real stage session (the tiny voice's, on CPU)
    both mark their calls; between calls the device reads free."""
    assert not DEVICE_USE.busy()
    fake, seen = null_device("h200"), []
    call = threading.Thread(target=fake.run, args=("acoustic", 8, 20_000))  # a long call: hundreds of ms
    call.start()
    while call.is_alive():
        seen.append(DEVICE_USE.busy())
        time.sleep(0.002)
    assert any(seen) and not DEVICE_USE.busy()

    acoustic, _ = write_tiny_voice(tmp_path / "tiny")
    session = StageSession(SessionFactory(RuntimeSettings()), acoustic, voice="tiny", stage="acoustic")
    inside: list[bool] = []
    real_run = session.session.run
    session.session.run = lambda *a, **k: inside.append(DEVICE_USE.busy()) or real_run(*a, **k)  # type: ignore[method-assign]
    with pytest.raises(ModelError):  # fed nothing the graph takes: the call fails, and the device is free after it
        session.run(["output"], {})
    assert inside == [True] and not DEVICE_USE.busy()


def test_one_loop_at_a_time_gathers_on_a_stream(make_loop: Any) -> None:
    """While a loop gathers joiners on a stream (the device busy, the window open), the process's other loops leave
    that stream's heads to it, so its arrivals fill one batch instead of several that each wait out the window; the
    stream is free again once the gathering ends, and a loop that batches one at a time takes no stream."""
    freed = threading.Event()  # the device is busy until the test frees it: the window (long) stays open till then
    loop = make_loop(device_busy=lambda: not freed.is_set(), queue_window_ms="30000")
    loop.claimer.limit = lambda voice: 4  # a device that batches (the tiny voice's catalogue says 1)
    queued(loop, "interactive", CALLER)
    (head,) = loop.queue.heads(0)
    seen: list[frozenset[str]] = []
    claim = threading.Thread(target=lambda: seen.append(frozenset(e.stream for e in loop.claimer.claim(head))))
    claim.start()
    deadline = time.monotonic() + 10
    while loop.ctx.gathering.taken() != {head.stream}:
        assert time.monotonic() < deadline and claim.is_alive(), loop.ctx.gathering.taken()
        time.sleep(0.005)
    queued(loop, "interactive", CALLER)  # another arrival on it, and one elsewhere
    queued(loop, "bulk", BOOK)
    bulk = loop.ctx.broker.keys.queue("bulk", 0)
    assert [h.stream.rpartition("@")[2] for h in loop.claimer.heads(0)] == [bulk]  # what another loop sees
    freed.set()  # continuous batching (the default): the batch goes once the device frees
    claim.join(10)
    assert not claim.is_alive()
    assert seen == [{head.stream}] and loop.ctx.gathering.taken() == frozenset()
    loop.claimer.limit = lambda voice: 1
    queued(loop, "interactive", CALLER)
    (head,) = [h for h in loop.queue.heads(0) if h.lane == "interactive"]
    assert [job_of(e) for e in loop.claimer.claim(head)] == [head.job_id] and loop.ctx.gathering.taken() == frozenset()
