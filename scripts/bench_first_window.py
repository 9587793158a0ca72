"""Acoustic pass + first window vs whole synthesis of short English sentences, in process, on 1 and 2 intra-op
threads (what a caller's first chunk costs the model, per session layout), interleaved, median of 14 rounds.

    .venv/bin/python scripts/bench_first_window.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dataclasses  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from pipeline.voices.bank import VoiceBank  # noqa: E402
from pipeline.voices.base import SynthesisOptions  # noqa: E402
from pipeline.voices.windows import WindowedItem, WindowPlan, vocode_next  # noqa: E402
from wire.settings import load_settings  # noqa: E402

s = load_settings(env=dict(os.environ))
plan_ms = (s.streaming.first_window_ms, s.streaming.window_ms)
texts = ["Are you there? Number 4.", "Good morning, how can I help? Number 7.", "Your order has shipped. Number 9."]
banks = {t: VoiceBank(s.catalogue, dataclasses.replace(s.runtime, intra_op_threads=t)) for t in (1, 2)}
res: dict[int, list[tuple[float, float, float]]] = {1: [], 2: []}
for rep in range(16):
    for t in (1, 2) if rep % 2 else (2, 1):
        v = banks[t].get("joe")
        ids = v.phonemize(texts[rep % 3], "en").ids
        t0 = time.perf_counter(); (a,) = v.acoustic_outputs([ids], SynthesisOptions()); t1 = time.perf_counter()
        it = WindowedItem.of(0, a.frames, v.vocoder, WindowPlan.from_ms(*plan_ms, sample_rate=v.sample_rate, hop=v.hop))
        vocode_next(v.vocoder, [it]); t2 = time.perf_counter()
        v.synthesize_batch([ids], SynthesisOptions()); t3 = time.perf_counter()
        if rep >= 2: res[t].append((t1 - t0, t2 - t1, t3 - t2))
for t, rows in res.items():
    r = np.median(np.array(rows), axis=0) * 1000
    print(f"{t} thread(s): acoustic {r[0]:.1f} ms, first window {r[1]:.1f} ms, acoustic+first {r[0]+r[1]:.1f} ms, whole synthesis {r[2]:.1f} ms")
print("load", os.getloadavg())
