"""How a worker process lays out its inference loops: how many, with how many intra-op threads each, and
at what OS priority the loops that share the cores with a reserved interactive loop run."""

from __future__ import annotations

import os
import threading

from pipeline.settings import load_settings
from workers.farm import lower_thread_priority, resolve_loops


def _settings(**env: str):  # type: ignore[no-untyped-def]
    return load_settings(env={f"TTSFARM_{k.upper()}": v for k, v in env.items()})


def test_auto_on_cpu_is_one_single_threaded_loop_per_core_plus_the_reserved_ones() -> None:
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1"), cores=2, cuda=False)
    assert (s.queue.inference_threads, s.runtime.intra_op_threads) == (3, 1)
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="0"), cores=16, cuda=False)
    assert (s.queue.inference_threads, s.runtime.intra_op_threads) == (16, 1)
    # threads per loop asked for: the cores are divided among loops of that many threads
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1", runtime_intra_op_threads="4"),
                      cores=16, cuda=False)
    assert (s.queue.inference_threads, s.runtime.intra_op_threads) == (5, 4)
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="0", runtime_intra_op_threads="4"),
                      cores=2, cuda=False)
    assert s.queue.inference_threads == 1  # never none


def test_auto_on_cuda_is_one_batching_loop_and_explicit_values_are_kept() -> None:
    s = resolve_loops(_settings(queue_inference_threads="0", queue_interactive_loops="1"), cores=16, cuda=True)
    assert (s.queue.inference_threads, s.runtime.intra_op_threads) == (2, 0)
    explicit = _settings(queue_inference_threads="3", runtime_intra_op_threads="0")
    assert resolve_loops(explicit, cores=2, cuda=False) == explicit


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
    from workers.farm import cgroup_cpu_quota

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
