"""Builds every onnxruntime session of the process, with providers and threads from settings.

This is the only module that creates an ``InferenceSession``: CUDA when configured and present (with the
device arena capped), CPU otherwise, and a clear ``ModelError`` when a model file is missing or corrupt.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DEVICE_UNAVAILABLE, MODEL_CORRUPT, MODEL_LOAD_FAILED, MODEL_MISSING, MODEL_STAGE_FAILED, ModelError
from pipeline.settings import RuntimeSettings
from pipeline.voices.binding import StageBinding
from pipeline.voices.device_use import DEVICE_USE
from pipeline.voices.gpu import ShapePolicy, wants_io_binding

log = logging.getLogger(__name__)

_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


@dataclass(frozen=True)
class SessionInfo:
    """What was built, for logs and metrics."""

    model: Path
    providers: tuple[str, ...]
    create_s: float


def resolve_resource(ref: str) -> Path:
    """``pkg:package/path/in/it`` or a filesystem path -> an existing file path."""
    if ref.startswith("pkg:"):
        package, _, inner = ref[4:].partition("/")
        try:
            path = Path(str(resources.files(package).joinpath(inner)))
        except ModuleNotFoundError:
            raise ModelError(f"package {package!r} holding {inner!r} is not installed", code=MODEL_MISSING) from None
    else:
        path = Path(ref).expanduser()
    if not path.is_file():
        raise ModelError(f"model file not found: {path}", code=MODEL_MISSING)
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def assemble_parts(parts_ref: str, sha_ref: str, cache_dir: Path, name: str) -> Path:
    """Join a model split over several packages (``parts:pkg/file,pkg/file``) once, checked by sha256."""
    expected = resolve_resource(sha_ref).read_text().split()[0].strip()
    out = cache_dir / "models" / f"{expected[:16]}-{name}"
    if out.is_file() and out.stat().st_size > 0:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{time.monotonic_ns()}")
    h = hashlib.sha256()
    with open(tmp, "wb") as f:
        for ref in parts_ref[len("parts:") :].split(","):
            with open(resolve_resource("pkg:" + ref.strip()), "rb") as part:
                for block in iter(lambda: part.read(1 << 20), b""):
                    h.update(block)
                    f.write(block)
    if h.hexdigest() != expected:
        tmp.unlink(missing_ok=True)
        raise ModelError(f"model parts of {name} do not match their sha256; reinstall the model packages", code=MODEL_CORRUPT)
    tmp.replace(out)
    return out


def cuda_wanted(settings: RuntimeSettings) -> bool:
    """Whether sessions will be asked to run on CUDA: configured for it, and onnxruntime has the provider."""
    import onnxruntime as ort

    return settings.device in ("cuda", "auto") and "CUDAExecutionProvider" in ort.get_available_providers()


@functools.cache
def load_cuda_libraries() -> None:
    """Before the first CUDA session: load CUDA and cuDNN from the nvidia-* pip packages that
    ``onnxruntime-gpu[cuda,cudnn]`` installs (or torch's); libraries of the system (the CUDA image) need nothing."""
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu >= 1.21
    if preload is not None:
        try:
            preload()
        except Exception as exc:  # libraries it cannot find: the session will say what is missing
            log.warning("onnxruntime.preload_dlls failed: %s", exc)


_ENV_ARENA: list[str] = []  # the strategy of the CPU arena registered with onnxruntime's environment, once
_ENV_ARENA_LOCK = threading.Lock()


def shared_cpu_arena(strategy: str) -> None:
    """Registers one CPU arena with onnxruntime's environment (once per process) that sessions created with
    ``session.use_env_allocators`` share instead of an arena each; ``strategy``: how it grows."""
    import onnxruntime as ort

    with _ENV_ARENA_LOCK:
        if _ENV_ARENA:
            if _ENV_ARENA[0] != strategy:
                log.warning("the shared CPU arena grows %s already; %s asked for later is not applied", _ENV_ARENA[0], strategy)
            return
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        extend = {"kNextPowerOfTwo": 0, "kSameAsRequested": 1}[strategy]
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": extend}))
        _ENV_ARENA.append(strategy)


class SessionFactory:
    """One per process. ``create`` returns a warm-able session and records how long it took."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self.fell_back_to_cpu = False
        self._sessions: dict[Path, tuple[Any, SessionInfo]] = {}
        self._lock = threading.Lock()

    def providers(self) -> list[Any]:
        import onnxruntime as ort

        s = self.settings
        if cuda_wanted(s):
            load_cuda_libraries()
            cuda = {
                "device_id": s.cuda_device_id,
                "gpu_mem_limit": s.cuda_mem_limit_mb * 1024 * 1024,
                "arena_extend_strategy": s.cuda_arena_extend_strategy,
                "cudnn_conv_algo_search": "HEURISTIC",
                "do_copy_in_default_stream": True,
            }
            return [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
        if s.device == "cuda":
            if not s.cpu_fallback:
                raise ModelError("device = cuda but onnxruntime has no CUDA provider here", code=DEVICE_UNAVAILABLE)
            log.warning("CUDA asked for but not available (%s); serving on CPU", ", ".join(ort.get_available_providers()))
            self.fell_back_to_cpu = True
        return ["CPUExecutionProvider"]

    def session_options(self, cuda: bool = False) -> Any:
        """Options of a session on CUDA (``cuda``) or on the CPU."""
        import onnxruntime as ort

        s = self.settings
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(0, s.intra_op_threads)
        opts.inter_op_num_threads = max(0, s.inter_op_threads)
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS.get(s.graph_optimization, "ORT_ENABLE_ALL"))
        opts.enable_cpu_mem_arena = s.cpu_mem_arena
        if not cuda:
            opts.enable_mem_pattern = s.cpu_mem_pattern
        if s.cpu_mem_arena and s.cpu_arena_extend_strategy:
            shared_cpu_arena(s.cpu_arena_extend_strategy)
            opts.add_session_config_entry("session.use_env_allocators", "1")
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if s.allow_spinning else "0")
        opts.log_severity_level = 3
        return opts

    def create(self, model: Path) -> tuple[Any, SessionInfo]:
        """The process's one session for ``model`` (voices sharing a model file share its session)."""
        with self._lock:
            key = model.resolve()
            if key not in self._sessions:
                self._sessions[key] = self._create(model)
            return self._sessions[key]

    def sessions(self) -> list[SessionInfo]:
        with self._lock:
            return [info for _, info in self._sessions.values()]

    def _create(self, model: Path) -> tuple[Any, SessionInfo]:
        import onnxruntime as ort

        if not model.is_file():
            raise ModelError(f"model file not found: {model}", code=MODEL_MISSING)
        providers = self.providers()
        on_cuda = providers[0] != "CPUExecutionProvider"
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(str(model), sess_options=self.session_options(cuda=on_cuda), providers=providers)
        except Exception as exc:  # onnxruntime raises several unrelated classes for a bad file
            text = str(exc)
            if "CUDA" in text and self.settings.cpu_fallback and on_cuda:
                log.warning("CUDA session failed (%s); falling back to CPU", text.splitlines()[0])
                self.fell_back_to_cpu = True
                session = ort.InferenceSession(str(model), sess_options=self.session_options(), providers=["CPUExecutionProvider"])
            else:
                corrupt = any(k in text for k in ("INVALID_PROTOBUF", "Protobuf parsing failed", "INVALID_GRAPH", "ModelProto"))
                code = MODEL_CORRUPT if corrupt else MODEL_LOAD_FAILED
                raise ModelError(f"cannot load model {model.name}: {text.splitlines()[0] if text else exc!r}", code=code) from exc
        info = SessionInfo(model=model, providers=tuple(session.get_providers()), create_s=time.perf_counter() - start)
        log.info("session for %s on %s in %.2f s", model.name, info.providers[0], info.create_s)
        return session, info


class LazySession:
    """A voice whose inference session is created on first use (phonemizing needs none).
    Subclasses set ``model`` and ``_factory`` and may extend ``_on_load``.

    Every voice the ``VoiceBank`` loads offers ``load()``, ``loaded`` and ``stage_sessions()``; a voice
    with one graph has one stage, called ``model``."""

    model: Path
    _factory: SessionFactory
    _session: Any = None
    info: SessionInfo | None = None

    @property
    def session(self) -> Any:
        if self._session is None:
            self.load()
        return self._session

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Create the inference session (the factory shares one per model file)."""
        if self._session is None:
            self._session, self.info = self._factory.create(self.model)
            self._on_load()

    def _on_load(self) -> None:
        """Hook run once the session exists."""

    def stage_sessions(self) -> dict[str, StageState]:
        return {"model": StageState(self.model, getattr(self, "precision", ""), self.info, self._session)}


@dataclass(frozen=True)
class StageState:
    """One session of a voice as the bank describes it: file, precision, and the session once created."""

    model: Path
    precision: str
    info: SessionInfo | None
    session: Any


class StageSession(LazySession):
    """The lazily created session of one stage of a two-stage voice. Load and run errors become
    ``ModelError`` naming the voice and the stage: a load keeps the factory's code (``MODEL_MISSING``,
    ``MODEL_CORRUPT``, ...), a failed run is ``MODEL_STAGE_FAILED``."""

    def __init__(self, factory: SessionFactory, model: Path, *, voice: str, stage: str, precision: str = "fp32") -> None:
        self._factory = factory
        self.model = model
        self.voice = voice
        self.stage = stage
        self.precision = precision
        self._binding: StageBinding | None = None  # when the session runs on CUDA
        self.shape_policy: ShapePolicy | None = None  # then too: stages round padded shapes with it
        self._inputs: tuple[Any, frozenset[str]] | None = None  # the session and its input names

    @property
    def host_pool(self) -> str:
        """How inputs reach the device: "pinned" or "pageable" staging under IO binding, "" without it."""
        if self._binding is None:
            return ""
        return "pinned" if self._binding.pinned else "pageable"

    def _on_load(self) -> None:
        settings = self._factory.settings
        if self.info is not None and wants_io_binding(self.info.providers, settings):
            self._binding = StageBinding(self._session, device="cuda", device_id=settings.cuda_device_id)
            self.shape_policy = ShapePolicy.from_settings(settings)
            if not self._binding.pinned:
                log.warning("voice %s, %s stage on CUDA: torch with CUDA is not installed, so host staging buffers are "
                            "pageable (slower copies); install the gpu extra for pinned ones", self.voice, self.stage)

    def load(self) -> None:
        try:
            super().load()
        except ModelError as exc:
            raise ModelError(f"voice {self.voice}, {self.stage} stage: {exc.message}", code=exc.code) from exc

    def run(self, outputs: list[str], feeds: dict[str, Any]) -> list[Any]:
        session = self.session
        try:
            with DEVICE_USE.running():
                if self._binding is not None:  # outputs copied out of this thread's staging pool, reused next call
                    return [np.array(out, copy=True) for out in self._binding.run(feeds, outputs)]
                return list(session.run(outputs, feeds))
        except Exception as exc:  # onnxruntime raises several unrelated classes
            first = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise ModelError(f"voice {self.voice}, {self.stage} stage failed: {first}", code=MODEL_STAGE_FAILED) from exc

    @property
    def input_names(self) -> frozenset[str]:
        """The graph's input names (loads the session)."""
        session = self.session
        if self._inputs is None or self._inputs[0] is not session:
            self._inputs = (session, frozenset(i.name for i in session.get_inputs()))
        return self._inputs[1]

    def fail(self, message: str) -> ModelError:
        """A ``MODEL_STAGE_FAILED`` error for output that breaks the stage contract."""
        return ModelError(f"voice {self.voice}, {self.stage} stage: {message}", code=MODEL_STAGE_FAILED)
