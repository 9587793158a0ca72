"""``ttsfarm bench [STAGE] [options]``: the benches that make the published figures, one stage each.

A stage is a module with ``add_arguments(parser)`` and ``main(args) -> int``. Only the stage that runs (or whose
``--help`` is asked) is imported, so one stage's client libraries (gRPC, the gateway's HTTP client) or model code never
load for another. Without a stage the command is ``load``: ``ttsfarm bench --workers 2`` is ``ttsfarm bench load
--workers 2``. The lab's benches, whose figures stay in lab notes, run the same way through ``python -m bench.lab``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import shlex
import sys
from collections.abc import Mapping
from typing import NamedTuple


class Stage(NamedTuple):
    module: str
    help: str


STAGES: dict[str, Stage] = {
    "load": Stage("bench.run", "load-test a farm: first-chunk latency, throughput, batches, worker RSS (the default)"),
    "host": Stage("bench.host", "a GPU worker's host and Redis path on a fake device: CPU, commands, round trips per segment"),
    "farm": Stage("bench.farm", "the farm against its baselines on the same texts and cores: ceiling, piper, scaling, soak"),
    "listeners": Stage("bench.listeners", "long listeners and short requests on one worker: FIFO, deadline, just in time"),
    "memory": Stage("bench.memory", "what one process keeps per call: the espeak bridge, onnxruntime's memory patterns"),
    "idle": Stage("bench.idle", "the first chunk of short jobs on an idle farm, split into its stages"),
    "fleet": Stage("bench.fleet", "worker processes on one queue, a streaming listener on every job: Redis per segment and node"),
    "shards": Stage("bench.shards", "one worker draining the same backlog over 1, 2 and 3 Redis nodes"),
    "grpc": Stage("bench.grpc_paths", "first audio and throughput over gRPC beside the HTTP gateway and the SDK"),
    "conversations": Stage("bench.conversations", "capacity in conversations: callers taking turns with a voice agent"),
}


def overview(prog: str, stages: Mapping[str, Stage], default: str | None) -> str:
    width = max(map(len, stages))
    rows = "\n".join(f"  {name:<{width}}  {stage.help}" for name, stage in stages.items())
    bare = f"Without a STAGE: {default}. " if default else ""
    return (f"usage: {prog} {'[STAGE]' if default else 'STAGE'} [options]\n\n{bare}"
            f"A stage's options: {prog} STAGE --help.\n\nstages:\n{rows}\n")


def stage_parser(name: str, *, prog: str = "ttsfarm bench", stages: Mapping[str, Stage] = STAGES) -> argparse.ArgumentParser:
    """The parser of one stage, built by its module (which this imports)."""
    module = importlib.import_module(stages[name].module)
    parser = argparse.ArgumentParser(prog=f"{prog} {name}", description=stages[name].help)
    module.add_arguments(parser)
    return parser


def main(argv: list[str], *, redis_url: str | None = None, prog: str = "ttsfarm bench",
         stages: Mapping[str, Stage] = STAGES, default: str | None = "load") -> int:
    """Run the stage ``argv`` names (``default`` when its first word is no stage). The stage's ``args`` also carry
    ``command`` (the command line, for its results) and ``redis`` (``ttsfarm --redis``, which the load stage reads)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(overview(prog, stages, default), end="")
        return 0
    if argv and argv[0] in stages:
        name, rest = argv[0], argv[1:]
    elif default:
        name, rest = default, argv
    else:
        print(overview(prog, stages, default), end="", file=sys.stderr)
        return 2
    args = stage_parser(name, prog=prog, stages=stages).parse_args(rest)
    args.command = f"{prog} {shlex.join(argv)}".strip()
    args.redis = redis_url
    bench_log = logging.getLogger("bench")  # a bench's progress shows without -v; -vv still shows its debug lines
    bench_log.setLevel(min(logging.INFO, logging.getLogger().getEffectiveLevel()))
    return int(importlib.import_module(stages[name].module).main(args) or 0)
