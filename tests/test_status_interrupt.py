"""`ttsfarm status --watch` ends on one Ctrl-C (SIGINT) wherever the interrupt lands, a finalizer included.

Python raises KeyboardInterrupt in the main thread at its next step; when that step is inside a finalizer (an
object's ``__del__``, run when a reference drops), Python prints "Exception ignored" and drops the interrupt, and
a watch loop would go on redrawing (the README's command test once waited 60 s on it and killed it). Here every
redraw drops an object whose ``__del__`` takes most of the loop's time, so the signal lands inside one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import sys, time
import cli.status as status

class Slow:
    def __del__(self):
        time.sleep(0.4)

render = status.render

def slow_render(snap):
    Slow()  # dropped at once: its finalizer runs here, in the main thread
    return render(snap)

status.render = slow_render
from cli import main
sys.exit(main(["status", "--watch", "0.05"]))
"""


def test_one_interrupt_ends_the_watch_even_inside_a_finalizer(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "watch.log"
    env = {**os.environ, "TTSFARM_REDIS_URL": redis_url, "TTSFARM_REDIS_KEY_PREFIX": "interrupt"}
    root = Path(__file__).resolve().parent.parent
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while out.read_text(errors="replace").count("ttsfarm status ") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")
            time.sleep(0.05)
        time.sleep(0.2)  # inside the next redraw's finalizer (0.4 s of each ~0.45 s step)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130, out.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in out.read_text(errors="replace")
