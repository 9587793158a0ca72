"""A Piper voice served in two stages: the split graph (``piper_split``) on the two-stage engine.

The stage files come from the prepared folder of the voice (``acoustic = "prepared"``, ``vocoder =
"prepared"`` in the catalogue; `ttsfarm voices prepare` builds them, with INT8 per stage where its gate
passed) or from explicit model locations. A voice never prepared has its FP32 stages built on first use
(the split takes seconds and needs no extra tools); INT8 comes only from `ttsfarm voices prepare`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.piper import PiperConfig
from pipeline.voices.piper_graph import FRAME_LENGTHS
from pipeline.voices.piper_split import AUDIO, DECODER_CONTEXT, DURATIONS, LATENT, PIPER_INPUTS
from pipeline.voices.prepared import Prepared, fingerprint, prepared_dir, read_prepared, require_prepared, wanted_precision
from pipeline.voices.runtime import SessionFactory, StageSession, resolve_resource
from pipeline.voices.twostage import AcousticGraph, OnnxAcoustic, OnnxVocoder, TwoStageVoice

log = logging.getLogger(__name__)

PIPER_PREPARER_VERSION = 3  # 2: a full preparation records the listening gate (WER); 3: and the FP16 vocoder for CUDA
PREPARED = "prepared"
ACOUSTIC_GRAPH = AcousticGraph(ids=PIPER_INPUTS[0], lengths=PIPER_INPUTS[1], frames=LATENT, frame_lengths=FRAME_LENGTHS,
                               durations=DURATIONS, layout="channels_first")


def piper_fingerprint(spec: VoiceSpec) -> str:
    return fingerprint([resolve_resource(spec.model)], PIPER_PREPARER_VERSION)


def _prepared(spec: VoiceSpec, factory: SessionFactory) -> Prepared:
    print_ = piper_fingerprint(spec)
    prepared = read_prepared(prepared_dir(factory.settings.cache_dir, spec.name, print_))
    if prepared is None:
        from pipeline.prepare import prepare_on_first_use

        prepared = prepare_on_first_use(spec, PipelineSettings(runtime=factory.settings), print_)
    return prepared or require_prepared(spec, factory.settings, print_)


def piper_two_stage(spec: VoiceSpec, factory: SessionFactory, files: dict[str, tuple[Path, str]], info: Mapping[str, Any]) -> TwoStageVoice:
    """The voice on given stage files: ``files[stage] = (path, precision)``; ``info`` has hop and channels."""
    config = PiperConfig(spec)
    sessions = {stage: StageSession(factory, path, voice=spec.name, stage=stage, precision=precision)
                for stage, (path, precision) in files.items()}
    max_batch = max(1, spec.max_batch)
    acoustic = OnnxAcoustic(sessions["acoustic"], ACOUSTIC_GRAPH, channels=int(info["channels"]), max_batch=max_batch,
                            extra_feeds=lambda opts: {PIPER_INPUTS[2]: config.scales(opts)})
    vocoder = OnnxVocoder(sessions["vocoder"], frames_input=LATENT, audio_output=AUDIO, hop=int(info["hop"]),
                          context=int(info.get("context", DECODER_CONTEXT)), max_batch=max_batch, layout="channels_first")
    return TwoStageVoice(name=spec.name, languages=spec.languages, sample_rate=config.sample_rate, phonemizer=config,
                         acoustic=acoustic, vocoder=vocoder, max_batch=max_batch, sessions=sessions)


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
