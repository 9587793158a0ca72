"""Mandarin voices side by side: character error rate and speed on the held-out set, one run.

    python -m bench.lab zh_voices [--voices baker,kumo] [--batches 1,4,8] [--repeats 3] [--threads 1]

CER: each sentence of ``configs/heldout_zh.txt`` is synthesized through the path `ttsfarm say` uses and
transcribed by whisper base (``pipeline/prepare/listening.py``, the listening gate's own round trip). Speed: the
same sentences as model ids, in consecutive batches of each size, ``--repeats`` passes after a warm-up
pass, the median pass reported as RTF (inference seconds over audio seconds) and x real time. For a
two-stage voice the acoustic and vocoder seconds are reported apart. Kokoro's graph takes batch 1, so
only its batch 1 is run. Results go to ``bench-results/zh_voices.json``; a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from pipeline.prepare.listening import heldout_sentences, listen
from pipeline.text.zh import normalize_zh
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from wire.settings import load_settings


def _pass(voice: Any, items: list[tuple[int, ...]], batch: int, opts: SynthesisOptions) -> dict[str, float]:
    """One pass over ``items`` in batches of ``batch``: seconds in total and per stage, audio seconds."""
    total = acoustic_s = vocoder_s = audio_s = 0.0
    for k in range(0, len(items), batch):
        part = items[k : k + batch]
        t0 = time.perf_counter()
        if hasattr(voice, "acoustic_outputs"):
            frames = voice.acoustic_outputs(part, opts)
            t1 = time.perf_counter()
            audio = voice.vocode([a.frames for a in frames])
            t2 = time.perf_counter()
            acoustic_s += t1 - t0
            vocoder_s += t2 - t1
        else:
            audio = voice.synthesize_batch(part, opts)
            t2 = time.perf_counter()
        total += t2 - t0
        audio_s += sum(len(a) for a in audio) / voice.sample_rate
    return {"seconds": total, "acoustic_s": acoustic_s, "vocoder_s": vocoder_s, "audio_s": audio_s}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--voices", default="baker,kumo")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench-results/zh_voices.json")


def main(args: argparse.Namespace) -> int:
    settings = load_settings().replace(runtime={"intra_op_threads": args.threads, "inter_op_threads": 1})
    bank = VoiceBank(settings.catalogue, settings.runtime)
    texts = heldout_sentences("zh")
    opts = SynthesisOptions()
    rows: list[dict[str, Any]] = []
    for name in args.voices.split(","):
        voice = bank.get(name)
        items = [voice.phonemize(normalize_zh(t), "zh").ids for t in texts]
        sizes = [b for b in map(int, args.batches.split(",")) if b == 1 or voice.max_batch > 1]
        passes: dict[int, list[dict[str, float]]] = {b: [] for b in sizes}
        for b in sizes:
            _pass(voice, items, b, opts)  # warm-up
        for _ in range(args.repeats):
            for b in sizes:  # interleaved, so load from elsewhere hits every batch size alike
                passes[b].append(_pass(voice, items, b, opts))

        def speak(text: str, v: Any = voice) -> tuple[Any, int]:
            from pipeline.synth import Synthesizer

            out = Synthesizer(settings, bank).synthesize(text, v.name, opts)
            return out.audio, out.sample_rate

        heard = listen(speak, "zh", texts, settings.runtime.cache_dir, settings.quality_gate.max_cer_zh)
        for b in sizes:
            median = sorted(passes[b], key=lambda p: p["seconds"])[len(passes[b]) // 2]
            rtf = median["seconds"] / median["audio_s"]
            rows.append({"voice": name, "batch": b, "cer": heard["value"], "syllable_error_rate": heard["syllable_error_rate"], "rtf": round(rtf, 4), "x_real_time": round(1 / rtf, 1),
                         "acoustic_s": round(median["acoustic_s"], 3), "vocoder_s": round(median["vocoder_s"], 3),
                         "audio_s": round(median["audio_s"], 2), "spread_s": round(statistics.pstdev(p["seconds"] for p in passes[b]), 3),
                         "heard": heard["heard"]})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"threads": args.threads, "sentences": len(texts), "rows": rows}, indent=2, ensure_ascii=False))
    print(f"| voice | batch | CER (whisper base, {len(texts)} held-out sentences) | syllable errors | RTF | x real time | acoustic s | vocoder s | audio s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['voice']} | {r['batch']} | {100 * r['cer']:.1f} % | {100 * r['syllable_error_rate']:.1f} % | {r['rtf']:.4f} | {r['x_real_time']} | "
              f"{r['acoustic_s'] or '-'} | {r['vocoder_s'] or '-'} | {r['audio_s']} |")
    return 0
