"""Kokoro-82M (INT8 ONNX, batch axis fixed at 1) speaking Mandarin through its phoneme vocabulary."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import numpy as np

from pipeline.errors import NOTHING_TO_SPEAK, TEXT_TOO_LONG, UNKNOWN_VOICE, UNSUPPORTED_LANGUAGE, InputError
from pipeline.settings import VoiceSpec
from pipeline.voices.base import PhonemeIds, Phonemized, SynthesisOptions
from pipeline.voices.runtime import LazySession, SessionFactory, assemble_parts, resolve_resource

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
KOKORO_FILE = "kokoro-v1.0.int8.onnx"  # the name a model joined from its parts gets in the cache


class KokoroVoice(LazySession):
    """One Kokoro style from the catalogue. Items of a batch run one by one (the graph takes batch 1)."""

    def __init__(self, spec: VoiceSpec, factory: SessionFactory) -> None:
        self.name = spec.name
        self.languages = spec.languages
        self.max_batch = 1
        self.sample_rate = SAMPLE_RATE
        self.precision = spec.precision
        self.tone_sandhi = bool(spec.options.get("tone_sandhi", True))
        opts = spec.options
        model_ref = spec.model
        if model_ref.startswith("parts:"):
            model = assemble_parts(model_ref, str(opts["sha256"]), factory.settings.cache_dir, KOKORO_FILE)
        else:
            model = resolve_resource(model_ref)
        self.vocab: dict[str, int] = json.loads(resolve_resource(str(opts["vocab"])).read_text(encoding="utf-8"))["vocab"]
        with open(resolve_resource(str(opts["styles"])), "rb") as f:
            styles = np.load(f)
            style_name = str(opts.get("style", styles.files[0]))
            if style_name not in styles.files:
                raise InputError(f"voice {spec.name}: style {style_name!r} not in {styles.files}", code=UNKNOWN_VOICE)
            self.style = np.asarray(styles[style_name], dtype=np.float32).reshape(-1, 256)
        self.max_tokens = self.style.shape[0]
        self.default_speed = float(spec.defaults.get("speed", 1.0))
        self.model = model
        self._factory = factory

    def phonemize(self, text: str, lang: str) -> Phonemized:
        if lang not in self.languages:
            raise InputError(f"voice {self.name} does not speak {lang!r}", code=UNSUPPORTED_LANGUAGE)
        from pipeline.text.zh import zh_phonemes

        pinyin, phonemes = zh_phonemes(text, tone_sandhi=self.tone_sandhi)
        ids = [self.vocab[ch] for ch in phonemes if ch in self.vocab]
        dropped = {ch for ch in phonemes if ch not in self.vocab}
        if dropped:
            log.warning("voice %s: symbols outside the vocabulary dropped: %s", self.name, "".join(sorted(dropped)))
        if not pinyin or not ids:
            raise InputError(f"nothing to speak in {text!r}", code=NOTHING_TO_SPEAK)
        if len(ids) > self.max_tokens:
            raise InputError(f"segment too long for {self.name}: {len(ids)} > {self.max_tokens} tokens", code=TEXT_TOO_LONG)
        return Phonemized(ids=tuple(ids), phonemes=phonemes, pinyin=tuple(pinyin))

    def synthesize_one(self, ids: PhonemeIds, opts: SynthesisOptions) -> np.ndarray:
        ref = self.style[min(len(ids), self.max_tokens) - 1].reshape(1, 256)
        (audio,) = self.session.run(
            ["audio"],
            {
                "tokens": np.array([[0, *ids, 0]], dtype=np.int64),
                "style": ref,
                "speed": np.array([self.default_speed * opts.speed], dtype=np.float32),
            },
        )
        return np.ascontiguousarray(audio.reshape(-1), dtype=np.float32)

    def synthesize_batch(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        return [self.synthesize_one(ids, opts) for ids in batch]
