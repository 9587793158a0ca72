"""A lone long job and four long jobs together, with ``queue.admission_idle_ahead`` at 3 and 6 beside admission off
(deadline scheduling, all of a job admitted at submit): how many segments an idle farm lets a job keep in flight.

    python scripts/bench_admission_idle.py

Each setting gets a farm of its own (one worker, the default layout), a warm-up, the lone long job twice, then the
four together; prints the lone job's last chunk and the four first chunks (ms from arrival). The section "Listeners
side by side" of docs/BENCHMARKS.md has the numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

import bench_listeners as bl  # noqa: E402
from wire.settings import load_settings  # noqa: E402

SETTINGS = (("deadline", bl.MODES["deadline"]), ("jit, idle_ahead 3", {"TTSFARM_QUEUE_ADMISSION_IDLE_AHEAD": "3"}),
            ("jit, idle_ahead 6", {"TTSFARM_QUEUE_ADMISSION_IDLE_AHEAD": "6"}))


def main() -> int:
    print("| | lone long job: last chunk s | four long together: first chunks ms |\n|---|---|---|")
    for name, extra in SETTINGS:
        env = bl.worker_env(extra=extra)
        farm = bl.LocalFarm(workers=1, env=env)
        try:
            farm.start()
            conf = load_settings(env={**env, "TTSFARM_REDIS_URL": farm.url, "TTSFARM_REDIS_KEY_PREFIX": farm.prefix})
            bl.run(conf, farm, bl.plan([("short", bl.SHORT_EN[0], 0.0), ("long_zh", bl.long_zh(0), 0.0)]))  # warm-up
            lone = [bl.run(conf, farm, bl.plan([("long_en", bl.long_en(0), 0.0)]))[0]["last_chunk_ms"] for _ in range(2)]
            four = bl.run(conf, farm, bl.plan([("long_en", bl.long_en(i), 0.0) for i in range(4)]))
            firsts = ", ".join(f"{r['first_chunk_ms']:,.0f}" for r in four)
            print(f"| {name} | {', '.join(f'{v / 1000:.2f}' for v in lone)} | {firsts} |", flush=True)
        finally:
            farm.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
