"""Whole-segment vs windowed vocoding, side by side in one run: what ``streaming.windowed`` buys.

    python -m bench.lab streaming [--mixes en_short,zh_short] [--saturate-s 20] [--latency-s 30]
        [--idle-jobs 20] [--out bench-results/streaming]

For each mix and each mode (``streaming.windowed`` false, then true; the same farm layout, the defaults):

* idle first chunk: jobs one at a time on an idle farm of one worker (``ttsfarm bench idle``);
* saturation (closed loop) then Poisson arrivals at 70 % of it (``bench.run.run_bench``): throughput,
  first chunk P50/P95/P99 (``--repeats 2``: the pair twice, whole-windowed-windowed-whole, against drift);
* first: the model time of the mix's texts in this process on one thread, whole vs windowed interleaved
  (what windowing costs the model, free of the farm's and the other tenants' noise).

Then the stitched-vs-whole difference of each two-stage voice's windows (noise off, the served window sizes
and small ones), in this process. Prints Markdown tables; writes ``<out>/streaming.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from bench.idle import idle_first_chunk
from bench.run import KINDS, BenchConfig, LoadSpec, run_bench
from wire.settings import settings_from_environment

MODES = {"whole": "false", "windowed": "true"}
DIFF_TEXTS = {
    "en": ["Hello there.", "The quick brown fox jumps over the lazy dog, twice, before breakfast.",
           "Windowed vocoding lets a long sentence start to play before its last window is made, and the stitched "
           "windows must equal the whole."],
    "zh": ["你好。", "今天天气很好，我们去公园散步吧。", "流式合成让一句长话在最后一个窗口做完之前就开始播放，拼接的窗口必须等于整段。"],
}


def stitched_vs_whole(settings: Any) -> list[dict[str, Any]]:
    import numpy as np

    from pipeline.voices.bank import VoiceBank
    from pipeline.voices.base import SynthesisOptions
    from pipeline.voices.twostage import TwoStageVoice
    from pipeline.voices.windows import WindowPlan, vocode_windowed

    bank = VoiceBank(settings.catalogue, dataclasses.replace(settings.runtime, intra_op_threads=1))
    rows = []
    for name, spec in settings.catalogue.voices.items():
        if spec.engine != "twostage":
            continue
        voice = bank.get(name)
        assert isinstance(voice, TwoStageVoice)
        lang = spec.languages[0]
        ids = [voice.phonemize(t, lang).ids for t in DIFF_TEXTS.get(lang, DIFF_TEXTS["en"])]
        frames = [a.frames for a in voice.acoustic_outputs(ids, SynthesisOptions.noiseless())]
        whole = voice.vocode(frames)
        s = settings.streaming
        for label, plan in (("served", WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)),
                            ("small", WindowPlan(first=16, size=48))):
            stitched = vocode_windowed(voice.vocoder, frames, plan)
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(stitched, whole))
            snr = min(10 * np.log10(float(np.sum(b**2)) / max(float(np.sum((a - b) ** 2)), 1e-30)) for a, b in zip(stitched, whole))
            rows.append({"voice": name, "plan": label, "first": plan.first, "size": plan.size, "context": voice.vocoder.context,
                         "frames": [int(f.shape[0]) for f in frames], "max_abs_diff": diff, "min_snr_db": round(snr, 1)})
    return rows


def compute_cost(settings: Any, kinds: list[Any], reps: int) -> list[dict[str, Any]]:
    """Model time of the mix's texts in this process, one thread, whole vs windowed (acoustic pass + every window
    of the served plan) interleaved text by text: what windowing costs the model, without the farm's noise."""
    from pipeline.voices.bank import VoiceBank
    from pipeline.voices.base import SynthesisOptions
    from pipeline.voices.twostage import TwoStageVoice
    from pipeline.voices.windows import WindowPlan, vocode_windowed

    bank = VoiceBank(settings.catalogue, dataclasses.replace(settings.runtime, intra_op_threads=1))
    rows = []
    for kind in kinds:
        voice = bank.get(kind.voice)
        if not isinstance(voice, TwoStageVoice):
            continue
        lang = settings.catalogue.voices[kind.voice].languages[0]
        s = settings.streaming
        plan = WindowPlan.from_ms(s.first_window_ms, s.window_ms, sample_rate=voice.sample_rate, hop=voice.hop)
        ids = [voice.phonemize(t, lang).ids for t in kind.texts]
        opts = SynthesisOptions()
        spent = {"whole": 0.0, "windowed": 0.0}
        for rep in range(reps + 1):
            for item in ids:
                for mode in (("whole", "windowed") if rep % 2 else ("windowed", "whole")):
                    start = time.perf_counter()
                    if mode == "whole":
                        voice.synthesize_batch([item], opts)
                    else:
                        vocode_windowed(voice.vocoder, [voice.acoustic_outputs([item], opts)[0].frames], plan)
                    if rep:  # the first round warms up
                        spent[mode] += time.perf_counter() - start
        rows.append({"voice": kind.voice, "texts": len(ids), "reps": reps, "whole_ms": round(spent["whole"] * 1000, 1),
                     "windowed_ms": round(spent["windowed"] * 1000, 1),
                     "cost_pct": round(100 * (spent["windowed"] / spent["whole"] - 1), 1)})
    return rows


def _pct(d: dict[str, Any] | None) -> str:
    return "–" if not d or not d.get("n") else f"{d['p50']:.0f} / {d['p95']:.0f} / {d['p99']:.0f}"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--mixes", default="en_short")
    ap.add_argument("--saturate-s", type=float, default=20.0)
    ap.add_argument("--latency-s", type=float, default=30.0)
    ap.add_argument("--idle-jobs", type=int, default=20)
    ap.add_argument("--skip-load", action="store_true", help="idle first chunk and differences only")
    ap.add_argument("--repeats", type=int, default=1, help="pairs of runs per mix, in ABBA order")
    ap.add_argument("--compute-reps", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("bench-results/streaming"))


def main(args: argparse.Namespace) -> int:
    settings = settings_from_environment()
    out: dict[str, Any] = {"command": args.command, "load_average_before": list(os.getloadavg()), "runs": []}
    out["compute"] = compute_cost(settings, [KINDS[m] for m in args.mixes.split(",")], args.compute_reps)
    print(json.dumps(out["compute"]), flush=True)
    for mix in args.mixes.split(","):
        kind = KINDS[mix]
        order = [m for r in range(args.repeats) for m in (list(MODES) if r % 2 == 0 else list(MODES)[::-1])]
        for mode in order:
            flag = MODES[mode]
            env = {"TTSFARM_STREAMING_WINDOWED": flag}
            row: dict[str, Any] = {"mix": mix, "mode": mode, "load_before": os.getloadavg()[0]}
            row["idle"] = idle_first_chunk([f"{k}={v}" for k, v in env.items()], args.idle_jobs, voice=kind.voice,
                                           texts=kind.texts, number="" if mix.startswith("zh") else " Number {i}.")
            if not args.skip_load:
                load = LoadSpec(mix=mix, duration_s=args.latency_s, seed=5, timeout_s=300)
                result = run_bench(BenchConfig(env=env, load=load, saturate_s=args.saturate_s, saturate_concurrency=8,
                                               load_fraction=0.7, warmup_jobs=4, label=f"{mix}-{mode}"))
                sat, at70 = result["phases"]["saturation"], result["phases"]["load"]
                row["saturation"] = sat["throughput"]
                row["saturation_first_chunk_ms"] = sat["first_chunk_ms"]["all"]
                row["rate_70"] = result["config"]["load"]["rate"]
                row["at_70"] = {"first_chunk_ms": at70["first_chunk_ms"]["all"], "throughput": at70["throughput"],
                                "jobs": at70["jobs"]}
                row["contamination"] = result.get("contamination")
            row["load_after"] = os.getloadavg()[0]
            out["runs"].append(row)
            print(json.dumps(row)[:600], flush=True)
    out["stitched_vs_whole"] = stitched_vs_whole(settings)
    out["load_average_after"] = list(os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "streaming.json").write_text(json.dumps(out, indent=1))
    print(report(out))
    return 0


def report(doc: dict[str, Any]) -> str:
    lines = [f"`{doc['command']}` — load average {doc['load_average_before'][0]:.2f} before, {doc['load_average_after'][0]:.2f} after", "",
             "| mix | mode | idle first chunk P50 / max ms | saturation jobs/s | speech s/s | 70 %: jobs/s offered | "
             "first chunk at 70 % P50 / P95 / P99 ms | load before → after |", "|---|---|---|---:|---:|---:|---|---|"]
    for r in doc["runs"]:
        idle = r["idle"]["total"]
        sat = r.get("saturation") or {}
        lines.append(f"| {r['mix']} | {r['mode']} | {idle['p50']:.0f} / {idle['max']:.0f} | {sat.get('jobs_per_s', '–')} | "
                     f"{sat.get('speech_s_per_s', '–')} | {r.get('rate_70', '–')} | {_pct((r.get('at_70') or {}).get('first_chunk_ms'))} | "
                     f"{r['load_before']:.2f} → {r['load_after']:.2f} |")
    lines += ["", "| voice | texts × rounds | whole ms | windowed ms | windowing costs |", "|---|---|---:|---:|---:|"]
    for c in doc.get("compute", []):
        lines.append(f"| {c['voice']} | {c['texts']} × {c['reps']} | {c['whole_ms']} | {c['windowed_ms']} | {c['cost_pct']} % |")
    lines += ["", "| voice | windows | first / later frames | context | max abs diff | min SNR dB |", "|---|---|---:|---:|---:|---:|"]
    for d in doc["stitched_vs_whole"]:
        lines.append(f"| {d['voice']} | {d['plan']} | {d['first']} / {d['size']} | {d['context']} | {d['max_abs_diff']:.1e} | {d['min_snr_db']} |")
    return "\n".join(lines)
