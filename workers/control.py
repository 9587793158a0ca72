"""Hot voice reload, the worker's side: ``ttsfarm voices reload [VOICE]`` reaches every worker through a Celery
broadcast (sent by ``wire.control``).

Each worker re-reads the voice catalogue (``configs/voices.toml``, or ``TTSFARM_CONFIG_DIR``), builds the
named voices again beside the ones serving, each with a fresh model session, warms them up, and swaps
them in at once (``VoiceBank.reload``). A batch in flight holds its voice object and finishes on the old
one; the next batch runs on the new one. Nothing is requeued, so no job is lost or failed. If the new
version cannot be built (a missing model file, say), the old one keeps serving and the reload reports
the error. Each worker's heartbeat carries its voices' versions, model files and session ids, and the
outcome of its last reload.

Why a Celery remote-control command and not a Redis pub/sub channel of our own: the worker already
listens on Celery's control channel (the same broker, no extra thread or connection), the broadcast
can name workers (``--destination``), each worker answers with a reply the CLI prints, and Flower and
``celery inspect`` see the command. Like pub/sub it is fire-and-forget: a worker that is down misses
it, and reads the current catalogue when it starts anyway.

The handler only starts the reload in a thread and answers at once: building and warming a voice takes
seconds, and the handler runs on the worker's consumer thread, which must keep serving the broker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery.worker.control import control_command

from wire.control import RELOAD_COMMAND
from wire.settings import Settings, load_settings

log = logging.getLogger(__name__)

class VoiceReloader:
    """One per worker: runs one reload at a time in a background thread."""

    def __init__(self, farm: Any, load: Callable[[], Settings]) -> None:
        self.farm = farm
        self._load = load  # reads the catalogue again (``load_settings`` with the environment the worker started in)
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def request(self, voices: Sequence[str] | None) -> dict[str, Any]:
        """Start a reload and say so; refuse while the voices first load or another reload runs."""
        farm = self.farm
        if farm.state != "serving":
            return {"ok": False, "error": f"worker is {farm.state}, not serving yet"}
        with self._lock:
            if self.thread is not None and self.thread.is_alive():
                return {"ok": False, "error": "a reload is already running on this worker"}
            before = {name: info["version"] for name, info in farm.bank.describe().items()}
            self.thread = threading.Thread(target=self.run, args=(list(voices or []),), name="ttsfarm-reload", daemon=True)
            self.thread.start()
        return {"ok": True, "accepted": list(voices or []) or "all", "versions": before}

    def run(self, voices: list[str]) -> dict[str, Any]:
        farm = self.farm
        start = time.perf_counter()
        result: dict[str, Any] = {"requested": voices or "all", "at": round(time.time(), 3)}
        try:
            catalogue = self._load().catalogue
            versions = farm.bank.reload(catalogue, voices or None)
            if farm.interactive_bank is not farm.bank:  # the reserved loops' own sessions, swapped just after
                farm.interactive_bank.reload(catalogue, voices or None)
            result.update(ok=True, voices=sorted(versions), versions=versions)
            log.info("voices reloaded in %.2f s: %s", time.perf_counter() - start,
                     ", ".join(f"{n} v{v}" for n, v in sorted(versions.items())))
        except Exception as exc:  # the old voices keep serving
            result.update(ok=False, voices=voices, error=f"{type(exc).__name__}: {exc}")
            log.error("voice reload failed, the old voices keep serving: %s", exc)
        result["seconds"] = round(time.perf_counter() - start, 3)
        farm.metrics.reloaded(result)
        farm.metrics.voices_loaded(farm.bank)
        farm.heartbeat()  # tell `ttsfarm voices reload --wait` now, not at the next beat
        return result


@control_command(name=RELOAD_COMMAND, args=[("voice", str)], signature="[voice]")  # type: ignore[misc]
def ttsfarm_reload_voices(state: Any, voice: str | None = None, voices: Sequence[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Reload voices from the catalogue beside the serving ones, then swap them in between batches."""
    farm = getattr(state.consumer, "ttsfarm_farm", None)
    if farm is None:
        return {"ok": False, "error": "this worker runs no ttsfarm consumer"}
    reloader = getattr(farm, "reloader", None)
    if reloader is None:
        env = state.consumer.app.conf.get("ttsfarm_environ") or {}  # read by the entry point, workers.app
        reloader = farm.reloader = VoiceReloader(farm, load=lambda: load_settings(env=env))
    names = list(voices or []) or ([voice] if voice else [])
    return reloader.request(names)
