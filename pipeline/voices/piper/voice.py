"""Piper VITS voices: dynamic batch axis, each item cut at its own frame count."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import NOTHING_TO_SPEAK, UNSUPPORTED_LANGUAGE, InputError
from pipeline.settings import RuntimeSettings, VoiceSpec
from pipeline.voices.base import PhonemeIds, Phonemized, SynthesisOptions
from pipeline.voices.gpu import wants_io_binding
from pipeline.voices.piper.graph import PIPER_INPUTS, int8_paths, prepare_piper_graph, run_whole
from pipeline.voices.piper.iobinding import IoBindingRunner
from pipeline.voices.prepared import wanted_precision
from pipeline.voices.runtime import LazySession, SessionFactory, resolve_resource

log = logging.getLogger(__name__)


def choose_model(prepared: Path, spec: VoiceSpec, runtime: RuntimeSettings) -> tuple[Path, str]:
    """INT8 when the catalogue asks for it and the model passed its quality gate; FP32 otherwise."""
    wanted = wanted_precision(spec, runtime)
    if wanted != "int8":
        return prepared, "fp32"
    model, report = int8_paths(prepared)
    if not model.is_file() or not report.is_file():
        log.info("voice %s: no INT8 model yet (run `ttsfarm quantize %s`); serving FP32", spec.name, spec.name)
        return prepared, "fp32"
    verdict = json.loads(report.read_text())
    if not verdict.get("passed"):
        log.warning("voice %s: INT8 model failed its quality gate (%s); serving FP32", spec.name, verdict.get("reason"))
        return prepared, "fp32"
    return model, "int8"


class PiperConfig:
    """What a Piper voice's ``.onnx.json`` says, and the phonemizer and scales it implies (shared by the
    whole-graph ``PiperVoice`` and the two-stage Piper voice)."""

    def __init__(self, spec: VoiceSpec) -> None:
        self.name = spec.name
        self.languages = spec.languages
        config = json.loads(resolve_resource(str(spec.options["config"])).read_text(encoding="utf-8"))
        self.sample_rate = int(config["audio"]["sample_rate"])
        self.espeak_voice = str(config.get("espeak", {}).get("voice", "en-us"))
        self.id_map: dict[str, list[int]] = config["phoneme_id_map"]
        inference = config.get("inference", {})
        self.defaults = {
            "noise_scale": float(spec.defaults.get("noise_scale", inference.get("noise_scale", 0.667))),
            "noise_w": float(spec.defaults.get("noise_w", inference.get("noise_w", 0.8))),
            "length_scale": float(inference.get("length_scale", 1.0)),
        }
        from pipeline.text.en import EnglishPhonemizer

        self._phonemizer = EnglishPhonemizer()

    def phonemize(self, text: str, lang: str) -> Phonemized:
        if lang not in self.languages:
            raise InputError(f"voice {self.name} does not speak {lang!r}", code=UNSUPPORTED_LANGUAGE)
        # One id sequence per sentence espeak finds (each framed by BOS/EOS, as Piper trains and runs them);
        # the segmenter keeps segments to one sentence, so this is almost always a single sequence.
        sentences = self._phonemizer.phonemize_sentences(text, self.espeak_voice)
        phonemes = [p for sentence in sentences for p in sentence]
        ids = [i for sentence in sentences for i in self._phonemizer.to_ids(sentence, self.id_map)]
        if len(ids) <= 2 or not any(p.isalpha() for p in phonemes):
            raise InputError(f"nothing to speak in {text!r}", code=NOTHING_TO_SPEAK)
        units = self._id_units(sentences)
        return Phonemized(ids=tuple(ids), phonemes="".join(phonemes), id_units=units if len(units) == len(ids) else ())

    def _id_units(self, sentences: list[list[str]]) -> tuple[int, ...]:
        """For each id ``to_ids`` gives, the index in the joined phonemes of the phoneme it carries (its PAD too)."""
        from piper.const import BOS, EOS, PAD

        units: list[int] = []
        at = 0
        for sentence in sentences:
            units += [-1] * (len(self.id_map[BOS]) + len(self.id_map[PAD]))
            for p in sentence:
                if p in self.id_map:
                    units += [at] * (len(self.id_map[p]) + len(self.id_map[PAD]))
                at += len(p)
            units += [-1] * len(self.id_map[EOS])
        return tuple(units)

    def scales(self, opts: SynthesisOptions) -> np.ndarray:
        """Piper's ``scales`` input: noise, length (1 / speed), noise of the durations."""
        noise = self.defaults["noise_scale"] if opts.noise_scale is None else opts.noise_scale
        noise_w = self.defaults["noise_w"] if opts.noise_w is None else opts.noise_w
        return np.array([noise, self.defaults["length_scale"] / opts.speed, noise_w], dtype=np.float32)


class PiperVoice(LazySession):
    """A Piper voice from the catalogue, run as one graph. Thread-safe: the session may be run from several
    threads. (``joe`` is served as a two-stage voice; this whole-graph path stays for the CUDA IO-binding
    runner, the INT8 tooling of the whole graph, and as the reference the split is checked against.)"""

    def __init__(self, spec: VoiceSpec, factory: SessionFactory, *, precision: str | None = None) -> None:
        self.name = spec.name
        self.languages = spec.languages
        self.max_batch = max(1, spec.max_batch)
        self.config = PiperConfig(spec)
        self.sample_rate = self.config.sample_rate
        self.defaults = self.config.defaults
        prepared = prepare_piper_graph(resolve_resource(spec.model), factory.settings.cache_dir)
        self.hop = prepared.hop
        runtime = factory.settings
        self.model, self.precision = choose_model(prepared.path, spec, runtime if precision is None else _with(runtime, precision))
        self._factory = factory
        self._runner: IoBindingRunner | None = None  # when the session runs on CUDA

    def _on_load(self) -> None:
        assert self.info is not None
        if wants_io_binding(self.info.providers, self._factory.settings):
            self._runner = IoBindingRunner.for_settings(self._session, self._factory.settings)

    def phonemize(self, text: str, lang: str) -> Phonemized:
        return self.config.phonemize(text, lang)

    def scales(self, opts: SynthesisOptions) -> np.ndarray:
        return self.config.scales(opts)

    def feeds(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, pad_to: int | None = None) -> dict[str, Any]:
        """The padded input tensors of one batch (pad id 0, as Piper pads)."""
        lengths = np.array([len(ids) for ids in batch], dtype=np.int64)
        width = max(int(lengths.max()), pad_to or 0)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        for row, item in enumerate(batch):
            ids[row, : len(item)] = item
        return dict(zip(PIPER_INPUTS, (ids, lengths, self.scales(opts)), strict=True))

    def synthesize_batch(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        if not batch:
            return []
        if self._runner is not None:
            return self._runner.synthesize(batch, self.scales(opts), self.hop)
        return run_whole(self.session, self.feeds(batch, opts), self.hop)


def _with(runtime: RuntimeSettings, precision: str) -> RuntimeSettings:
    return dataclasses.replace(runtime, precision=precision)
