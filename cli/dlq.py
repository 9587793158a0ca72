"""The dead-letter stream: segments a worker could not run (malformed, or failing ``max_deliveries`` times).
`ttsfarm dlq` lists, shows, requeues and purges them through the broker's dead-letter steps
(``wire.broker.AdminBroker``). The record is ``wire.records``'s."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from cli.common import client_of

if TYPE_CHECKING:
    from wire.broker import AdminBroker


def add_commands(sub: Any) -> None:
    p = sub.add_parser("dlq", help="list, show, requeue or purge dead-lettered segments")
    p.add_argument("action", choices=["list", "show", "requeue", "purge"])
    p.add_argument("id", nargs="?", default="", help="dead-letter entry id (show, requeue)")
    p.add_argument("--count", type=int, default=50)
    p.set_defaults(func=cmd_dlq)


def cmd_dlq(args: argparse.Namespace) -> int:
    return run(client_of(args).broker, args.action, args.id, args.count)


def run(broker: AdminBroker, action: str, entry_id: str = "", count: int = 50) -> int:
    """`ttsfarm dlq list|show|requeue|purge`: print what was found or done; 1 when ``show`` or ``requeue``
    finds nothing."""
    if action == "list":
        for dl in broker.dead_letters(count):
            print(f"{dl.id}  {dl.code:<22} job={dl.job_id or '-':<24} deliveries={dl.deliveries}  {dl.message[:80]}")
    elif action == "show":
        found = broker.find_dead_letter(entry_id)
        if found is None:
            print(f"no dead letter {entry_id}", file=sys.stderr)
            return 1
        print(json.dumps(found.__dict__, indent=2, ensure_ascii=False))
    elif action == "requeue":
        try:
            print(f"requeued as {broker.requeue_dead_letter(entry_id)}")
        except KeyError:
            print(f"no dead letter {entry_id}", file=sys.stderr)
            return 1
    elif action == "purge":
        print(f"removed {broker.purge_dead_letters()} dead letter(s)")
    return 0
