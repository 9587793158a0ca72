"""How fast the lossy encoders run (pipeline.encoders): stored and streamed, per format, at the voices' rates.

One minute of a real voice (joe, noiseless) is encoded whole (stored: seekable, with the MP3 gapless tag)
and in 100 ms chunks (streamed, as the gateway does); the table gives times real time and output bit/s.
Run: ``.venv/bin/python scripts/bench_encoders.py``.
"""

from __future__ import annotations

import time

import numpy as np

from pipeline.encoders import AudioEncoder, encode_lossy
from pipeline.synth import Synthesizer
from pipeline.voices.base import SynthesisOptions
from wire.settings import load_settings

TEXT = ("The farm reads every book to its listeners by morning. She opened the window and looked at the quiet "
        "street. A strong wind blew the leaves across the garden. ")


def main() -> None:
    out = Synthesizer(load_settings()).synthesize(TEXT * 3, "joe", SynthesisOptions.noiseless())
    rate = out.sample_rate
    audio = np.tile(out.audio, int(np.ceil(60 * rate / len(out.audio))))[: 60 * rate]
    seconds = len(audio) / rate
    print(f"{seconds:.0f} s of joe at {rate} Hz, one thread")
    print("| format | stored x real time | streamed x real time | bit/s |")
    print("|---|---|---|---|")
    for fmt in ("mp3", "ogg", "aac"):
        t0 = time.perf_counter()
        data = encode_lossy(audio, rate, fmt)
        stored = time.perf_counter() - t0
        t0 = time.perf_counter()
        enc = AudioEncoder(fmt, rate)
        for i in range(0, len(audio), rate // 10):
            enc.write(audio[i : i + rate // 10])
        enc.close()
        streamed = time.perf_counter() - t0
        print(f"| {fmt} | {seconds / stored:.0f} | {seconds / streamed:.0f} | {len(data) * 8 / seconds:,.0f} |")


if __name__ == "__main__":
    main()
