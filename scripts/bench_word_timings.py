"""Word-timing accuracy: the farm's word times against faster-whisper's word timestamps on the same audio.

Held-out English sentences (never used to build or tune the timings) through the `joe` voice (and Chinese
through `baker`, against whisper base, whose words are runs of characters), in this
process, segment by segment as a worker does it (``pipeline/timing.py``, pauses and joins counted). Prints
the median absolute errors of word starts, word ends, and junctions between consecutive words, for whisper
tiny.en (the English recognizer of the quality gates) and whisper base, and the two recognizers' disagreement
with each other on the same audio (how exact the reference itself is); and, independent of any recognizer,
each sentence's first word start and last word end against where its waveform's energy starts and ends.

    .venv/bin/python scripts/bench_word_timings.py
"""

from __future__ import annotations

import argparse

import numpy as np

from pipeline.prepare.timing_eval import boundary_errors, han_boundary_errors, junction_errors, recognized_words
from pipeline.synth import finish_segment, plan
from pipeline.timing import synthesize_timed, word_times
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from wire.settings import load_settings

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


HELD_OUT_ZH = [
    "我们明天早上八点在学校门口见面。",
    "这家饭店的菜做得非常好吃。",
    "请把窗户打开，让新鲜空气进来。",
    "他每天骑自行车去公司上班。",
    "图书馆里的书可以借回家看两个星期。",
    "今年夏天的雨水比往年多了很多。",
    "妈妈在厨房里给我们包饺子。",
    "这条河的两边种满了柳树。",
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


def speech_edges(audio: np.ndarray, rate: int) -> tuple[float, float]:
    """First and last instant the 5 ms envelope is over 2 % of its peak: where speech starts and ends."""
    n = max(1, int(rate * 0.005))
    env = np.convolve(np.abs(audio), np.ones(n) / n, mode="same")
    loud = np.nonzero(env > 0.02 * env.max())[0]
    return loud[0] / rate, loud[-1] / rate


def chinese(bank: VoiceBank, settings, voice: str) -> None:  # type: ignore[no-untyped-def]
    """Each Han character's times against whisper base's words (runs of characters), and the energy edges."""
    errors, edges = [], []
    for text in HELD_OUT_ZH:
        audio, rate, ours = timed_say(bank, settings, text, voice)
        errors += han_boundary_errors(ours, recognized_words(audio, rate, "zh", settings.runtime.cache_dir))
        onset, offset = speech_edges(audio, rate)
        edges.append((ours[0][1] - onset, ours[-1][2] - offset))
    starts, ends = errors[0::2], errors[1::2]
    print(f"{voice} (Chinese) vs whisper base: {len(starts)} of its words (runs of characters) matched, "
          f"{sum(len(t) - 1 for t in HELD_OUT_ZH)} characters in all; median |error| starts {np.median(starts) * 1000:.0f} ms, "
          f"ends {np.median(ends) * 1000:.0f} ms, all boundaries {np.median(errors) * 1000:.0f} ms; first character start - "
          f"speech onset median {np.median([e[0] for e in edges]) * 1000:+.0f} ms, last character end - speech offset "
          f"median {np.median([e[1] for e in edges]) * 1000:+.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voice", default="joe")
    ap.add_argument("--zh-voice", default="baker", help="the Chinese voice (two-stage: durations); '' skips Chinese")
    args = ap.parse_args()
    settings = load_settings()
    bank = VoiceBank(settings.catalogue, settings.runtime)
    if args.zh_voice:
        chinese(bank, settings, args.zh_voice)
    rendered = [timed_say(bank, settings, text, args.voice) for text in HELD_OUT]
    starts_at, ends_at = [], []  # the sentence's first word start and last word end against its energy envelope
    for audio, rate, ours in rendered:
        onset, offset = speech_edges(audio, rate)
        starts_at.append(ours[0][1] - onset)
        ends_at.append(ours[-1][2] - offset)
    print(f"energy envelope (5 ms, 2 % of peak): first word start - speech onset median {np.median(starts_at) * 1000:+.0f} ms "
          f"(max |.| {np.max(np.abs(starts_at)) * 1000:.0f}); last word end - speech offset median "
          f"{np.median(ends_at) * 1000:+.0f} ms (max |.| {np.max(np.abs(ends_at)) * 1000:.0f})")
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
