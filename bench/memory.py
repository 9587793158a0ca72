"""What one process keeps per call, for the two sources of worker RSS growth it compares.

    ttsfarm bench memory espeak --calls 20000   # piper-tts's bridge vs pipeline.text.espeak
    ttsfarm bench memory arena --runs 800        # joe's sessions, memory patterns on vs off

``espeak``: the same texts through ``espeakbridge.get_phonemes`` and through ``EspeakClauses.clauses``, each in a
process of its own; RSS and Python's allocated blocks before and after. ``arena``: joe's prepared acoustic (INT8) and
vocoder (FP32) sessions, one thread, CPU arena on, run on random shapes (batch 1-4, 10-120 phonemes, 20-80 frames)
with ``enable_mem_pattern`` on and off, each in a process of its own, both at once; glibc's mmapped bytes (where the
arena's regions live), bytes in use and RSS after a warm-up of 50 runs and at the end. Prints one line per variant.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import multiprocessing as mp
import sys
import time


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _state() -> dict[str, float]:
    gc.collect()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    rss_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
    return {"rss_mb": rss_kb / 1024, "in_use_mb": m.uordblks / 1e6, "mmapped_mb": m.hblkhd / 1e6,
            "blocks": float(sys.getallocatedblocks())}


def _espeak_one(variant: str, calls: int) -> str:
    from pipeline.text import en

    texts = [f"Sentence number {i}, said the clerk to visitor {i * 7}. Is it {i + 3} o'clock?" for i in range(calls + 200)]
    espeak = en._espeak()
    espeak.set_voice(en.DEFAULT_VOICE)
    if variant == "bridge":
        from piper import espeakbridge

        call = espeakbridge.get_phonemes
    else:
        call = lambda t: list(espeak.clauses(t))  # noqa: E731
    for t in texts[:200]:
        call(t)
    a, start = _state(), time.perf_counter()
    for t in texts[200:]:
        call(t)
    b, took = _state(), time.perf_counter() - start
    return (f"{variant}: {calls} calls, RSS {a['rss_mb']:.1f} -> {b['rss_mb']:.1f} MB "
            f"({(b['rss_mb'] - a['rss_mb']) * 1024 * 1024 / calls:.0f} bytes a call), Python blocks "
            f"{a['blocks']:.0f} -> {b['blocks']:.0f}, {took:.2f} s")


def _arena_one(variant: str, runs: int) -> str:
    import numpy as np
    import onnxruntime as ort

    from pipeline.voices.prepared import voice_root
    from wire.settings import load_settings

    runtime = load_settings().runtime
    found = sorted(voice_root(runtime.cache_dir, "joe").glob("*/acoustic.int8.onnx"), key=lambda p: p.stat().st_mtime)
    if not found:
        sys.exit("joe is not prepared: run `make setup` (or `ttsfarm voices prepare joe`) first")
    folder = found[-1].parent
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 1, 1, 3
    opts.enable_mem_pattern = variant == "on"
    opts.enable_cpu_mem_arena = runtime.cpu_mem_arena
    acoustic = ort.InferenceSession(str(folder / "acoustic.int8.onnx"), opts, providers=["CPUExecutionProvider"])
    vocoder = ort.InferenceSession(str(folder / "vocoder.fp32.onnx"), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    scales = np.array([0.667, 1.0, 0.8], np.float32)
    seeded = "noise_offsets" in {i.name for i in acoustic.get_inputs()}  # prepared at version 5 or later

    def one() -> None:
        b, n = int(rng.integers(1, 5)), int(rng.integers(10, 120))
        ids = rng.integers(1, 100, size=(b, n)).astype(np.int64)
        feeds = {"input": ids, "input_lengths": np.full(b, n, np.int64), "scales": scales}
        if seeded:
            feeds["noise_offsets"] = rng.integers(0, 1 << 20, size=b).astype(np.int64)
        latent, _, _ = acoustic.run(None, feeds)
        vocoder.run(None, {"latent": latent[:1, :, : int(rng.integers(20, 80))].copy()})

    for _ in range(50):
        one()
    a, start = _state(), time.perf_counter()
    for _ in range(runs):
        one()
    b, took = _state(), time.perf_counter() - start
    return (f"memory patterns {variant}: {runs} runs, mmapped {a['mmapped_mb']:.1f} -> {b['mmapped_mb']:.1f} MB, "
            f"in use {a['in_use_mb']:.1f} -> {b['in_use_mb']:.1f} MB, RSS {a['rss_mb']:.0f} -> {b['rss_mb']:.0f} MB, "
            f"{took:.1f} s")


def _one(what: str, variant: str, n: int) -> None:
    """One measurement, in a process of its own (so no other variant's allocations are in it)."""
    print(_espeak_one(variant, n) if what == "espeak" else _arena_one(variant, n), flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["espeak", "arena"])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=800)


def main(args: argparse.Namespace) -> int:
    ctx = mp.get_context("spawn")
    n = args.calls if args.what == "espeak" else args.runs
    procs = [ctx.Process(target=_one, args=(args.what, v, n)) for v in (["bridge", "ours"] if args.what == "espeak" else ["on", "off"])]
    if args.what == "espeak":  # one after the other: it is quick
        for p in procs:
            p.start()
            p.join()
    else:  # side by side: the same machine state for both
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return 1 if any(p.exitcode for p in procs) else 0
