"""A Piper voice served in two stages: the split graph (``split.py``) on the two-stage engine.

The stage files come from the prepared folder of the voice (``acoustic = "prepared"``, ``vocoder =
"prepared"`` in the catalogue; `ttsfarm voices prepare` builds them, with INT8 per stage where its gate
passed) or from explicit model locations. A voice never prepared has its FP32 stages built on first use
(``PIPER_SPLIT``: the split takes seconds and needs no extra tools); INT8 comes only from
`ttsfarm voices prepare` (``pipeline/prepare/piper.py``, which builds on the same split).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import MODEL_CORRUPT, ModelError
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.piper.graph import AUDIO, FRAME_LENGTHS, PIPER_INPUTS, prepare_piper_graph, run_whole
from pipeline.voices.piper.noise import NOISE_OFFSETS
from pipeline.voices.piper.split import DECODER_CONTEXT, DURATIONS, LATENT, split_piper_graph
from pipeline.voices.piper.voice import PiperConfig
from pipeline.voices.prepared import (Prepared, PreparedVoice, Preparer, prepare_on_first_use, prepared_dir, read_prepared,
                                      require_prepared, source_fingerprint, wanted_precision)
from pipeline.voices.runtime import SessionFactory, StageSession, resolve_resource
from pipeline.voices.twostage import AcousticGraph, OnnxAcoustic, OnnxVocoder, TwoStageVoice, coalesce_on_device

log = logging.getLogger(__name__)

PIPER_PREPARER_VERSION = 6  # 2: a full preparation records the listening gate (WER); 3: and the FP16 vocoder for CUDA;
# 4: verdict reasons carry only figures measured by their run; 5: the acoustic noise from ``noise_offsets`` (noise.py);
# 6: one-dimensional convolutions written as two-dimensional ones (conv_layout.py)
PREPARED = "prepared"
ACOUSTIC_GRAPH = AcousticGraph(ids=PIPER_INPUTS[0], lengths=PIPER_INPUTS[1], frames=LATENT, frame_lengths=FRAME_LENGTHS,
                               durations=DURATIONS, layout="channels_first")
SPLIT_TOLERANCE = 1e-3
SPLIT_CHECK_TEXTS = (  # held out from configs/calibration_en.txt, like the INT8 gate's sentences
    "The lighthouse keeper wrote a letter to his sister every Sunday evening.",
    "Yes.",
    "Could you tell me where the nearest train station is?",
    "Forty seven apples were sold before noon, and the rest went to the bakery.",
)


def piper_sources(spec: VoiceSpec) -> list[Path]:
    return [resolve_resource(spec.model)]


def piper_fingerprint(spec: VoiceSpec) -> str:
    return source_fingerprint(piper_sources(spec), PIPER_PREPARER_VERSION)


def piper_two_stage(spec: VoiceSpec, factory: SessionFactory, files: dict[str, tuple[Path, str]], info: Mapping[str, Any]) -> TwoStageVoice:
    """The voice on given stage files: ``files[stage] = (path, precision)``; ``info`` has hop and channels."""
    config = PiperConfig(spec)
    sessions = {stage: StageSession(factory, path, voice=spec.name, stage=stage, precision=precision)
                for stage, (path, precision) in files.items()}
    max_batch = max(1, spec.max_batch)
    acoustic = OnnxAcoustic(sessions["acoustic"], ACOUSTIC_GRAPH, channels=int(info["channels"]), max_batch=max_batch,
                            extra_feeds=lambda opts: {PIPER_INPUTS[2]: config.scales(opts)}, noise_input=NOISE_OFFSETS)
    vocoder = OnnxVocoder(sessions["vocoder"], frames_input=LATENT, audio_output=AUDIO, hop=int(info["hop"]),
                          context=int(info.get("context", DECODER_CONTEXT)), max_batch=max_batch, layout="channels_first")
    return TwoStageVoice(name=spec.name, languages=spec.languages, sample_rate=config.sample_rate, phonemizer=config,
                         acoustic=acoustic, vocoder=vocoder, max_batch=max_batch, sessions=sessions,
                         coalesce=coalesce_on_device(factory, sessions))


# -- the split, built and checked (a preparation's FP32 stages, and serving's first use) ------------------------
@dataclass(frozen=True)
class Split:
    """The FP32 stages written into a work folder, checked, and the two-stage voice on them."""

    voice: TwoStageVoice
    info: dict[str, Any]
    prepared: PreparedVoice


def check_split(voice: Any, whole: Path, factory: SessionFactory, texts: Sequence[str]) -> dict[str, Any]:
    """The two-stage voice against the whole prepared graph, noise off, alone and as one batch."""
    session, _ = factory.create(whole)
    opts = SynthesisOptions.noiseless()
    items = [voice.phonemize(t, voice.languages[0]).ids for t in texts]
    whole_inputs = {i.name for i in session.get_inputs()}  # the whole graph draws its own noise (none here)
    reference = run_whole(session, {k: v for k, v in voice.acoustic.feeds(items, opts).items() if k in whole_inputs}, voice.hop)
    staged = voice.synthesize_batch(items, opts)
    solo = [voice.synthesize_batch([ids], opts)[0] for ids in items]
    lengths_equal = all(len(a) == len(b) == len(c) for a, b, c in zip(reference, staged, solo))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(reference, staged)) if lengths_equal else None
    solo_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(staged, solo)) if lengths_equal else None
    return {"items": len(items), "lengths_equal": lengths_equal, "max_abs_diff_vs_whole": diff,
            "batch_solo_max_abs_diff": solo_diff, "tolerance": SPLIT_TOLERANCE, "noise": "off"}


def split_stages(spec: VoiceSpec, settings: PipelineSettings, work: Path) -> Split:
    """``acoustic.fp32.onnx`` and ``vocoder.fp32.onnx`` in ``work``, checked against the whole graph on held-out
    sentences, noise off (lengths equal, max abs diff <= ``SPLIT_TOLERANCE``, else ``MODEL_CORRUPT``); the figures
    go into both FP32 verdicts."""
    if spec.engine == "piper":  # served as one graph (e.g. on CUDA): its frame-length graph goes where PiperVoice reads it
        prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir)
    scratch = work / "scratch"
    whole = prepare_piper_graph(resolve_resource(spec.model), scratch)
    split = split_piper_graph(whole.path, work / "acoustic.fp32.onnx", work / "vocoder.fp32.onnx")
    info = {"hop": whole.hop, "channels": split.channels, "context": DECODER_CONTEXT, "split_tensor": split.split_tensor,
            "durations_tensor": split.durations_tensor, "source_sha256": whole.source_sha256}
    factory = SessionFactory(settings.runtime)
    files = {"acoustic": (work / "acoustic.fp32.onnx", "fp32"), "vocoder": (work / "vocoder.fp32.onnx", "fp32")}
    voice = piper_two_stage(spec, factory, files, info)
    check = check_split(voice, whole.path, factory, SPLIT_CHECK_TEXTS)
    shutil.rmtree(scratch, ignore_errors=True)
    if not check["lengths_equal"] or check["max_abs_diff_vs_whole"] > SPLIT_TOLERANCE:
        raise ModelError(f"voice {spec.name}: the split graph does not reproduce the whole graph ({check})", code=MODEL_CORRUPT)
    reason = (f"split at {split.split_tensor}: equals the whole graph (max abs diff {check['max_abs_diff_vs_whole']:.2g}, "
              f"lengths equal, {check['items']} sentences, noise off)")
    verdicts: list[dict[str, Any]] = [
        {"stage": stage, "precision": "fp32", "attempted": True, "passed": True, "reason": reason, "split_check": check}
        for stage in ("acoustic", "vocoder")
    ]
    stages = {"acoustic": {"fp32": "acoustic.fp32.onnx"}, "vocoder": {"fp32": "vocoder.fp32.onnx"}}
    return Split(voice=voice, info=info, prepared=PreparedVoice(stages=stages, verdicts=verdicts, info=info))


def build_fp32(spec: VoiceSpec, settings: PipelineSettings, work: Path, int8: bool) -> PreparedVoice:
    """The FP32 stages alone, their INT8 verdicts saying why none was built."""
    built = split_stages(spec, settings, work).prepared
    for stage in ("acoustic", "vocoder"):
        built.verdicts.append({"stage": stage, "precision": "int8", "attempted": False, "passed": False,
                               "reason": "not built: FP32 only was asked for (run `ttsfarm voices prepare` for INT8)"})
    return built


# What serving builds itself for a voice never prepared; `ttsfarm voices prepare` uses the same sources and version
# (``pipeline.prepare.piper.PIPER``), so both name the same folder.
PIPER_SPLIT = Preparer(sources=piper_sources, build=build_fp32, version=PIPER_PREPARER_VERSION, on_first_use=True)


# -- serving ----------------------------------------------------------------------------------------------------
def _prepared(spec: VoiceSpec, factory: SessionFactory) -> Prepared:
    fingerprint = piper_fingerprint(spec)
    prepared = read_prepared(prepared_dir(factory.settings.cache_dir, spec.name, fingerprint))
    if prepared is None:
        prepared = prepare_on_first_use(spec, PipelineSettings(runtime=factory.settings), PIPER_SPLIT, fingerprint)
    return prepared or require_prepared(spec, factory.settings, fingerprint)


def build_piper_two_stage(spec: VoiceSpec, factory: SessionFactory) -> TwoStageVoice:
    """``STAGE_BUILDERS["piper"]``: the catalogue voice on its prepared (or explicitly located) stages."""
    prepared = _prepared(spec, factory)
    files: dict[str, tuple[Path, str]] = {}
    for stage, location in (("acoustic", spec.acoustic or PREPARED), ("vocoder", spec.vocoder or PREPARED)):
        if location == PREPARED:
            path, precision, why = prepared.served(stage, wanted_precision(spec, factory.settings, stage))
            log.info("voice %s, %s stage: %s %s (%s)", spec.name, stage, precision, path.name, why)
            files[stage] = (path, precision)
        else:
            files[stage] = (resolve_resource(location), "fp32")
    return piper_two_stage(spec, factory, files, prepared.info)
