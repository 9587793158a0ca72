"""Word-timing accuracy: the farm's word times against faster-whisper's word timestamps on the same audio.

Held-out English sentences (never used to build or tune the timings) through the `joe` voice, in this
process, segment by segment as a worker does it (``pipeline/timing.py``, pauses and joins counted). Prints
the median absolute errors of word starts, word ends, and junctions between consecutive words, for whisper
tiny.en (the English recognizer of the quality gates) and whisper base, and the two recognizers' disagreement
with each other on the same audio (how exact the reference itself is).

    .venv/bin/python scripts/bench_word_timings.py
"""

from __future__ import annotations

import argparse

import numpy as np

from pipeline.settings import load_settings
from pipeline.synth import finish_segment, plan
from pipeline.timing import synthesize_timed, word_times
from pipeline.timing_eval import boundary_errors, junction_errors, recognized_words
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions

HELD_OUT = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
]


def timed_say(bank: VoiceBank, settings, text: str, voice: str) -> tuple[np.ndarray, int, list[tuple[str, float, float]]]:  # type: ignore[no-untyped-def]
    v = bank.get(voice)
    rate = v.sample_rate
    pieces, words, offset = [], [], 0
    for p in plan(text, voice, settings):
        seg = p.segment
        ph = v.phonemize(seg.text, seg.lang)
        audios, durations, hop = synthesize_timed(v, [ph.ids], SynthesisOptions())
        for w in word_times(seg.words, seg.text, seg.lang, ph, durations[0], hop=hop, voice_rate=rate, out_rate=rate,
                            speech_samples=len(audios[0])):
            words.append((text[w.char_start : w.char_end], (offset + w.start) / rate, (offset + w.end) / rate))
        audio = finish_segment(audios[0], rate, rate, seg.pause_after_s)
        pieces.append(audio)
        offset += len(audio)
    return np.concatenate(pieces), rate, words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voice", default="joe")
    args = ap.parse_args()
    settings = load_settings()
    bank = VoiceBank(settings.catalogue, settings.runtime)
    rendered = [timed_say(bank, settings, text, args.voice) for text in HELD_OUT]
    heard = {multilingual: [recognized_words(audio, rate, "en", settings.runtime.cache_dir, multilingual=multilingual)
                            for audio, rate, _ in rendered] for multilingual in (False, True)}
    floor = [e for tiny, base in zip(heard[False], heard[True]) for e in boundary_errors(tiny, base)]
    print(f"the two recognizers against each other: median |error| all boundaries {np.median(floor) * 1000:.0f} ms")
    for name, multilingual in (("whisper tiny.en", False), ("whisper base", True)):
        starts, ends, junctions, n = [], [], [], 0
        for (audio, rate, ours), theirs in zip(rendered, heard[multilingual]):
            errors = boundary_errors(ours, theirs)
            starts += errors[0::2]
            ends += errors[1::2]
            junctions += junction_errors(ours, theirs)
            n += len(errors) // 2
        ms = lambda xs: f"{np.median(xs) * 1000:.0f} ms" if xs else "-"  # noqa: E731
        print(f"{name}: {n} words matched of {sum(len(r[2]) for r in rendered)}; median |error| starts {ms(starts)}, "
              f"ends {ms(ends)}, all boundaries {ms(starts + ends)}, junctions {ms(junctions)}")


if __name__ == "__main__":
    main()
