"""joe in two stages (acoustic -> HiFi-GAN decoder) against the whole Piper graph: speed and equality.

    python scripts/bench_twostage.py [--threads 1] [--repeats 5] [--cache DIR]

Both run FP32, noise off, batch 1, on the same 12 held-out sentences (``EVAL_SENTENCES_EN``), each from
its own session with ``--threads`` intra-op threads. A pass synthesizes every sentence once; passes of the
two paths alternate (whole, two-stage, whole, ...) so load from elsewhere hits both alike, and each
sentence's median over ``--repeats`` passes is kept. RTF is inference seconds over audio seconds.
Also reported: the largest absolute sample difference between the two paths, and the two stages' share
of the two-stage time. Results go to ``bench-results/twostage.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.prepare.quantize_eval import EVAL_SENTENCES_EN
from pipeline.voices.base import SynthesisOptions
from wire.settings import load_settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cache", default=None, help="model cache (default: the settings' runtime.model_cache_dir)")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "twostage.json"))
    args = ap.parse_args()

    env = dict(os.environ)
    if args.cache:
        env["TTSFARM_RUNTIME_MODEL_CACHE_DIR"] = args.cache
    settings = load_settings(env=env)
    runtime = dataclasses.replace(settings.runtime, intra_op_threads=args.threads, inter_op_threads=1, device="cpu",
                                  precision="fp32", warmup=False)
    from pipeline.voices.piper.stages import build_piper_two_stage
    from pipeline.voices.piper.voice import PiperVoice
    from pipeline.voices.runtime import SessionFactory

    spec = settings.catalogue.get("joe")
    whole = PiperVoice(spec, SessionFactory(runtime), precision="fp32")
    staged = build_piper_two_stage(spec, SessionFactory(runtime))
    opts = SynthesisOptions.noiseless()
    items = [whole.phonemize(t, "en").ids for t in EVAL_SENTENCES_EN]
    for voice in (whole, staged):
        voice.synthesize_batch([items[0]], opts)

    seconds: dict[str, list[list[float]]] = {"whole": [[] for _ in items], "twostage": [[] for _ in items]}
    stage_s: dict[str, list[list[float]]] = {"acoustic": [[] for _ in items], "vocoder": [[] for _ in items]}
    audio: dict[str, list[np.ndarray]] = {"whole": [], "twostage": []}
    for rep in range(args.repeats):
        for k, ids in enumerate(items):
            start = time.perf_counter()
            (a,) = whole.synthesize_batch([ids], opts)
            seconds["whole"][k].append(time.perf_counter() - start)
            start = time.perf_counter()
            (out,) = staged.acoustic_outputs([ids], opts)
            mid = time.perf_counter()
            (b,) = staged.vocode([out.frames])
            end = time.perf_counter()
            seconds["twostage"][k].append(end - start)
            stage_s["acoustic"][k].append(mid - start)
            stage_s["vocoder"][k].append(end - mid)
            if rep == 0:
                audio["whole"].append(a)
                audio["twostage"].append(b)
    audio_s = sum(len(a) for a in audio["whole"]) / whole.sample_rate
    median = {name: sum(statistics.median(s) for s in per) for name, per in {**seconds, **stage_s}.items()}
    lengths_equal = all(len(a) == len(b) for a, b in zip(audio["whole"], audio["twostage"]))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(audio["whole"], audio["twostage"])) if lengths_equal else None
    result = {
        "sentences": len(items), "audio_s": round(audio_s, 2), "threads": args.threads, "repeats": args.repeats,
        "rtf_whole": round(median["whole"] / audio_s, 4), "rtf_twostage": round(median["twostage"] / audio_s, 4),
        "twostage_vs_whole": round(median["twostage"] / median["whole"] - 1.0, 4),
        "acoustic_share": round(median["acoustic"] / median["twostage"], 3),
        "lengths_equal": lengths_equal, "max_abs_diff": diff,
        "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "python": platform.python_version(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"\n| path | RTF ({args.threads} thread) | x real time |\n|---|---:|---:|")
    for name in ("whole", "twostage"):
        rtf = result[f"rtf_{name}"]
        print(f"| {name} | {rtf:.4f} | {1 / rtf:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
