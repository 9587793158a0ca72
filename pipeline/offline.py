"""`ttsfarm say` and `ttsfarm phonemize`: whole-text synthesis in this process, no farm (``pipeline.synth``).

Each returns the lines the command prints; the CLI parses the arguments and prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pipeline.settings import PipelineSettings


def say(settings: PipelineSettings, text: bytes | str, voice: str | None, options: Mapping[str, Any], output: str, *,
        fmt: str | None = None, rate: int | None = None, bitrate: int | None = None,
        lexicon: Mapping[str, str] | None = None, ssml: bool | None = None) -> str:
    """Synthesize ``text`` into the file ``output`` (format from ``fmt`` or its name); the summary line."""
    from pipeline.audio import write
    from pipeline.synth import Synthesizer
    from pipeline.voices.base import SynthesisOptions

    out = Synthesizer(settings).synthesize(text, voice, SynthesisOptions.from_dict(dict(options)), lexicon=lexicon,
                                           ssml=ssml)
    rate = rate or out.sample_rate
    write(output, out.audio, out.sample_rate, fmt=fmt, out_rate=rate, bitrate=bitrate)
    t = out.timings
    return (f"{output}: {out.duration_s:.2f} s of audio at {rate} Hz, {len(out.segments)} segment(s), "
            f"made in {t['total_s']:.2f} s (RTF {t['total_s'] / max(out.duration_s, 1e-9):.3f})")


def phonemize(settings: PipelineSettings, text: bytes | str, voice: str | None, *,
              lexicon: Mapping[str, str] | None = None, ssml: bool | None = None) -> Iterator[str]:
    """Each segment: its language, voice and pause, its text, pinyin, phonemes and the model's token ids."""
    from pipeline.synth import Synthesizer

    for planned, ph in Synthesizer(settings).phonemize(text, voice, lexicon=lexicon, ssml=ssml):
        seg = planned.segment
        yield f"[{seg.index}] {seg.lang} voice={planned.voice} pause={seg.pause_after_s:.2f}s"
        yield f"  text:     {seg.text}"
        if ph.pinyin:
            yield f"  pinyin:   {' '.join(ph.pinyin)}"
        yield f"  phonemes: {ph.phonemes}"
        yield f"  tokens:   {' '.join(map(str, ph.ids))}"
