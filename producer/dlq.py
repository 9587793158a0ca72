"""The dead-letter stream: segments a worker could not run (malformed, or failing ``max_deliveries`` times).
`ttsfarm dlq` lists, shows, requeues and purges them through the broker's dead-letter steps
(``producer.wire.broker.Broker``). The record is ``producer.wire.records``'s."""

from __future__ import annotations

import json
import sys

from producer.wire.broker import Broker


def run(broker: Broker, action: str, entry_id: str = "", count: int = 50) -> int:
    """`ttsfarm dlq list|show|requeue|purge`: print what was found or done; 1 when ``show`` or ``requeue``
    finds nothing."""
    if action == "list":
        for dl in broker.dead_letters(count):
            print(f"{dl.id}  {dl.code:<22} job={dl.job_id or '-':<24} deliveries={dl.deliveries}  {dl.message[:80]}")
    elif action == "show":
        found = broker.dead_letter(entry_id)
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
