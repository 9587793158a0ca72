"""Capacity in conversations: N callers taking turns with a voice agent, on a private farm.

    ttsfarm bench conversations [--callers 1,2,4,6,8] [--turns 3] [--workers 1] [--goal-ms 500] [--burst 10]
                                [--set TTSFARM_KEY=VALUE ...] [--out DIR]

A caller is what a voice agent does per call, through the SDK's asyncio face (the path the gateway's agents' socket
takes, docs/AGENTS.md): the user speaks (a pause of 1.5 to 3 s, seeded), then the agent's reply comes as an LLM writes
it (a word every 50 ms into an open job, closed at its end), and the caller plays the reply in real time; its next
turn starts once the reply has been heard. Per turn: the first audio's delay after the reply's first sentence was
written (the earliest a farm can start it) and the underruns while it played (``bench.load.underruns``). The capacity
is the largest N whose turns all played without an underrun with that delay's P95 within ``--goal-ms``.

``--burst N``: N callers whose first replies start at the same instant (the busiest moment of a call centre's hour),
each one's delay to its first audio.

Writes ``<out>/conversations.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from bench.load import underruns
from bench.local import LocalFarm, worker_env
from bench.report import pct
from producer.aio import AsyncClient
from wire.settings import Settings, load_settings

REPLIES = (
    "Sure, I can help with that. Your order left our warehouse this morning and should arrive on Thursday.",
    "I am sorry to hear that. Let me check your account. It looks like the payment went through twice.",
    "Of course. The next appointment is on Monday at ten. Shall I book it for you?",
    "Thanks for waiting. I have updated your address, and you will get a confirmation by email in a minute.",
    "Good question. The plan includes unlimited calls, and data is capped at twenty gigabytes a month.",
)
WORD_S = 0.05  # an LLM writing twenty words a second
USER_S = (1.5, 3.0)  # how long the user speaks before the agent answers


async def reply(client: AsyncClient, text: str, voice: str) -> dict[str, Any]:
    """One agent reply: the text written word by word into an open job while its audio is read. Returns the turn's
    row; ``heard_at``: when the caller has heard the reply out."""
    job = await client.open(voice=voice, format="pcm")
    seen: list[tuple[float, float]] = []

    async def listen() -> None:
        async for chunk in job.stream(timeout=120):
            seen.append((time.monotonic(), len(chunk.pcm) / 2 / chunk.sample_rate))

    listener = asyncio.create_task(listen())
    written_at = None  # when the first sentence was finished (and queued)
    for word in text.split(" "):
        if await job.append(word + " ") and written_at is None:
            written_at = time.monotonic()
        await asyncio.sleep(WORD_S)
    await job.close()
    if written_at is None:  # a reply of one sentence: queued by the close
        written_at = time.monotonic()
    await listener
    count, silent = underruns(seen)
    audio_s = sum(seconds for _, seconds in seen)
    return {"first_audio_ms": round((seen[0][0] - written_at) * 1000, 1), "underruns": count,
            "silent_s": round(silent, 3), "audio_s": round(audio_s, 3), "heard_at": seen[0][0] + audio_s + silent}


async def conversations(settings: Settings, callers: int, turns: int, voice: str, seed: int) -> list[dict[str, Any]]:
    """``callers`` callers taking ``turns`` turns each, side by side; a row per turn."""
    rows: list[dict[str, Any]] = []

    async def caller(client: AsyncClient, i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        for t in range(turns):
            await asyncio.sleep(rng.uniform(*USER_S))
            row = await reply(client, REPLIES[(i + t) % len(REPLIES)], voice)
            await asyncio.sleep(max(0.0, row.pop("heard_at") - time.monotonic()))
            rows.append({"caller": i, "turn": t, **row})

    async with AsyncClient.from_url(settings=settings) as client:
        await asyncio.gather(*(caller(client, i) for i in range(callers)))
    return rows


async def burst(settings: Settings, callers: int, voice: str) -> list[dict[str, Any]]:
    """``callers`` first replies started at the same instant."""
    async with AsyncClient.from_url(settings=settings) as client:
        rows = await asyncio.gather(*(reply(client, REPLIES[i % len(REPLIES)], voice) for i in range(callers)))
    for row in rows:
        row.pop("heard_at")
    return list(rows)


def summary(rows: list[dict[str, Any]], goal_ms: float) -> dict[str, Any]:
    first = pct(r["first_audio_ms"] for r in rows)
    bad = sum(1 for r in rows if r["underruns"])
    return {"turns": len(rows), "first_audio_ms": first, "turns_with_underrun": bad,
            "within_goal": bad == 0 and first["p95"] is not None and first["p95"] <= goal_ms}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--callers", default="1,2,4,6,8", help="the numbers of callers to try, comma-separated")
    ap.add_argument("--turns", type=int, default=3, help="turns per caller")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--voice", default="joe")
    ap.add_argument("--goal-ms", type=float, default=500.0, help="P95 of the first audio's delay a turn may take")
    ap.add_argument("--burst", type=int, default=10, help="callers whose first replies start together (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="TTSFARM_KEY=VALUE", help="a worker setting")
    ap.add_argument("--out", type=Path)


def main(args: argparse.Namespace) -> int:
    counts = [int(n) for n in str(args.callers).split(",") if n.strip()]
    farm = LocalFarm(workers=args.workers, env=worker_env(extra=dict(kv.split("=", 1) for kv in args.set))).start()
    try:
        settings = load_settings(env={**farm.env})
        runs = []
        for n in counts:
            rows = asyncio.run(conversations(settings, n, args.turns, args.voice, args.seed))
            runs.append({"callers": n, **summary(rows, args.goal_ms), "rows": rows})
            first = runs[-1]["first_audio_ms"]
            print(f"{n:3d} callers: first audio after the first sentence P50 {first['p50']} / P95 {first['p95']} / "
                  f"max {first['max']} ms; turns with an underrun {runs[-1]['turns_with_underrun']} of "
                  f"{runs[-1]['turns']}")
        together = asyncio.run(burst(settings, args.burst, args.voice)) if args.burst else []
    finally:
        farm.stop()
    capacity = max((r["callers"] for r in runs if r["within_goal"]), default=0)
    print(f"capacity: {capacity} conversations on {args.workers} worker(s) (P95 <= {args.goal_ms:g} ms, no underrun)")
    if together:
        ms = pct(r["first_audio_ms"] for r in together)
        print(f"{args.burst} first replies at once: first audio P50 {ms['p50']} / max {ms['max']} ms")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"command": getattr(args, "command", ""), "workers": args.workers, "turns": args.turns,
                  "goal_ms": args.goal_ms, "settings": args.set, "capacity": capacity, "runs": runs,
                  "burst": {"callers": args.burst, "first_audio_ms": pct(r["first_audio_ms"] for r in together),
                            "rows": together}, "date": time.strftime("%Y-%m-%d")}
        (args.out / "conversations.json").write_text(json.dumps(result, indent=2))
    return 0
