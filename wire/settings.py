"""The farm's typed settings and the one loader that reads every section.

``load_settings()`` reads ``configs/settings.toml`` and ``configs/voices.toml`` (or the folder named by
``config_dir`` or ``TTSFARM_CONFIG_DIR``), then the user's own voices (``voices.toml`` in ``runtime.user_dir``,
written by ``ttsfarm voices add``), and applies ``TTSFARM_<SECTION>_<KEY>`` overrides from the mapping
it is given. Only entry points (the CLI's ``main``, the Celery app module, the gateway's app factory,
scripts) pass ``os.environ``; everything else takes a ``Settings`` (or one of its sections) as an argument.

Sections: the compute package's own (``frontend``, ``runtime``, ``quality_gate`` and the voice catalogue, from
``pipeline.settings``) and the farm's, here: ``redis``, ``queue``, ``storage``, ``worker``, the workers' policy
(``streaming``, ``scheduling``), ``gateway`` (the HTTP front end) and ``grpc`` (the Riva gRPC front end; a new front
end adds its section here and to ``SECTIONS``). As in ``pipeline.settings``, each setting's meaning is the string under its field: the
README's settings table is made from them (``scripts/settings_table.py``), and ``configs/settings.toml`` lists
every key with its default.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import CONFIG_DIR, PIPELINE_SECTIONS, Catalogue, PipelineSettings, parse_catalogue, with_user_voices


@dataclass(frozen=True)
class RedisSettings:
    """The farm's Redis: queues, job records, results streams, and Celery's broker."""

    url: str = "redis://127.0.0.1:6379/0"
    """The Redis every producer and worker uses (a password and ``rediss://`` go in the URL); or, in Celery's form,
    the Sentinels of a group: ``sentinel://HOST:PORT;sentinel://HOST:PORT[/DB]`` (a password as
    ``sentinel://:PASSWORD@HOST:PORT``, TLS as ``?ssl=true`` with redis-py's ``ssl_*`` options)."""
    key_prefix: str = "ttsfarm"
    """Every key the farm writes starts with ``<key_prefix>:``, so several farms can share one Redis."""
    socket_timeout_s: float = 10.0
    """How long a Redis command waits for its reply before the connection counts as lost (seconds)."""
    master_name: str = ""
    """With a ``sentinel://`` url: the name the Sentinels know the master by (their ``sentinel monitor NAME``)."""
    sentinel_password: str = ""
    """The Sentinels' own password (their ``requirepass``), when they have one; the url's password is the data
    nodes'."""
    wait_replicas: int = 0
    """A submit is acknowledged once this many replicas hold the job (Redis ``WAIT``, in the admission's round
    trip), so a failover cannot lose it; while fewer answer within ``wait_timeout_ms`` the submit is retried, then
    fails with BACKEND_UNAVAILABLE. 0: no wait (a master's loss may drop the last jobs it acknowledged)."""
    wait_timeout_ms: int = 500
    """How long a submit waits for ``wait_replicas`` replicas (milliseconds)."""
    shards: tuple[str, ...] = ()
    """More Redis nodes (or Sentinel groups, with ``master_name``) the farm's jobs spread over, after ``url``, which
    is shard 0 and keeps Celery's broker and the heartbeats: each job lives on one shard chosen from its id, workers
    consume every shard. ``TTSFARM_REDIS_SHARDS``: comma-separated URLs. Empty: ``url`` alone. Change it only on a
    drained farm."""

    @classmethod
    def parse_env(cls, name: str, raw: str) -> object:
        """One ``TTSFARM_REDIS_<FIELD>`` value: ``shards`` as comma-separated URLs (or a TOML list), the others as
        TOML values."""
        if name != "shards" or raw.lstrip().startswith("["):
            return raw
        return tuple(url.strip() for url in raw.split(",") if url.strip())

    def __post_init__(self) -> None:
        if self.url.strip().lower().startswith("sentinel://") and not self.master_name:
            raise InputError("setting redis.master_name: a sentinel:// redis.url needs the name of the Sentinels' "
                             "master (TTSFARM_REDIS_MASTER_NAME)", code=BAD_OPTION)
        if self.wait_replicas < 0 or self.wait_timeout_ms <= 0:
            raise InputError("settings redis.wait_replicas must be 0 or more and redis.wait_timeout_ms above 0",
                             code=BAD_OPTION)
        nodes = [self.url.strip(), *(url.strip() for url in self.shards)]
        if any(not url for url in nodes[1:]) or len(set(nodes)) < len(nodes):
            raise InputError(f"setting redis.shards: {list(self.shards)!r} lists an empty URL, redis.url, or one URL twice "
                             "(it names the nodes after redis.url, each once)", code=BAD_OPTION)
        if any(url.lower().startswith("sentinel://") for url in nodes[1:]) and not self.master_name:
            raise InputError("setting redis.master_name: a sentinel:// shard needs the name of the Sentinels' master "
                             "(TTSFARM_REDIS_MASTER_NAME)", code=BAD_OPTION)


@dataclass(frozen=True)
class QueueSettings:
    """The queues and how a worker batches from them: length buckets, lanes, loops, retries and backpressure."""

    bucket_edges_s: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0)
    """Predicted audio seconds that split segments into length buckets: one stream per bucket and lane, so a
    batch holds segments of like length."""
    window_ms: int = 200
    """The batching window: a batch waits at most this long after its head's arrival for segments to join it."""
    continuous_batching: bool = True
    """The window only while the device is busy: a batch whose device is idle (no stage call of the process is on it:
    ``pipeline.voices.device_use``) goes at once with the joiners already queued, and one gathering while it is busy
    goes when it frees or the window closes. false: every batch waits out its window. Matters where batches hold more
    than one (CUDA)."""
    first_segments_join: str = "auto"
    """How callers' first segments (each interactive job's first) that a loop claimed together form its batches:
    ``any``: they go first, in one batch whatever their lengths (same voice and options, up to the cap), so none
    waits out a batch of others' it was claimed with; ``fit``: by length like the rest (``tolerance``); ``auto``:
    ``any`` where the sessions run on CUDA (padded rows cost little there), ``fit`` elsewhere."""
    max_batch_cpu: int = 1
    """The largest batch on CPU (batching brings no speed there: docs/lab/cpu-layout-and-throughput.md)."""
    max_batch_cuda: int = 8
    """The largest batch on CUDA."""
    tolerance: float = 0.10
    """The relative length difference |a-b|/max(a,b) two segments may have to share a batch ..."""
    tolerance_max: float = 0.35
    """... widening to this as the batch's head waits out the window."""
    bulk_aging_ms: int = 3000
    """A bulk head older than this is served before interactive work, so bulk never starves ..."""
    interactive_streak: int = 4
    """... and at least once every this many interactive batches."""
    chunk_ms: int = 500
    """Audio per results-stream record (milliseconds of PCM), where a request does not ask for its own."""
    results_maxlen: int = 4000
    """Entries a job's results stream keeps; a reader that falls further behind gets STREAM_TRIMMED."""
    job_ttl_s: int = 86400
    """How long a job's status and results stream stay in Redis (seconds)."""
    inference_threads: int = 0
    """Inference loops per worker process, sharing one model session each. 0: on CPU one single-threaded loop
    per usable core (affinity, cgroup quota; ``runtime.intra_op_threads`` 0 becomes 1), the reserved interactive
    loops on top; on CUDA six loops (at most one per core), the reserved ones among them (workers/layout.py)."""
    finisher_threads: int = 1
    """Threads per worker process that end finished jobs (assembly, encoding, storage, final record) while the loops
    go on (workers/finisher.py); 0: each loop ends its jobs itself, before its next batch."""
    finisher_processes: int = 0
    """Processes per worker process that do the heavy part of those ends (assembly, encoding, storage, final record),
    each with its own Redis connection and storage client, so the loops' interpreter (one GIL) does not run it
    (workers/finisher.py). 0: the finisher threads (or with none, the loops) do it themselves. A GPU worker that stores
    into S3 should run two, with as many finisher threads (deploy/ does): boto3's uploads cost its loops' process
    ~3 ms of CPU a segment otherwise (docs/SCALING.md, "Per node")."""
    interactive_loops: int = 1
    """Of those loops, how many take interactive work only: one keeps callers' first chunks from waiting behind
    long bulk (book) segments (docs/lab/scheduling-and-first-audio.md)."""
    bulk_nice: int = 19
    """The OS nice (Linux, per thread) bulk batches run at: a book's segments give the cores to interactive
    batches at once and take all the idle time (full effect with single-threaded sessions); 0: off."""
    interactive_loop_threads: int = 0
    """On CPU the reserved loops run a session of their own with this many intra-op threads (0: one per usable
    core), so a caller's first chunk uses every idle core; equal to the other loops' threads, they share one
    session (less memory). On CUDA the session is shared."""
    max_deliveries: int = 5
    """A segment that fails this many times goes to the dead-letter stream, and its job fails."""
    claim_idle_ms: int = 30_000
    """Segments a dead worker held are taken over by other workers after this idle time (milliseconds; each worker
    looks every quarter of it)."""
    max_backlog_interactive_segments: int = 2000
    """Backpressure: a submit that would put more segments than this in the interactive lane raises
    OverloadedError (code OVERLOADED); 0: no limit."""
    max_backlog_interactive_seconds: float = 3600.0
    """The same limit in predicted audio seconds."""
    max_backlog_bulk_segments: int = 200_000
    """The bulk lane's limit in segments; 0: no limit."""
    max_backlog_bulk_seconds: float = 720_000.0
    """The bulk lane's limit in predicted audio seconds."""
    admission_horizon_s: float = 4.0
    """Audio of an interactive job admitted to the streams ahead of its playback (just-in-time admission,
    wire/admission.py), fixed at submit (the submitting client's setting); 0: a job's segments all at once."""
    admission_idle_ahead: int = 6
    """With nothing else queued, a job keeps up to this many segments in flight past its horizon (a lone long job
    then keeps every loop busy)."""
    admission_sweep_ms: int = 250
    """How often each worker admits staged segments that fell due between publishes (every second while no job has
    staged segments)."""

    @property
    def n_buckets(self) -> int:
        """Length buckets per lane: one more than the edges."""
        return len(self.bucket_edges_s) + 1

    def __post_init__(self) -> None:
        if self.first_segments_join not in ("auto", "any", "fit"):
            raise InputError(f"setting queue.first_segments_join must be auto, any or fit, not {self.first_segments_join!r}",
                             code=BAD_OPTION)


@dataclass(frozen=True)
class StorageSettings:
    """Where full job outputs are stored: an S3 bucket (AWS, MinIO) or a local folder (wire/storage/__init__.py)."""

    backend: str = "auto"
    """``auto`` (S3 when ``s3_bucket`` is set, else the local folder), ``s3`` or ``local``."""
    local_dir: str = "./out/storage"
    """The folder of the local backend."""
    prefix: str = "ttsfarm"
    """Every stored object's key starts with this, in the bucket or under the folder."""
    s3_bucket: str = ""
    """The bucket outputs go to."""
    s3_endpoint_url: str = ""
    """An S3-compatible endpoint (MinIO, moto), addressed path-style; empty: AWS in ``s3_region``."""
    s3_region: str = "us-east-1"
    """The bucket's region."""
    multipart_threshold_mb: int = 8
    """An upload larger than this goes multipart (MiB)."""
    multipart_chunk_mb: int = 8
    """The part size of a multipart upload (MiB; S3 raises parts below 5 MiB to 5 MiB)."""
    s3_connect_timeout_s: float = 5.0
    """How long connecting to the S3 endpoint may take (seconds)."""
    s3_read_timeout_s: float = 60.0
    """How long an S3 request may wait for data (seconds)."""
    s3_max_attempts: int = 3
    """Attempts of one S3 request in all, botocore's own retries included."""


@dataclass(frozen=True)
class WorkerSettings:
    """A worker process's own endpoint."""

    metrics_port: int = 0
    """The port of the worker's /metrics, /readyz and /livez (workers/metrics.py); 0: off."""
    metrics_host: str = "0.0.0.0"
    """The bind address of that endpoint."""


@dataclass(frozen=True)
class StreamingSettings:
    """How a worker streams a two-stage voice's segment: a window of audio at a time (workers/streaming.py, windows
    cut by pipeline/voices/windows.py). Sizes in milliseconds of audio; measured defaults in
    docs/lab/streaming-and-windows.md."""

    windowed: bool = True
    """Two-stage voices (joe, baker) vocode a segment in windows and publish each as it is made: the first chunk
    comes after the acoustic pass and one small window; false: whole segments (Kokoro always)."""
    first_window_ms: int = 300
    """Audio in a segment's first window (small: it starts the stream)."""
    window_ms: int = 4000
    """Audio in each later window (large: each boundary vocodes 2 x the vocoder's context again)."""
    first_window_when_queued: bool = False
    """The small first window also while other work waits for the loop. It costs 10-15 % more model time per
    short segment (docs/lab/streaming-and-windows.md), so by default a job gets it only when nothing else waits: under a backlog
    the queue, not the window, is the wait."""


@dataclass(frozen=True)
class SchedulingSettings:
    """Which unit a worker loop runs next (workers/schedule.py)."""

    mode: str = "deadline"
    """``deadline``: earliest deadline first over acoustic passes and vocoder windows, by each job's playback
    clock (the unit whose listener runs dry first); ``fifo``: batches in arrival order per lane, a batch's windows
    interleaved, and interactive work between a background batch's windows (docs/lab/scheduling-and-first-audio.md
    compares them)."""
    first_chunk_target_ms: int = 100
    """A new interactive job's first window is due this long after its arrival."""
    bulk_deadline_s: float = 20.0
    """Bulk (book) work is due this long after its arrival, or at the job's own deadline when that is sooner: it
    fills idle time and cannot starve."""
    play_margin_ms: int = 400
    """A playing job's next unit is due this long before its listener runs dry, so it is done, not started, by
    then; above ``streaming.first_window_ms``, so a caller's second window follows its small first one at once."""
    max_open: int = 8
    """Segments a loop holds with windows still to make; past it, it claims no new work."""
    risk_slack_ms: int = 500
    """A held job whose listener runs dry within this counts in ``ttsfarm_underrun_risk_jobs``."""

    def __post_init__(self) -> None:
        if self.mode not in ("deadline", "fifo"):
            raise InputError(f"setting scheduling.mode must be deadline or fifo, not {self.mode!r}", code=BAD_OPTION)


# OpenAI's built-in voice names. An OpenAI client sends one of these; by default each reads with the
# catalogue's default voice, so unmodified clients work. Set TTSFARM_GATEWAY_VOICE_ALIASES to change it.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar")


@dataclass(frozen=True)
class GatewaySettings:
    """The HTTP gateway (gateway/). ``TTSFARM_GATEWAY_*`` lists are comma-separated, aliases ``alloy=joe,nova=``."""

    host: str = "127.0.0.1"
    """The gateway's bind address."""
    port: int = 8000
    """The gateway's port."""
    api_keys: tuple[str, ...] = ()
    """Keys a client may send (``Authorization: Bearer <key>``, or ``?api_key=`` from a browser); empty: no
    authentication."""
    cors: tuple[str, ...] = ()
    """Origins allowed to call from a browser (``["*"]``: any); empty: no CORS headers."""
    voice_aliases: Mapping[str, str] = field(default_factory=lambda: {name: "" for name in OPENAI_VOICES})
    """Voice names a client may send and the catalogue voice each reads with (``""``: the catalogue's default
    voice): OpenAI's names, so unmodified OpenAI clients work."""
    max_input_chars: int = 4096
    """The longest ``input`` of /v1/audio/speech (characters), as OpenAI's API; /v1/jobs takes up to
    ``frontend.max_text_chars``."""
    worker_fresh_s: float = 10.0
    """A worker counts as alive when its heartbeat is this recent (seconds) and says serving; with none alive the
    gateway answers 503 NO_WORKERS."""
    first_chunk_timeout_s: float = 60.0
    """/v1/audio/speech answers 504 when no audio came by then (seconds)."""
    job_timeout_s: float = 900.0
    """The longest a stream or a wait follows one job (seconds)."""
    keepalive_s: float = 15.0
    """The interval of keep-alive comments on an idle live stream (SSE; seconds)."""
    pcm_sample_rate: int = 24000
    """The sample rate of /v1/audio/speech's ``response_format=pcm`` (mono s16le), as OpenAI's."""
    agent_idle_s: float = 60.0
    """The agents' socket (/v1/agents) closes with IDLE_TIMEOUT after this long with no message from its client and no
    audio sent (seconds); a ``ping`` message keeps it open."""
    agent_max_contexts: int = 16
    """Contexts open at once on one agents' socket; one more is refused with TOO_MANY_CONTEXTS."""

    @classmethod
    def parse_env(cls, name: str, raw: str) -> object:
        """One ``TTSFARM_GATEWAY_<FIELD>`` value: lists are comma-separated, aliases ``a=b,c=d``."""
        return _parse_env("GATEWAY", raw, getattr(cls(), name), name)

    def __post_init__(self) -> None:
        _check_front_end("gateway", self.port, self.api_keys)
        if self.agent_idle_s <= 0 or self.agent_max_contexts < 1:
            raise InputError("gateway agent_idle_s must be > 0 and agent_max_contexts >= 1", code=BAD_OPTION)


RIVA_VOICES = {"English-US.Male-1": "joe", "Mandarin-CN.Female-1": "baker", "Mandarin-CN.Male-1": "kumo",
               "Mandarin-CN.Female-2": "alpha"}


@dataclass(frozen=True)
class GrpcSettings:
    """The gRPC front end (grpcfront/), NVIDIA Riva's TTS protocol. ``TTSFARM_GRPC_*`` lists are comma-separated,
    aliases ``English-US.Male-1=joe``."""

    host: str = "127.0.0.1"
    """The gRPC server's bind address."""
    port: int = 50051
    """The gRPC server's port (Riva's)."""
    api_keys: tuple[str, ...] = ()
    """Keys a client may send (metadata ``authorization: Bearer <key>``); empty: no authentication."""
    voice_aliases: Mapping[str, str] = field(default_factory=lambda: dict(RIVA_VOICES))
    """Riva-style voice names a request may use (any case) and the catalogue voice each reads with (``""``: the
    catalogue's default voice)."""
    max_message_bytes: int = 4 * 1024 * 1024
    """The largest request or response message (bytes); a whole ``Synthesize`` answer counts as one message."""
    max_concurrent_rpcs: int = 256
    """Calls served at once; the next one is refused with ``RESOURCE_EXHAUSTED``."""
    worker_fresh_s: float = 10.0
    """A worker counts as alive when its heartbeat is this recent (seconds) and says serving; with none alive a
    call is refused with ``UNAVAILABLE`` NO_WORKERS."""
    first_chunk_timeout_s: float = 60.0
    """A call ends with ``DEADLINE_EXCEEDED`` (and its job is cancelled) when no audio came by then (seconds)."""
    job_timeout_s: float = 900.0
    """The longest one call follows its job (seconds)."""
    metrics_port: int = 0
    """The port of the front end's Prometheus metrics (``/metrics``); 0: not served."""

    @classmethod
    def parse_env(cls, name: str, raw: str) -> object:
        """One ``TTSFARM_GRPC_<FIELD>`` value: lists are comma-separated, aliases ``a=b,c=d``."""
        return _parse_env("GRPC", raw, getattr(cls(), name), name)

    def __post_init__(self) -> None:
        _check_front_end("grpc", self.port, self.api_keys)
        if not 0 <= self.metrics_port < 65536:
            raise InputError(f"grpc metrics_port must be 0..65535, not {self.metrics_port}", code=BAD_OPTION)
        if self.max_message_bytes < 65536 or self.max_concurrent_rpcs < 1:
            raise InputError("grpc max_message_bytes must be at least 65536 and max_concurrent_rpcs at least 1",
                             code=BAD_OPTION)


def _check_front_end(section: str, port: int, api_keys: tuple[str, ...]) -> None:
    if not (0 < port < 65536):
        raise InputError(f"{section} port must be 1..65535, not {port}", code=BAD_OPTION)
    if any(not k for k in api_keys):
        raise InputError(f"{section} api_keys must not contain an empty key", code=BAD_OPTION)


def _parse_env(section: str, raw: str, default: object, name: str) -> object:
    try:
        return _parse(raw, default)
    except ValueError:
        raise InputError(f"setting TTSFARM_{section}_{name.upper()}: cannot read {raw!r}", code=BAD_OPTION) from None


def _parse(raw: str, default: object) -> object:
    if isinstance(default, bool):
        if raw.strip().lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise ValueError(raw)
        return raw.strip().lower() in ("1", "true", "yes")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, tuple):
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    if isinstance(default, Mapping):
        pairs = [item.split("=", 1) for item in raw.split(",") if item.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(raw)
        return {a.strip().lower(): b.strip() for a, b in pairs}
    return raw


@dataclass(frozen=True)
class Settings(PipelineSettings):
    """Every section: the compute package's and the farm's."""

    redis: RedisSettings = field(default_factory=RedisSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    streaming: StreamingSettings = field(default_factory=StreamingSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)


SECTIONS: dict[str, type] = {
    **PIPELINE_SECTIONS,
    "redis": RedisSettings,
    "queue": QueueSettings,
    "storage": StorageSettings,
    "worker": WorkerSettings,
    "streaming": StreamingSettings,
    "scheduling": SchedulingSettings,
    "gateway": GatewaySettings,
    "grpc": GrpcSettings,
}


def _coerce(section: str, key: str, value: Any, target: Any, annotation: str = "") -> Any:
    """Convert a TOML or environment value to the type of the field's default (a tuple's items: strings where
    the field is annotated ``tuple[str, ...]``, numbers otherwise)."""
    if isinstance(value, str) and not isinstance(target, str):
        try:
            value = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise InputError(f"setting {section}.{key}: cannot read {value!r}", code=BAD_OPTION) from None
    if isinstance(target, bool):
        if not isinstance(value, bool):
            raise InputError(f"setting {section}.{key} must be true or false", code=BAD_OPTION)
        return value
    if isinstance(target, tuple):
        return tuple(str(v) for v in value) if annotation.startswith("tuple[str") else tuple(float(v) for v in value)
    if isinstance(target, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(target)):
        raise InputError(f"setting {section}.{key} must be {type(target).__name__}", code=BAD_OPTION)
    return value


def _build_section(name: str, cls: type, data: Mapping[str, Any]) -> Any:
    defaults = cls()
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise InputError(f"unknown setting(s) in [{name}]: {', '.join(sorted(unknown))}", code=BAD_OPTION)
    annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return cls(**{k: _coerce(name, k, v, getattr(defaults, k), annotations[k]) for k, v in data.items()})


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``TTSFARM_<SECTION>_<KEY>`` values by section; a section with its own ``parse_env`` (the gateway's
    comma-separated lists) reads its values itself, the others as TOML values."""
    out: dict[str, dict[str, Any]] = {}
    for var, value in env.items():
        if not var.startswith("TTSFARM_"):
            continue
        rest = var[len("TTSFARM_") :].lower()
        for section in sorted(SECTIONS, key=len, reverse=True):
            if rest.startswith(section + "_"):
                key, cls = rest[len(section) + 1 :], SECTIONS[section]
                known = {f.name for f in dataclasses.fields(cls)}
                parse = getattr(cls, "parse_env", None)
                out.setdefault(section, {})[key] = parse(key, value) if parse is not None and key in known else value
                break
    return out


def load_settings(
    config_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read the settings files and apply ``TTSFARM_*`` overrides from ``env``.

    The entry point passes ``os.environ``; ``TTSFARM_CONFIG_DIR`` in it names another configs folder.
    """
    env = env or {}
    folder = Path(config_dir or env.get("TTSFARM_CONFIG_DIR") or CONFIG_DIR)
    raw: dict[str, Any] = {}
    settings_file = folder / "settings.toml"
    if settings_file.exists():
        raw = tomllib.loads(settings_file.read_text(encoding="utf-8"))
    for section, values in _env_overrides(env).items():
        raw.setdefault(section, {}).update(values)
    sections = {name: _build_section(name, cls, raw.get(name, {})) for name, cls in SECTIONS.items()}
    voices_file = folder / "voices.toml"
    catalogue = parse_catalogue(tomllib.loads(voices_file.read_text(encoding="utf-8"))) if voices_file.exists() else Catalogue({}, "")
    user_file = sections["runtime"].user_catalogue  # the user's own voices (`ttsfarm voices add`), after the shipped
    if user_file.is_file():
        try:
            user = parse_catalogue(tomllib.loads(user_file.read_text(encoding="utf-8")))
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{user_file} is not valid TOML: {exc}", code=BAD_OPTION) from exc
        catalogue = with_user_voices(catalogue, user, user_file)
    return Settings(catalogue=catalogue, **sections)


def settings_from_environment(config_dir: str | Path | None = None, *, redis_url: str | None = None) -> Settings:
    """``load_settings`` with this process's ``TTSFARM_*`` overrides: what an entry point loads, and what the
    SDK's ``from_url`` uses when it is given no settings (so it honours the same overrides as the CLI).
    ``redis_url`` (a front end's ``--redis``) wins over ``TTSFARM_REDIS_URL``."""
    return load_settings(config_dir, env={**os.environ, **({"TTSFARM_REDIS_URL": redis_url} if redis_url else {})})
