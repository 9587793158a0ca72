"""The Piper preparer: frame lengths exposed, the graph split into acoustic + decoder, INT8 per stage.

1-2. The engine's split (``split_stages`` of ``pipeline/voices/piper/stages.py``, which serving also runs on
   first use): ``prepare_piper_graph`` exposes ``frame_lengths`` (in a scratch folder of the work folder;
   for a voice served as one graph, ``engine = "piper"``, also where ``PiperVoice`` reads it in the model
   cache); ``split_piper_graph`` writes ``acoustic.fp32.onnx`` and ``vocoder.fp32.onnx``; the pair is
   checked against the whole graph on held-out sentences, noise off (lengths equal, max abs diff <= 1e-3,
   else ``MODEL_CORRUPT``), and the figures go into both FP32 verdicts;
3. with ``int8``: the acoustic stage is quantized like ``ttsfarm quantize`` (static QDQ, the default
   exclusions: the text encoder, duration predictor and decoder stay FP32, so the flow is what is
   quantized) and judged by ``settings.quality_gate`` on the same held-out sentences through the
   two-stage voice (FP32 decoder in both). A failed INT8 file is not kept. The decoder is not
   quantized: every mode measured failed the gate (docs/lab/voices-and-quality.md, "INT8 quality"); its INT8
   verdict says so.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import TTSFarmError
from pipeline.prepare.fp16 import fp16_vocoder
from pipeline.prepare.listening import ceiling, gate_note, heldout_sentences, judge, listen, speaker
from pipeline.prepare.quantize import CALIBRATION_EN, calibration_reader, quantize_graph, read_sentences
from pipeline.prepare.quantize_eval import EVAL_SENTENCES_EN, compare, measure_pair, verdict
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.base import PhonemeIds, SynthesisOptions
from pipeline.voices.piper.graph import INT8_EXCLUDE
from pipeline.voices.piper.stages import PIPER_SPLIT, SPLIT_CHECK_TEXTS, build_fp32, piper_two_stage, split_stages
from pipeline.voices.prepared import PreparedVoice, Preparer
from pipeline.voices.runtime import SessionFactory

log = logging.getLogger(__name__)

# A verdict carries only figures its own run measured: the decoder's are in docs/lab/voices-and-quality.md.
DECODER_INT8_REASON = ("not quantized: the HiFi-GAN decoder failed the gate in every mode measured "
                       "(docs/lab/voices-and-quality.md, 'INT8 quality')")


class _Runner:
    """``measure_pair``'s runner interface over a voice."""

    def __init__(self, voice: Any) -> None:
        self.voice = voice

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        return list(self.voice.synthesize_batch(batch, opts))


class _CalibrationVoice:
    """What ``calibration_reader`` needs: the phonemizer and the acoustic stage's feeds."""

    def __init__(self, voice: Any) -> None:
        self.phonemize = voice.phonemize
        self.feeds = voice.acoustic.feeds


def gate_acoustic_int8(spec: VoiceSpec, settings: PipelineSettings, work: Path, fp32_voice: Any, info: dict[str, Any]) -> dict[str, Any]:
    """Quantize the acoustic stage, judge it; keep ``acoustic.int8.onnx`` only when it passed."""
    fp32_file, int8_file = work / "acoustic.fp32.onnx", work / "acoustic.int8.onnx"
    calibration = read_sentences(CALIBRATION_EN)
    reader = calibration_reader(_CalibrationVoice(fp32_voice), calibration, spec.languages[0])
    quantization = quantize_graph(fp32_file, int8_file, "static", exclude=INT8_EXCLUDE, per_channel=False, reader=reader)
    factory = SessionFactory(settings.runtime)
    int8_voice = piper_two_stage(spec, factory, {"acoustic": (int8_file, "int8"), "vocoder": (work / "vocoder.fp32.onnx", "fp32")}, info)
    items = [fp32_voice.phonemize(t, spec.languages[0]).ids for t in EVAL_SENTENCES_EN]
    start = time.perf_counter()
    fp32_run, int8_run = measure_pair(_Runner(fp32_voice), _Runner(int8_voice), items, SynthesisOptions.noiseless(), repeats=1)
    measures = compare(fp32_run, int8_run, fp32_voice.sample_rate, EVAL_SENTENCES_EN)
    passed, reason = verdict(measures, settings.quality_gate)
    gate = settings.quality_gate
    if not passed:
        int8_file.unlink(missing_ok=True)
    return {
        "stage": "acoustic", "precision": "int8", "attempted": True, "passed": passed, "reason": reason,
        "spectral": {"metric": "logmel_l1_db", "value": measures["logmel_l1_db"], "ceiling": gate.max_logmel_l1_db,
                     "passed": measures["logmel_l1_db"] <= gate.max_logmel_l1_db},
        "measures": measures, "quantization": quantization,
        "calibration": {"file": str(CALIBRATION_EN), "sentences": len(calibration)},
        "evaluation": {"sentences": len(items), "noise": "off", "eval_s": round(time.perf_counter() - start, 2),
                       "against": "the FP32 two-stage voice (FP32 decoder in both)"},
    }


def build_piper(spec: VoiceSpec, settings: PipelineSettings, work: Path, int8: bool) -> PreparedVoice:
    if not int8:
        return build_fp32(spec, settings, work, int8)
    split = split_stages(spec, settings, work)
    fp32_voice, info = split.voice, split.info
    stages, verdicts = split.prepared.stages, split.prepared.verdicts
    acoustic_int8 = gate_acoustic_int8(spec, settings, work, fp32_voice, info)
    verdicts.append(acoustic_int8)
    if acoustic_int8["passed"]:
        stages["acoustic"]["int8"] = "acoustic.int8.onnx"
    verdicts.append({"stage": "vocoder", "precision": "int8", "attempted": False, "passed": False, "reason": DECODER_INT8_REASON})
    # A full preparation also builds the FP16 vocoder CUDA serves and listens to what CPU serves (the FP32-only
    # build serving makes itself on first use does neither).
    fp16, fp16_verdict = fp16_vocoder(fp32_voice, work, settings, SPLIT_CHECK_TEXTS, "en")
    verdicts.append(fp16_verdict)
    if fp16:
        stages["vocoder"]["fp16"] = fp16
    listen_to_served(spec, settings, work, info, stages, verdicts)
    return PreparedVoice(stages=stages, verdicts=verdicts, info=info)


def listen_to_served(spec: VoiceSpec, settings: PipelineSettings, work: Path, info: dict[str, Any], stages: dict[str, dict[str, str]],
            verdicts: list[dict[str, Any]]) -> None:
    """The listening gate (``pipeline/prepare/listening.py``): whisper tiny.en's word error rate on configs/heldout_en.txt
    for the stages served on CPU (INT8 where it passed), recorded in each verdict of those stages. One intra-op
    thread, so the figure reproduces. Without the recognizer installed the voice is prepared, its figure missing."""
    runtime = dataclasses.replace(settings.runtime, intra_op_threads=1, inter_op_threads=1)
    served = {stage: ("int8" if "int8" in files else "fp32") for stage, files in stages.items()}
    files = {stage: (work / stages[stage][p], p) for stage, p in served.items()}
    voice = piper_two_stage(spec, SessionFactory(runtime), files, info)
    try:
        heard = listen(speaker(voice, dataclasses.replace(settings, runtime=runtime)), "en", heldout_sentences("en"),
                       settings.runtime.cache_dir, ceiling(settings.quality_gate, "en"), natural=judge(settings))
    except TTSFarmError as exc:
        log.warning("voice %s: listening gate not run: %s", spec.name, exc)
        return
    state = "passed" if heard["passed"] else "FAILED: not routed to by default"
    note = f"; listening gate {state}: WER {100 * heard['value']:.1f} % (ceiling {100 * heard['ceiling']:.1f} %)" + gate_note(heard)
    natural = heard.pop("naturalness", None)
    for v in verdicts:
        if v.get("attempted") and v.get("passed") and served.get(v["stage"]) == v["precision"]:
            v["recognizer"], v["naturalness"] = heard, natural
            v["reason"] = str(v.get("reason", "")) + note


PIPER: Preparer = dataclasses.replace(PIPER_SPLIT, build=build_piper)  # the same sources and version: one folder
