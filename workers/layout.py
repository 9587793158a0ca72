"""How a worker process lays out its work on the cores: how many inference loops, with how many
onnxruntime threads each (``resolve_loops``), and at what OS priority a batch runs (``Urgency``,
``urgency_by_lane``, ``lower_thread_priority``). Measured in docs/lab/cpu-layout-and-throughput.md and
docs/lab/scheduling-and-first-audio.md ("The reserved loop and background work at low priority")."""

from __future__ import annotations

import logging
import math
import os
import threading
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.voices.runtime import cuda_wanted
from wire.settings import Settings

if TYPE_CHECKING:
    from wire.queue import Entry
    from wire.records import SegmentJob

log = logging.getLogger(__name__)


def lower_thread_priority(nice: int) -> int | None:
    """Set the calling thread's OS nice to ``nice`` (never raising its priority); the nice it now has.

    On Linux the nice value belongs to the thread. An unprivileged process may lower a thread's priority
    but never raise it back, so each loop runs its bulk batches on a helper thread that lowered its own
    once (``BatchRunner.compute``, ``workers/runner.py``). Elsewhere (or if refused) it logs and leaves the priority alone.
    """
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        if nice > now:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (OSError, AttributeError) as exc:
        log.warning("cannot lower this thread's priority to nice %d: %s", nice, exc)
        return None


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in cores (a container's ``--cpus``, a Kubernetes CPU limit),
    or None when there is none."""
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = Path(root, "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota = int(Path(root, "cpu", "cpu.cfs_quota_us").read_text())
        period = int(Path(root, "cpu", "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by the cgroup quota (rounded up)."""
    cores = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


CUDA_LOOPS = 6  # loops per CUDA worker by default: one loop leaves the device idle during its host work (docs/GPU.md)


def resolve_loops(settings: Settings, *, cores: int | None = None, cuda: bool | None = None) -> Settings:
    """``settings`` with the loop layout made concrete.

    ``queue.inference_threads = 0`` (auto): on CPU one loop per ``runtime.intra_op_threads`` cores (1 when
    that is 0 too), so every core runs one single-threaded inference: on 2 cores this was faster than one
    two-threaded session and than two processes (docs/lab/cpu-layout-and-throughput.md). On CUDA ``CUDA_LOOPS`` loops
    (at most one per core), the reserved ones among them, all on the same sessions: one loop leaves the GPU idle
    while it does a segment's host work (the GPU check's farm runs measure it: docs/GPU.md). On CPU the loops
    reserved for the interactive lane (``queue.interactive_loops``) come on top.
    ``queue.interactive_loop_threads = 0``: on CPU the reserved loops run a session of their own with one
    thread per usable core (a caller's first chunk comes sooner when the cores are free); on CUDA they
    share the other loops' session.
    """
    q, rt = settings.queue, settings.runtime
    reserved = max(0, q.interactive_loops)
    on_cuda = cuda_wanted(rt) if cuda is None else cuda
    cores = cores or usable_cores()
    if on_cuda:  # several loops share the device sessions: the host work of a segment runs beside the device's
        loops = q.inference_threads or max(1 + reserved, min(CUDA_LOOPS, cores))
        return settings.replace(queue={"inference_threads": loops, "interactive_loop_threads": rt.intra_op_threads})
    threads, loops = rt.intra_op_threads, q.inference_threads
    if loops <= 0:
        threads = threads or 1
        loops = max(1, cores // threads) + reserved
    # with onnxruntime choosing the threads (0) the session already uses every core: the reserved loops share it
    interactive = q.interactive_loop_threads or (cores if threads else 0)
    return settings.replace(runtime={"intra_op_threads": threads},
                            queue={"inference_threads": loops, "interactive_loop_threads": interactive})


class Urgency(Enum):
    """How a batch runs: ``URGENT`` on its loop's thread at the process's priority; ``BACKGROUND`` on the loop's
    helper thread at ``queue.bulk_nice`` (``BatchRunner.compute``), so an urgent batch of another loop gets the
    cores first."""

    URGENT = "urgent"
    BACKGROUND = "background"


def urgency_by_lane(entries: list[Entry]) -> Urgency:
    """URGENT for a batch holding the first segment of an interactive job (a caller waits for its first
    chunk), else BACKGROUND: bulk work, and an interactive job's later segments, whose audio is needed
    only once the segments before them have played (each takes a few per cent of its playing time)."""
    return Urgency.URGENT if any(awaited(e.job) for e in entries) else Urgency.BACKGROUND


def awaited(job: SegmentJob | None) -> bool:
    """Whether a caller waits for this segment's first audio: an interactive job's first segment."""
    return job is not None and job.lane == "interactive" and job.seg == 0
