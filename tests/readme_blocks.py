"""The shell commands of the README and of the docs pages its reference moved to (their ```bash blocks), one per
line, and each one's kind (its program and subcommand, or the block it belongs to): what
tests/test_readme_commands.py and tests/test_make_recipes.py check.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` outside quotes that starts a word)."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


# The pages whose every shell command works as written: the README, then the reference pages it links for the
# commands it does not show (in this order: a block's commands run in order, and each block stays on one page).
COMMAND_PAGES = ("README.md", "docs/USAGE.md", "docs/DEPLOY.md")


def readme_commands(text: str | None = None) -> list[str]:
    if text is None:
        text = "\n".join((ROOT / page).read_text() for page in COMMAND_PAGES)
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if cmd := strip_comment(line).strip():
                out.append(cmd)
    return out


def words(cmd: str) -> list[str]:
    """The command's words without leading ``VAR=value`` assignments."""
    toks = shlex.split(cmd)
    while toks and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", toks[0]):
        toks.pop(0)
    return toks


SHARD_PORTS = ("6390", "6391")  # the shards block's nodes (the Sentinel block's redis-servers use others)


def kind(cmd: str) -> str:
    toks = words(cmd)
    prog = Path(toks[0]).name
    if "TTSFARM_REDIS_SHARDS=" in cmd or (prog == "redis-server" and toks[1:3] in (["--port", p] for p in SHARD_PORTS)):
        return "shards"  # the shards' block: its own nodes, run in order
    if "TTSFARM_REDIS_MASTER_NAME=" in cmd or prog in ("redis-server", "redis-cli") or "--sentinel" in toks:
        return "sentinel"  # the Sentinel group's block: run in order against a group of its own
    if prog == "ttsfarm":
        return f"ttsfarm {toks[1] if len(toks) > 1 else ''}".strip()
    if prog == "celery":
        sub = [t for t in toks[1:] if not t.startswith("-") and t != "workers.app"]
        metered = "TTSFARM_WORKER_METRICS_PORT=" in cmd
        return f"celery {sub[0]}" + (" metered" if metered else "")
    if prog == "curl":
        return "curl metrics" if "/metrics" in cmd else "curl gateway"
    return f"{prog} {toks[1]}" if prog == "make" else prog
