"""What a byte costs Redis inside a script: a private redis-server, scripts that take, make, read and write one value
of each size, timed by Redis itself (``INFO commandstats``: microseconds per call).

    python scripts/bench_lua_bytes.py [--sizes 10000,100000] [--calls 300]

Why (docs/BENCHMARKS.md): the worker's publish script carries each piece's PCM. A value becomes a Lua
string when a script takes it as an argument or reads it with ``redis.call``, and Redis's Lua hashes every string it
makes over its whole length; a value a script passes on (to ``SET``, ``XADD``, as its reply) is copied, not hashed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

import redis

SCRIPTS = {  # name -> (Lua, what it shows)
    "noop": ("return 1", "the value as an argument, unused"),
    "concat": ("local s = ARGV[1] .. 'x' return 1", "one more string of that size made in Lua"),
    "get": ("local s = redis.call('GET', KEYS[1]) return 1", "the value read into Lua (a reply becomes a string)"),
    "set": ("redis.call('SET', KEYS[2], ARGV[1]) return 1", "the argument written on (passed, not made)"),
    "reply": ("return ARGV[1]", "the argument returned"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000", help="value sizes in bytes")
    ap.add_argument("--calls", type=int, default=300, help="calls per script and size")
    args = ap.parse_args(argv)
    server = shutil.which("redis-server")
    if server is None:
        print("bench_lua_bytes: redis-server is not on PATH", file=sys.stderr)
        return 2
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        print(f"redis {r.info('server')['redis_version']}: microseconds per EVALSHA, by the value's size")
        sizes = [int(x) for x in args.sizes.split(",")]
        print("| script | what it shows | " + " | ".join(f"{n:,} B" for n in sizes) + " |")
        print("|---|---|" + "---:|" * len(sizes))
        for name, (lua, what) in SCRIPTS.items():
            sha = r.script_load(lua)
            cells = []
            for size in sizes:
                value = os.urandom(size)
                r.set("value", value)
                r.config_resetstat()
                for _ in range(args.calls):
                    r.evalsha(sha, 2, "value", "copy", value)
                cells.append(f"{r.info('commandstats')['cmdstat_evalsha']['usec_per_call']:,.1f}")
            print(f"| {name} | {what} | " + " | ".join(cells) + " |")
        cells = []
        for size in sizes:  # the same value written by a plain command: what a byte costs Redis outside Lua
            value = os.urandom(size)
            r.config_resetstat()
            for _ in range(args.calls):
                r.set("copy", value)
            cells.append(f"{r.info('commandstats')['cmdstat_set']['usec_per_call']:,.1f}")
        print("| SET (no script) | the value written by a plain command | " + " | ".join(cells) + " |")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
