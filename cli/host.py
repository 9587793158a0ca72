"""This host's part of the farm: `ttsfarm worker` (the plain `celery -A workers.app worker`), `ttsfarm flower` (Flower
on the farm's broker) and `ttsfarm doctor` (would this install serve on the configured device?)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cli.common import settings_of


def add_commands(sub: Any) -> None:
    p = sub.add_parser("worker", help="start a farm worker (the plain `celery -A workers.app worker`)",
                       epilog="Other arguments go to `celery worker`.")
    p.add_argument("--name", default=f"ttsfarm-{os.getpid()}@{os.uname().nodename}")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker, passthrough=True)

    p = sub.add_parser("flower", help="start Flower on the farm's broker", epilog="Other arguments go to Flower.")
    p.add_argument("--port", type=int, default=5555)
    p.set_defaults(func=cmd_flower, passthrough=True)

    p = sub.add_parser("doctor", help="check the install: onnxruntime build and providers, torch CUDA, GPU; fails "
                       "when this host would not serve on the configured device")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="check for this runtime.device (default: the settings')")
    p.set_defaults(func=cmd_doctor)


def cmd_worker(args: argparse.Namespace) -> int:
    from bench.processes import worker_command

    cmd = worker_command(args.name, loglevel=args.loglevel, extra=args.passed)
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def cmd_flower(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--port={args.port}", *args.passed]
    os.execvp(cmd[0], cmd)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from pipeline.prepare.doctor import main as doctor_main

    return doctor_main(settings_of(args).runtime, args.device)
