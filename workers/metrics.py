"""Prometheus metrics of a worker process, and the small HTTP endpoint that serves them.

The inference loop reports through ``WorkerMetrics``: ``batch`` (the ``BatchRunner.on_batch`` stats
dict), ``first_chunk``, ``windows``, ``segment_published`` and ``error`` at the publish and fail points, ``voices_loaded`` after a
(re)load. Every one of these catches and logs its own errors: metrics never break the work.

Two modes, chosen by the environment the worker starts in:

* ``PROMETHEUS_MULTIPROC_DIR`` unset: a registry of this process, served on ``worker.metrics_port``.
  Several worker processes on one host then need one port each (``TTSFARM_WORKER_METRICS_PORT=9108``,
  ``9109``, ...), each a scrape target. This is the mode of one worker per container or pod.
* ``PROMETHEUS_MULTIPROC_DIR`` set (an empty folder, wiped when the host's workers start): every worker
  process writes its samples there (prometheus_client's multiprocess mode) and the first process to
  bind ``worker.metrics_port`` serves the sum over all of them; the others try again at each heartbeat,
  so another takes over within a heartbeat when it exits. One scrape target per host.

Queue depth (the lanes' backlog counters and each bucket stream's lag and pending count) is read at scrape
time, by the process that serves the endpoint, in one read (the broker's ``queue_snapshot``). Device memory is reported only when the
voices run on CUDA and ``torch`` is importable (``torch.cuda.mem_get_info``: the whole device, the
onnxruntime arena included); on CPU those series are absent.

The endpoint also answers ``/readyz`` (200 once the voices are loaded and warm, else 503) and
``/livez`` (200 while the voices load and then while the heartbeat thread beats), for Kubernetes probes.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, make_server


log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
SIZE_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
LIVE_S = 30.0  # /livez fails when the heartbeat thread has not beaten for this long
SLACK_BUCKETS = (-10.0, -5.0, -2.0, -1.0, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # histogram | counter | gauge
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()
    multiprocess_mode: str = ""

    def sample_names(self) -> set[str]:
        """The names the series of this metric appear under in the exposition."""
        if self.kind == "histogram":
            return {f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count"}
        if self.kind == "counter":
            return {f"{self.name}_total"}
        return {self.name}


# Recorded by every worker process (summed over processes in multiprocess mode).
RECORDED = (
    MetricSpec("ttsfarm_queue_wait_seconds", "histogram", "Wait of a segment from its entry's arrival to its batch's start",
               ("lane", "bucket"), LATENCY_BUCKETS),
    MetricSpec("ttsfarm_batch_size", "histogram", "Segments per model call", ("voice",), SIZE_BUCKETS),
    MetricSpec("ttsfarm_padding_waste_ratio", "histogram", "Share of a batch's input that is padding", ("voice",), RATIO_BUCKETS),
    MetricSpec("ttsfarm_inference_seconds", "histogram", "Wall time of one model call (one batch)", ("voice",), LATENCY_BUCKETS),
    MetricSpec("ttsfarm_real_time_factor", "histogram", "Inference seconds per second of audio made, per batch", ("voice",),
               RTF_BUCKETS),
    MetricSpec("ttsfarm_first_chunk_seconds", "histogram",
               "From a job's creation to its first segment's chunks published (the first chunk a client can play)",
               ("lane",), LATENCY_BUCKETS),
    MetricSpec("ttsfarm_vocoder_windows", "counter",
               "Vocoder windows made (streamed segments of two-stage voices; a whole segment is not counted)", ("voice",)),
    MetricSpec("ttsfarm_replay_mismatches", "counter",
               "Redone streamed segments whose frames, made again from their seed, came out another length than the "
               "first attempt's (its later windows may not join seamlessly)", ("voice",)),
    MetricSpec("ttsfarm_publish_slack_seconds", "histogram",
               "Slack of a unit of audio (a window, a whole segment) when published: its job's first chunk against the "
               "target, later ones against the moment its listener would run dry (negative: late; workers/schedule.py)",
               ("lane", "unit"), SLACK_BUCKETS),
    MetricSpec("ttsfarm_late_units", "counter", "Units of audio published after their deadline (done anyway, never dropped)",
               ("lane", "unit")),
    MetricSpec("ttsfarm_underrun_risk_jobs", "gauge",
               "Units a deadline-scheduled loop holds or sees waiting whose listener runs dry within scheduling.risk_slack_ms",
               ("loop",), multiprocess_mode="livesum"),
    MetricSpec("ttsfarm_audio_seconds", "counter", "Seconds of audio published, pauses included", ("voice",)),
    MetricSpec("ttsfarm_segments", "counter", "Segments published", ("voice", "lane")),
    MetricSpec("ttsfarm_errors", "counter",
               "Errors by code; stage: job (a job failed here), dead_letter (an entry was dead-lettered), "
               "attempt (one try failed and will be retried)", ("code", "stage")),
    MetricSpec("ttsfarm_voice_reloads", "counter", "Hot voice reloads by result", ("voice", "result")),
    MetricSpec("ttsfarm_session_create_seconds", "gauge", "Time to create the model's inference session", ("model",),
               multiprocess_mode="livemostrecent"),
    MetricSpec("ttsfarm_voice_version", "gauge", "Version of the voice in service (1 at start, +1 per hot reload)", ("voice",),
               multiprocess_mode="livemax"),
    MetricSpec("ttsfarm_voice_info", "gauge",
               "1 for the execution provider and precision each voice is served on (0 for what a reload replaced)",
               ("voice", "provider", "precision"), multiprocess_mode="livemax"),
    MetricSpec("ttsfarm_voice_stage_info", "gauge",
               "1 per stage of a loaded voice, labelled with the model file and the precision really served",
               ("voice", "stage", "model", "precision"), multiprocess_mode="livemax"),
)

# Read at scrape time by the process serving the endpoint.
COLLECTED = (
    MetricSpec("ttsfarm_backlog_segments", "gauge", "Segments queued in the lane (admission counter)", ("lane",)),
    MetricSpec("ttsfarm_backlog_audio_seconds", "gauge", "Predicted seconds of audio queued in the lane", ("lane",)),
    MetricSpec("ttsfarm_queue_lag_entries", "gauge", "Entries of a bucket stream not yet delivered to any worker",
               ("lane", "bucket")),
    MetricSpec("ttsfarm_queue_pending_entries", "gauge", "Entries of a bucket stream claimed and not yet acked",
               ("lane", "bucket")),
    MetricSpec("ttsfarm_device_memory_used_bytes", "gauge", "Accelerator memory in use (whole device; CUDA only)", ("device",)),
    MetricSpec("ttsfarm_device_memory_total_bytes", "gauge", "Accelerator memory in all (CUDA only)", ("device",)),
    MetricSpec("ttsfarm_redis_master_changes", "counter",
               "Failovers this worker process followed: changes of the Sentinel group's master it connects to", ()),
    MetricSpec("ttsfarm_redis_master_info", "gauge",
               "1, labelled with the Sentinel group's master this worker process last connected to", ("address",)),
)


def metric_names() -> set[str]:
    """Every sample name a worker's endpoint can expose (for dashboards and their tests)."""
    return {n for spec in (*RECORDED, *COLLECTED) for n in spec.sample_names()}


def _safe(fn: F) -> F:
    """Metrics never break the work: log the first failure of each hook, then only at debug level."""
    warned: set[str] = set()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            level = logging.DEBUG if fn.__name__ in warned else logging.WARNING
            warned.add(fn.__name__)
            log.log(level, "metrics hook %s failed (the work goes on)", fn.__name__, exc_info=True)
            return None

    return wrapper  # type: ignore[return-value]


class WorkerMetrics:
    """One per worker process. With ``enabled`` false only the plain counters the heartbeat carries
    are kept (errors by code, recent errors, segments per minute)."""

    def __init__(self, *, enabled: bool, port: int = 0, host: str = "0.0.0.0", multiproc_dir: str = "") -> None:
        self.enabled = enabled
        self.port = port
        self.host = host
        self.multiproc_dir = multiproc_dir
        self.started = time.time()
        self.error_counts: collections.Counter[str] = collections.Counter()
        self.windows_total = 0
        self.late_units = 0  # units published after their deadline (the heartbeat carries it)
        self.recent_errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=10)
        self.last_reload: dict[str, Any] = {}
        self._served: dict[str, tuple[str, str, str]] = {}  # voice -> its ttsfarm_voice_info labels now
        self._rate: collections.deque[tuple[float, int]] = collections.deque(maxlen=64)
        self._lock = threading.Lock()
        self._server: Any = None
        self._serve_failed_logged = False
        self._collector: tuple[Any, FarmCollector] | None = None
        self.registry: Any = None
        self.m: dict[str, Any] = {}
        if enabled:
            self._create()

    @classmethod
    def from_settings(cls, worker: Any, env: Mapping[str, str]) -> WorkerMetrics:
        """``worker`` is ``settings.worker``; ``env`` the process environment (for PROMETHEUS_MULTIPROC_DIR)."""
        multiproc = env.get("PROMETHEUS_MULTIPROC_DIR", "")
        port = int(worker.metrics_port)
        return cls(enabled=port > 0 or bool(multiproc), port=port, host=str(getattr(worker, "metrics_host", "0.0.0.0")),
                   multiproc_dir=multiproc)

    def _create(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        # In multiprocess mode the values live in files and are read back by MultiProcessCollector;
        # registering them too would expose this process's share twice.
        self.registry = None if self.multiproc_dir else CollectorRegistry(auto_describe=True)
        for spec in RECORDED:
            kwargs: dict[str, Any] = {"registry": self.registry}
            if spec.kind == "histogram":
                self.m[spec.name] = Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, **kwargs)
            elif spec.kind == "counter":
                self.m[spec.name] = Counter(spec.name, spec.help, spec.labels, **kwargs)
            else:
                mode: Any = spec.multiprocess_mode or "all"
                self.m[spec.name] = Gauge(spec.name, spec.help, spec.labels, multiprocess_mode=mode, **kwargs)

    # -- the endpoint ------------------------------------------------------------------------------
    @_safe
    def serve(self, farm: Any) -> bool:
        """Bind the endpoint if this process should and can; True while it serves. Called at start and
        at every heartbeat (in multiprocess mode another process may hold the port until it exits)."""
        if not self.enabled or self.port <= 0 or self._server is not None:
            return self._server is not None
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import ThreadingWSGIServer

        if self.multiproc_dir:
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = CollectorRegistry(auto_describe=True)
            MultiProcessCollector(registry, path=self.multiproc_dir)
        else:
            registry = self.registry
        app = _endpoint(registry, ready=lambda: farm.state == "serving",
                        live=lambda: farm.state == "loading" or time.time() - farm.last_beat < LIVE_S)
        try:
            server = make_server(self.host, self.port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
        except OSError as exc:
            if not self._serve_failed_logged:
                self._serve_failed_logged = True
                how = "another worker on this host serves the shared registry" if self.multiproc_dir else "retrying"
                log.info("metrics port %s:%d is taken (%s); %s", self.host, self.port, exc.strerror, how)
            return False
        collector = FarmCollector(farm)
        registry.register(collector)
        self._collector = (registry, collector)
        threading.Thread(target=server.serve_forever, name="ttsfarm-metrics", daemon=True).start()
        self._server = server
        log.info("metrics on http://%s:%d/metrics (%s)", self.host, self.port,
                 f"all processes in {self.multiproc_dir}" if self.multiproc_dir else "this process")
        return True

    @property
    def serving(self) -> bool:
        return self._server is not None

    @_safe
    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._collector is not None:
            registry, collector = self._collector
            registry.unregister(collector)
            self._collector = None
        if self.multiproc_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid(), self.multiproc_dir)

    # -- hooks the loop calls ----------------------------------------------------------------------
    @_safe
    def batch(self, stats: Mapping[str, Any]) -> None:
        """``BatchRunner.on_batch``: one model call and the queue waits of its items."""
        if not self.enabled:
            return
        voice = str(stats["voice"])
        self.m["ttsfarm_batch_size"].labels(voice).observe(stats["size"])
        self.m["ttsfarm_padding_waste_ratio"].labels(voice).observe(stats["padding_waste"])
        self.m["ttsfarm_inference_seconds"].labels(voice).observe(stats["infer_s"])
        audio_s = float(stats.get("audio_s") or 0.0)
        if audio_s > 0:
            self.m["ttsfarm_real_time_factor"].labels(voice).observe(stats["infer_s"] / audio_s)
        waits = stats.get("queue_wait_s") or []
        lanes = stats.get("lanes") or ["unknown"] * len(waits)
        buckets = stats.get("buckets") or ["unknown"] * len(waits)
        for wait, lane, bucket in zip(waits, lanes, buckets):
            self.m["ttsfarm_queue_wait_seconds"].labels(lane, str(bucket)).observe(max(0.0, wait))

    @_safe
    def segment_published(self, job: Any, audio_s: float, *, first_chunk: bool = True) -> None:
        """A segment's last chunk is out; ``first_chunk``: its first too (published whole, not streamed)."""
        if not self.enabled:
            return
        self.m["ttsfarm_audio_seconds"].labels(job.voice).inc(max(0.0, audio_s))
        self.m["ttsfarm_segments"].labels(job.voice, job.lane).inc()
        if first_chunk:
            self.first_chunk(job)

    @_safe
    def published_slack(self, lane: str, unit: str, slack_s: float) -> None:
        """A unit of audio went out with ``slack_s`` to spare (negative: late, counted)."""
        if slack_s < 0:
            self.late_units += 1
        if not self.enabled:
            return
        self.m["ttsfarm_publish_slack_seconds"].labels(lane, unit).observe(slack_s)
        if slack_s < 0:
            self.m["ttsfarm_late_units"].labels(lane, unit).inc()

    @_safe
    def underrun_risk(self, loop: int, units: int) -> None:
        if self.enabled:
            self.m["ttsfarm_underrun_risk_jobs"].labels(str(loop)).set(units)

    @_safe
    def replay_mismatch(self, voice: str) -> None:
        if self.enabled:
            self.m["ttsfarm_replay_mismatches"].labels(voice).inc()

    @_safe
    def windows(self, voice: str, n: int) -> None:
        self.windows_total += n
        if self.enabled and n:
            self.m["ttsfarm_vocoder_windows"].labels(voice).inc(n)

    @_safe
    def first_chunk(self, job: Any) -> None:
        """A segment's first chunk is out (its first window, or the whole segment)."""
        if not self.enabled:
            return
        if job.seg == 0 and job.created:
            # Clients read chunks in segment order, so segment 0's chunks are the first they can play.
            self.m["ttsfarm_first_chunk_seconds"].labels(job.lane).observe(max(0.0, time.time() - job.created))

    @_safe
    def error(self, code: str, *, stage: str = "job", job_id: str = "", message: str = "") -> None:
        with self._lock:
            self.error_counts[code] += 1
            self.recent_errors.append({"ts": round(time.time(), 3), "code": code, "stage": stage, "job": job_id,
                                       "message": message[:160]})
        if self.enabled:
            self.m["ttsfarm_errors"].labels(code, stage).inc()

    @_safe
    def voices_loaded(self, bank: Any) -> None:
        """After the first load and after each hot reload: session create times and voice versions."""
        if not self.enabled:
            return
        for name, info in bank.describe().items():
            self.m["ttsfarm_voice_version"].labels(name).set(info["version"])
            served = (name, info.get("provider") or "", info.get("precision") or "")
            before = self._served.get(name)
            if before is not None and before != served:
                self.m["ttsfarm_voice_info"].labels(*before).set(0)
            self._served[name] = served
            self.m["ttsfarm_voice_info"].labels(*served).set(1)
            if info.get("model") and info.get("create_s") is not None:
                self.m["ttsfarm_session_create_seconds"].labels(info["model"]).set(info["create_s"])
            for stage, st in (info.get("stages") or {}).items():
                self.m["ttsfarm_voice_stage_info"].labels(name, stage, st["model"], st["precision"]).set(1)

    @_safe
    def reloaded(self, result: Mapping[str, Any]) -> None:
        with self._lock:
            self.last_reload = dict(result)
        if self.enabled:
            outcome = "ok" if result.get("ok") else "failed"
            for name in result.get("voices") or ["*"]:
                self.m["ttsfarm_voice_reloads"].labels(name, outcome).inc()

    @_safe
    def heartbeat_fields(self, segments_total: int) -> dict[str, Any]:
        """What the worker's heartbeat adds from here (read by `ttsfarm status`)."""
        now = time.time()
        with self._lock:
            self._rate.append((now, segments_total))
            window = [(t, n) for t, n in self._rate if now - t <= 60.0]
            rate = 0.0
            if len(window) >= 2 and window[-1][0] > window[0][0]:
                rate = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0]) * 60.0
            return {"started": round(self.started, 3), "segments_per_min": round(rate, 2),
                    "errors": dict(self.error_counts), "recent_errors": list(self.recent_errors),
                    "metrics_port": self.port if self.serving else 0, "reload": self.last_reload,
                    "vocoder_windows": self.windows_total, "late_units": self.late_units}


class FarmCollector:
    """Scrape-time series: the queues (backlog, per-bucket lag and pending, from the farm's broker) and the device."""

    def __init__(self, farm: Any) -> None:
        self.farm = farm
        self._cuda: Callable[[], tuple[int, int, int] | None] | None = None

    def describe(self) -> list[Any]:
        return []  # no fixed set of series: the collector is registered without being described

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield from self._queues(GaugeMetricFamily)
        yield from self._device(GaugeMetricFamily)
        yield from self._redis()

    def _queues(self, family: Any) -> Iterator[Any]:
        farm = self.farm
        try:
            snap = farm.broker.queue_snapshot(farm.settings.queue.n_buckets)
        except Exception as exc:
            log.warning("metrics: cannot read the queues: %s", exc)
            return
        seg = family("ttsfarm_backlog_segments", COLLECTED[0].help, labels=["lane"])
        sec = family("ttsfarm_backlog_audio_seconds", COLLECTED[1].help, labels=["lane"])
        for lane, backlog in snap.backlog.items():
            seg.add_metric([lane], backlog.segments)
            sec.add_metric([lane], backlog.seconds)
        lag = family("ttsfarm_queue_lag_entries", COLLECTED[2].help, labels=["lane", "bucket"])
        pending = family("ttsfarm_queue_pending_entries", COLLECTED[3].help, labels=["lane", "bucket"])
        for q in snap.buckets:
            if not q.grouped:
                continue
            if q.lag is not None:  # Redis < 7 or a trimmed stream: unknown, left out
                lag.add_metric([q.lane, str(q.bucket)], float(q.lag))
            pending.add_metric([q.lane, str(q.bucket)], float(q.pending))
        yield from (seg, sec, lag, pending)

    def _redis(self) -> Iterator[Any]:
        """The Sentinel group's master and the failovers followed (nothing for a plain server)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        master = self.farm.broker.master()
        if not master:
            return
        changes = CounterMetricFamily("ttsfarm_redis_master_changes", COLLECTED[6].help,
                                      value=self.farm.broker.master_changes)
        info = GaugeMetricFamily("ttsfarm_redis_master_info", COLLECTED[7].help, labels=["address"])
        info.add_metric([master], 1.0)
        yield from (changes, info)

    def _device(self, family: Any) -> Iterator[Any]:
        if self._cuda is None:
            self._cuda = _cuda_probe(self.farm)
        reading = self._cuda()
        if reading is None:
            return
        device, used, total = reading
        used_f = family("ttsfarm_device_memory_used_bytes", COLLECTED[4].help, labels=["device"])
        total_f = family("ttsfarm_device_memory_total_bytes", COLLECTED[5].help, labels=["device"])
        used_f.add_metric([f"cuda:{device}"], float(used))
        total_f.add_metric([f"cuda:{device}"], float(total))
        yield from (used_f, total_f)


def _cuda_probe(farm: Any) -> Callable[[], tuple[int, int, int] | None]:
    """A reader of device memory when the voices run on CUDA and torch is there; else one that says None."""
    def nothing() -> None:
        return None

    try:
        factory = farm.bank.factory
        on_cuda = any("CUDA" in str(p) for p in factory.providers()) and not factory.fell_back_to_cpu
        if not on_cuda:
            return nothing
        import torch

        if not torch.cuda.is_available():
            return nothing
    except Exception as exc:  # no torch, no driver: the series are left out
        log.info("device memory metrics off: %s", exc)
        return nothing
    device = int(farm.settings.runtime.cuda_device_id)

    def read() -> tuple[int, int, int] | None:
        try:
            free, total = torch.cuda.mem_get_info(device)
            return device, int(total - free), int(total)
        except Exception as exc:
            log.debug("device memory read failed: %s", exc)
            return None

    return read


def _endpoint(registry: Any, *, ready: Callable[[], bool], live: Callable[[], bool]) -> Callable[..., Any]:
    from prometheus_client import make_wsgi_app

    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in ("/readyz", "/livez"):
            try:
                ok = ready() if path == "/readyz" else live()
            except Exception:
                ok = False
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"not ready\n"]
        return metrics_app(environ, start_response)

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass
