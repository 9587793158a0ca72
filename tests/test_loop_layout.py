"""How a worker process lays out its inference loops: how many, with how many intra-op threads each, and
at what OS priority the loops that share the cores with a reserved interactive loop run."""

from __future__ import annotations

import os
import threading

from wire.settings import load_settings
from workers.layout import Urgency, lower_thread_priority, resolve_loops


def _settings(**env: str):  # type: ignore[no-untyped-def]
    return load_settings(env={f"TTSFARM_{k.upper()}": v for k, v in env.items()})


def _layout(s) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    return s.queue.inference_threads, s.runtime.intra_op_threads, s.queue.interactive_loop_threads


def test_auto_on_cpu_is_one_single_threaded_loop_per_core_plus_the_reserved_ones() -> None:
    # (loops in all, intra-op threads of the shared session, of the reserved loops' session)
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1"), cores=2, cuda=False)
    assert _layout(s) == (3, 1, 2)
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="0"), cores=16, cuda=False)
    assert _layout(s)[:2] == (16, 1)
    # threads per loop asked for: the cores are divided among loops of that many threads
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1", runtime_intra_op_threads="4",
                                queue_interactive_loop_threads="2"), cores=16, cuda=False)
    assert _layout(s) == (5, 4, 2)
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="0", runtime_intra_op_threads="4"),
                      cores=2, cuda=False)
    assert _layout(s)[0] == 1  # never none


def test_auto_on_cuda_is_six_loops_on_one_session_and_explicit_values_are_kept() -> None:
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1"), cores=16, cuda=True)
    assert _layout(s) == (6, 0, 0)  # the reserved loop among them; all share the device sessions
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1"), cores=2, cuda=True)
    assert _layout(s) == (2, 0, 0)  # at most one loop per core, and never fewer than a shared + the reserved one
    s = resolve_loops(_settings(queue_inference_threads="1", queue_interactive_loops="0"), cores=16, cuda=True)
    assert _layout(s) == (1, 0, 0)
    s = resolve_loops(_settings(queue_inference_threads="3", runtime_intra_op_threads="1"), cores=2, cuda=False)
    assert _layout(s) == (3, 1, 2)
    # onnxruntime picks the threads (0): that session already uses every core, the reserved loops share it
    s = resolve_loops(_settings(queue_inference_threads="2", runtime_intra_op_threads="0"), cores=2, cuda=False)
    assert _layout(s) == (2, 0, 0)


def test_a_loop_lowers_only_its_own_thread_and_never_raises_it() -> None:
    got: dict[str, int | None] = {}

    def loop() -> None:
        got["set"] = lower_thread_priority(12)
        got["again"] = lower_thread_priority(5)  # asking for a higher priority leaves it where it is
        got["tid"] = threading.get_native_id()

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = threading.Thread(target=loop)
    t.start()
    t.join()
    assert got["set"] == max(12, before) and got["again"] == got["set"]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # this thread is untouched


def test_cgroup_cpu_quota_v2_and_v1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from workers.layout import cgroup_cpu_quota

    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) == 1.5
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(str(v1)) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    assert cgroup_cpu_quota(str(v1)) == 4.0
    assert cgroup_cpu_quota(str(tmp_path / "none")) is None


def test_reserved_loop_uses_its_threads_unless_a_shared_loop_serves_a_caller(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import redis

    from workers.farm import FarmWorker
    from workers.loop import InferenceLoop

    settings = _settings(queue_inference_threads="0", queue_interactive_loops="1", queue_interactive_loop_threads="2",
                         runtime_device="cpu", storage_local_dir=str(tmp_path))
    farm = FarmWorker(settings, hostname="t", connection=redis.Redis(port=1), storage=object())
    assert farm.interactive_bank is not farm.bank  # nothing is loaded or connected to until start()
    assert farm.interactive_bank.runtime.intra_op_threads == 2
    assert farm.bank.runtime.intra_op_threads == 1
    reserved, shared = InferenceLoop(farm, 0, lanes=("interactive",)), InferenceLoop(farm, 1)
    farm.loops = [reserved, shared]
    assert not farm.reserved_loop_free()  # not running yet
    reserved.native_id = shared.native_id = threading.get_native_id()
    assert farm.reserved_loop_free()
    for shared_runs, bank in ((None, farm.interactive_bank), (Urgency.BACKGROUND, farm.interactive_bank), (Urgency.URGENT, farm.bank)):
        shared.runner.running = shared_runs
        assert reserved.runner.voice_bank() is bank, shared_runs
        assert shared.runner.voice_bank() is farm.bank
    shared.runner.running = None
    reserved.claimer.waiting = 3  # more callers wait: one thread per job does more work per core
    assert reserved.runner.voice_bank() is farm.bank
    reserved.runner.running = Urgency.URGENT
    assert not farm.reserved_loop_free()
    reserved.runner.running = None
    reserved.scheduler.held = [object()]  # type: ignore[list-item]  # between two windows of a segment it holds (deadline mode)
    assert not farm.reserved_loop_free()
    reserved.scheduler.held = []
    assert farm.reserved_loop_free()


def test_only_a_callers_first_segment_is_urgent() -> None:
    from wire.records import SegmentJob
    from workers.layout import urgency_by_lane
    from wire.queue import Entry

    def entry(lane: str, seg: int) -> Entry:
        job = SegmentJob(job_id="abcdefgh12", seg=seg, total=3, text="Hello.", lang="en", voice="joe", request_voice="joe",
                         format="wav", sample_rate=22050, lane=lane, est_s=1.0)
        return Entry("q", "1-0", {}, job)

    assert urgency_by_lane([entry("interactive", 0)]) is Urgency.URGENT
    assert urgency_by_lane([entry("interactive", 1), entry("interactive", 0)]) is Urgency.URGENT
    assert urgency_by_lane([entry("interactive", 1), entry("interactive", 2)]) is Urgency.BACKGROUND
    assert urgency_by_lane([entry("bulk", 0)]) is Urgency.BACKGROUND
    assert urgency_by_lane([Entry("q", "1-0", {}, None, ValueError("bad"))]) is Urgency.BACKGROUND
