"""The LiveKit and Pipecat distributions (``integrations/``) against a real farm: a real worker, the gateway served by
uvicorn, and each distribution's own tests run in a virtual environment that holds only it and its framework
(``tests.plugin_venv``), through the framework's own interfaces."""

from __future__ import annotations

import json
import subprocess
import tempfile
import wave
from pathlib import Path

import pytest

from wire.keys import Keys
from tests.conftest import Farm, FarmSpec
from tests.gateway_server import BackgroundServer
from tests.plugin_venv import clean_env, plugin_venv

pytestmark = pytest.mark.slow

MODULES = {"livekit": "livekit.plugins.ttsfarm", "pipecat": "pipecat_ttsfarm"}
EXAMPLES = {"livekit": "livekit_agent.py", "pipecat": "pipecat_bot.py"}  # each has a `say TEXT OUT.wav` mode
FARM_PACKAGES = ("producer", "wire", "gateway", "pipeline", "workers")
FARM = FarmSpec(metrics=True)  # the LiveKit tests watch the worker's windows and CPU after a close


def watched(farm: Farm) -> dict[str, str]:
    """What the distributions' tests may watch of the serving worker: its metrics endpoint and its process."""
    beats = [json.loads(v) for v in farm.client().redis.hvals(Keys(farm.prefix).workers())]
    return {"TTSFARM_WORKER_METRICS_URL": f"http://127.0.0.1:{farm.settings.worker.metrics_port}/metrics",
            "TTSFARM_WORKER_PID": str(beats[0]["pid"]), "TTSFARM_WORKER_LOOPS": str(len(beats[0]["loops"]))}


def failures(stdout: str, keep: int = 8000) -> str:
    """A failed run's report as CI can show it: its FAILURES section first (the passed tests' output, which ``-rP``
    prints after it, would otherwise push it out of a cut log), then the summary lines."""
    start, passes = stdout.find("= FAILURES ="), stdout.find("= PASSES =")
    if start < 0:
        return stdout[-keep:]
    end = passes if passes > start else len(stdout)
    return stdout[start:end][:keep] + "\n...\n" + "\n".join(stdout.splitlines()[-12:])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_distribution_passes_its_tests_alone_beside_its_framework(name: str, farm: Farm,
                                                                      gateway_server: BackgroundServer) -> None:
    env = plugin_venv(name)
    print(f"{name}: venv {'built in %.0f s' % env.built_s if env.built_s is not None else 'cached'}, "
          f"distribution reinstalled in {env.refresh_s:.1f} s")
    with tempfile.TemporaryDirectory() as elsewhere:  # not the checkout: nothing of the farm on the path
        alone = subprocess.run(
            [str(env.python), "-c", "import importlib.util, sys; import " + MODULES[name] + "; "
             f"sys.exit(any(importlib.util.find_spec(p) for p in {FARM_PACKAGES!r}))"],
            cwd=elsewhere, env=clean_env(), capture_output=True, text=True)
        assert alone.returncode == 0, f"{MODULES[name]} did not import alone, or farm code is installed: {alone.stderr}"
        tests = subprocess.run(
            [str(env.python), "-m", "pytest", "-q", "-rP", "-p", "no:cacheprovider", "-c", str(env.source / "pyproject.toml"),
             "--rootdir", str(env.source), str(env.source / "tests")],
            cwd=elsewhere, env=clean_env(TTSFARM_GATEWAY_URL=gateway_server.url, **watched(farm)), capture_output=True,
            text=True, timeout=600)
        print(tests.stdout[-4000:])
        assert tests.returncode == 0, f"{failures(tests.stdout)}\n{tests.stderr[-3000:]}\n{farm.logs()[-3000:]}"
        assert " passed" in tests.stdout.splitlines()[-1] and "skipped" not in tests.stdout.splitlines()[-1]
        out = Path(elsewhere) / "example.wav"
        example = subprocess.run(
            [str(env.python), str(env.source.parent.parent / "examples" / EXAMPLES[name]), "say",
             "The example speaks through the plugin.", str(out)],
            cwd=elsewhere, env=clean_env(TTSFARM_GATEWAY_URL=gateway_server.url), capture_output=True, text=True,
            timeout=120)
        assert example.returncode == 0, example.stderr[-3000:]
        with wave.open(str(out)) as audio:
            assert audio.getnframes() / audio.getframerate() > 1.0
