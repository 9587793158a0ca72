"""Real-time factor of each voice at batch 1, 4 and 8; FP32 against INT8 for Piper.

    python -m bench.lab voices [--voices joe,kumo] [--batches 1,4,8] [--repeats 3] [--threads 2]

RTF is inference seconds over audio seconds (lower is faster); ``x real time`` is its inverse. Each
configuration runs its whole sentence set once to warm up, then ``--repeats`` more times, and the median
pass is reported. Each repeat runs every configuration of a voice once in turn (all batch sizes, Piper
FP32 and INT8), so a burst of load from elsewhere hits them alike and the median drops it. The same
sentences make every batch size, so the rows of one voice compare directly. A Piper batch is one padded
``session.run``; Kokoro's graph takes batch 1, so its "batch 4/8" is 4/8 items run one after another
inside one ``synthesize_batch`` call. A two-stage voice (``joe``) also gets a row as served: its prepared
stages, each in the precision its recorded verdict allows.

The INT8 Piper row appears when the voice's INT8 model passed its quality gate; if no INT8 model exists
the bench runs ``ttsfarm quantize`` (static, default exclusions) first. Results go to
``bench-results/voices.json`` and a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

from bench.local import wait_quiet
from pipeline.voices.base import SynthesisOptions
from wire.settings import Settings, settings_from_environment

log = logging.getLogger(__name__)

# Eight sentences of mixed length per language; batches are consecutive groups of them.
SENTENCES = {
    "en": [
        "The train left the station just as the rain began.",
        "Good night.",
        "Every morning she walks her dog along the river, stopping to watch the boats drift past the old mill.",
        "Can you hear the music from the street?",
        "Three small boxes were stacked by the door.",
        "He laughed.",
        "The committee will publish its findings next spring, after the last interviews are finished.",
        "Turn off the lights when you leave the room.",
    ],
    "zh": [
        "今天天气很好，我们去公园散步吧。",
        "谢谢。",
        "这本书讲的是一个小女孩在大城市里寻找自己梦想的故事。",
        "你明天有空吗？",
        "火车马上就要开了，请大家抓紧时间上车。",
        "好的。",
        "图书馆周末开放，但是节假日的时候会提前关门。",
        "他每天早上都喝一杯热茶。",
    ],
}


def _machine(threads: int) -> dict[str, Any]:
    import onnxruntime

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "providers": onnxruntime.get_available_providers(),
        "onnxruntime": onnxruntime.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "intra_op_threads": threads,
        "load_average_before": list(os.getloadavg()),
    }


def _ensure_int8(settings: Settings, name: str) -> dict[str, Any] | None:
    """The INT8 report of a Piper voice, running the quantizer first if there is no INT8 model yet."""
    from pipeline.voices.piper.graph import int8_paths, prepare_piper_graph
    from pipeline.voices.runtime import resolve_resource

    spec = settings.catalogue.voices[name]
    prepared = prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir)
    model, report = int8_paths(prepared.path)
    if not model.is_file() or not report.is_file():
        from pipeline.prepare.quantize import format_summary, quantize_voice

        log.warning("no INT8 model of %s yet: running the quantizer (static, default exclusions)", name)
        print(format_summary(quantize_voice(settings, name, mode="static")))
    return json.loads(report.read_text()) if report.is_file() else None


def _timed_pass(voice: Any, items: list[Any], batch: int, opts: SynthesisOptions) -> tuple[float, float]:
    """Inference seconds and audio seconds of the whole set, in consecutive batches of ``batch``."""
    spent, samples = 0.0, 0
    for start in range(0, len(items), batch):
        group = items[start : start + batch]
        t0 = time.perf_counter()
        outs = voice.synthesize_batch(group, opts)
        spent += time.perf_counter() - t0
        samples += sum(len(a) for a in outs)
    return spent, samples / voice.sample_rate


def bench_voices(voices: list[Any], lang: str, batches: list[int], repeats: int, *, how: str) -> list[dict[str, Any]]:
    """One row per voice and batch size: the median of ``repeats`` passes after one warm-up pass.

    Each repeat runs every configuration (batch size x voice, e.g. Piper FP32 and INT8) once, in turn,
    so a burst of load from elsewhere falls on all of them alike and the median drops it.
    """
    items = [voices[0].phonemize(text, lang).ids for text in SENTENCES[lang]]
    opts = SynthesisOptions()  # the voice's own defaults, as served
    configs = [(batch, k) for batch in batches for k in range(len(voices))]
    for batch, k in configs:
        _timed_pass(voices[k], items, batch, opts)
    passes: dict[tuple[int, int], list[tuple[float, float]]] = {c: [] for c in configs}
    loads: list[float] = []
    for _ in range(repeats):
        for batch, k in configs:
            passes[(batch, k)].append(_timed_pass(voices[k], items, batch, opts))
        loads.append(os.getloadavg()[0])
    rows = []
    for batch, k in configs:
        voice, runs = voices[k], passes[(batch, k)]
        rtfs = [s / a for s, a in runs]
        order = sorted(range(len(runs)), key=lambda i: rtfs[i])
        mid = order[len(order) // 2]  # the median pass itself (upper median for an even count)
        spent, audio = runs[mid]
        rows.append({
            "voice": voice.name,
            "precision": voice.precision,
            "lang": lang,
            "batch": batch,
            "batching": how if batch > 1 else "single item",
            "items": len(items),
            "audio_s": round(audio, 3),
            "inference_s": round(spent, 3),
            "rtf": round(rtfs[mid], 4),
            "xrealtime": round(1.0 / rtfs[mid], 2),
            "rtf_runs": [round(r, 4) for r in rtfs],
            "rtf_best": round(min(rtfs), 4),
            "load_1m_after_each_repeat": [round(x, 2) for x in loads],
        })
        log.info("%s %s batch %d: RTF %.4f (runs %s)", voice.name, voice.precision, batch, rtfs[mid], rows[-1]["rtf_runs"])
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| voice | precision | batch | how the batch runs | audio s | inference s | RTF (median) | × real time | RTF (best) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['voice']} ({r['lang']}) | {r['precision'].upper()} | {r['batch']} | {r['batching']} | "
            f"{r['audio_s']:.2f} | {r['inference_s']:.2f} | {r['rtf']:.3f} | {r['xrealtime']:.1f} | {r['rtf_best']:.3f} |"
        )
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--voices", default="joe,kumo")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--output", default="bench-results/voices.json")
    ap.add_argument("--no-quantize", action="store_true", help="do not run the quantizer when INT8 is missing")
    ap.add_argument("--max-load", type=float, default=0.0, help="first wait until the 1-minute load average is below this")
    ap.add_argument("--wait-max-s", type=float, default=900.0, help="... but no longer than this")


def main(args: argparse.Namespace) -> int:
    from pipeline.voices.bank import VoiceBank
    from pipeline.voices.piper.voice import PiperVoice

    base = settings_from_environment()
    runtime = dataclasses.replace(base.runtime, device="cpu", intra_op_threads=args.threads, inter_op_threads=1, warmup=False)
    settings = dataclasses.replace(base, runtime=runtime)
    batches = [int(b) for b in args.batches.split(",")]
    if args.max_load > 0:  # other work on a small machine skews every timing: the load average alone decides
        wait_quiet(args.max_load, idle_cores=0.0, wait_max_s=args.wait_max_s)
    machine = _machine(args.threads)
    bank = VoiceBank(settings.catalogue, settings.runtime)
    rows: list[dict[str, Any]] = []
    int8_reports: dict[str, Any] = {}
    for name in [v.strip() for v in args.voices.split(",") if v.strip()]:
        spec = settings.catalogue.get(name)
        lang = spec.languages[0]
        if (spec.source or spec.engine) == "piper":  # the whole graph, FP32 and INT8 (`ttsfarm quantize`)
            report = None if args.no_quantize else _ensure_int8(settings, name)
            int8_reports[name] = {k: report[k] for k in ("mode", "passed", "reason", "exclusions")} if report else None
            piper = []
            for precision in ("fp32", "int8"):
                voice = PiperVoice(spec, bank.factory, precision=precision)
                if voice.precision != precision:
                    log.warning("voice %s: no INT8 model that passed its gate; INT8 row skipped", name)
                    continue
                voice.load()
                piper.append(voice)
            rows += bench_voices(piper, lang, batches, args.repeats, how="one padded batch")
        if spec.engine == "twostage":  # as served: its prepared stages, each in the precision its verdict allows
            rows += bench_voices([bank.get(name)], lang, batches, args.repeats, how="two stages, padded batches")
        elif spec.engine != "piper":
            other = bank.get(name)
            rows += bench_voices([other], lang, batches, args.repeats, how=f"sequential (graph batch fixed at {other.max_batch})")
    machine["load_average_after"] = list(os.getloadavg())
    result = {
        "command": args.command,
        "machine": machine,
        "repeats": args.repeats,
        "sentences": SENTENCES,
        "int8_reports": int8_reports,
        "rows": rows,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    print(markdown(rows))
    print(f"\n{machine['cores']} cores, {machine['cpu']}, onnxruntime {machine['onnxruntime']}, "
          f"{args.threads} intra-op threads; load average before {machine['load_average_before'][0]:.2f}, "
          f"after {machine['load_average_after'][0]:.2f}; written to {out}")
    return 0
