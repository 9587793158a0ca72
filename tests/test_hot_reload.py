"""Hot voice reload (workers/control.py, VoiceBank.reload): the new version is built and warmed beside the
old one and swapped in between batches; under a steady stream of jobs none is lost or failed."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pipeline.errors import MODEL_MISSING, UNKNOWN_VOICE, InputError, ModelError
from pipeline.settings import Catalogue, RuntimeSettings, VoiceSpec
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import Phonemized, SynthesisOptions
from pipeline.voices.runtime import StageState
from wire.keys import Keys
from tests.conftest import Farm
from tests.test_metrics import joe_only_config
from workers.control import VoiceReloader, ttsfarm_reload_voices
from workers.metrics import WorkerMetrics


# -- the bank ------------------------------------------------------------------------------------
class FakeVoice:
    def __init__(self, spec: VoiceSpec, bank: list[VoiceBank], log: list[str]) -> None:
        if spec.model == "missing":
            raise ModelError("model file not found: missing", code=MODEL_MISSING)
        self.name, self.languages, self.max_batch, self.precision = spec.name, ("en",), 2, spec.precision
        self.spec, self._bank, self.log = spec, bank, log
        self._session: Any = None
        self.info = None

    def load(self) -> None:
        self._session = object()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def stage_sessions(self) -> dict[str, StageState]:
        return {"model": StageState(Path(self.spec.model), self.precision, None, self._session)}

    def phonemize(self, text: str, lang: str) -> Phonemized:
        return Phonemized(ids=(1, 2, 3), phonemes="abc")

    def synthesize_batch(self, batch: Sequence[Sequence[int]], opts: SynthesisOptions) -> list[np.ndarray]:
        serving = self._bank[0]._voices.get(self.name)
        self.log.append(f"{self.name}:{self.precision}:{'serving' if serving is self else 'beside'}")
        return [np.zeros(10, dtype=np.float32) for _ in batch]


def _bank(log: list[str]) -> tuple[VoiceBank, Catalogue]:
    cat = Catalogue({"a": VoiceSpec("a", "fake", ("en",), model="a.onnx", precision="int8"),
                     "b": VoiceSpec("b", "fake", ("en",), model="b.onnx")}, "a")
    holder: list[VoiceBank] = []
    bank = VoiceBank(cat, RuntimeSettings(), builder=lambda spec, factory: FakeVoice(spec, holder, log))  # type: ignore[arg-type,return-value]
    holder.append(bank)
    bank.load_all()
    return bank, cat


def test_reload_warms_the_new_voice_beside_the_old_then_swaps() -> None:
    log: list[str] = []
    bank, cat = _bank(log)
    old = bank.get("a")
    in_flight = old  # a batch that took its voice before the reload keeps it
    new_cat = dataclasses.replace(cat, voices={**cat.voices, "a": dataclasses.replace(cat.voices["a"], precision="fp32")})
    assert bank.reload(new_cat, ["a"]) == {"a": 2}
    assert "a:fp32:beside" in log  # warmed up before it served
    new = bank.get("a")
    assert new is not old and new.precision == "fp32" and bank.get("b").precision == "fp32"
    assert in_flight.synthesize_batch([[1]], SynthesisOptions())[0].shape == (10,)  # the old one still runs
    assert bank.catalogue.voices["a"].precision == "fp32" and bank.catalogue.voices["b"] is cat.voices["b"]
    info = bank.describe()
    assert info["a"]["version"] == 2 and info["b"]["version"] == 1 and info["a"]["session"] != ""
    assert bank.reload(new_cat) == {"a": 3, "b": 2}  # no names: every concrete voice


def test_a_failed_reload_keeps_the_old_voices() -> None:
    bank, cat = _bank([])
    old_a, old_b = bank.get("a"), bank.get("b")
    broken = dataclasses.replace(cat, voices={**cat.voices, "b": dataclasses.replace(cat.voices["b"], model="missing")})
    with pytest.raises(ModelError):
        bank.reload(broken, ["a", "b"])  # a builds fine, b does not: neither is swapped
    with pytest.raises(InputError) as exc:
        bank.reload(cat, ["nobody"])
    assert exc.value.code == UNKNOWN_VOICE
    assert bank.get("a") is old_a and bank.get("b") is old_b
    assert {n: i["version"] for n, i in bank.describe().items()} == {"a": 1, "b": 1}


def test_control_command_starts_one_reload_at_a_time() -> None:
    gate = threading.Event()
    calls: list[Any] = []

    class Bank:
        def describe(self) -> dict[str, Any]:
            return {"joe": {"version": 1 + len(calls)}}

        def reload(self, catalogue: Any, names: Any) -> dict[str, int]:
            calls.append(names)
            gate.wait(5)
            return {"joe": 2}

    bank = Bank()
    farm = SimpleNamespace(state="loading", bank=bank, interactive_bank=bank, metrics=WorkerMetrics(enabled=False),
                           heartbeat=lambda: None)
    farm.reloader = VoiceReloader(farm, load=lambda: SimpleNamespace(catalogue=None))  # type: ignore[arg-type]
    state = SimpleNamespace(consumer=SimpleNamespace(ttsfarm_farm=farm))
    assert ttsfarm_reload_voices(state, voices=["joe"])["ok"] is False  # still loading
    farm.state = "serving"
    assert ttsfarm_reload_voices(state, voices=["joe"]) == {"ok": True, "accepted": ["joe"], "versions": {"joe": 1}}
    refused = ttsfarm_reload_voices(state, voice="joe")
    assert refused["ok"] is False and "already running" in refused["error"]
    gate.set()
    farm.reloader.thread.join(5)
    assert calls == [["joe"]]
    assert farm.metrics.last_reload["ok"] and farm.metrics.last_reload["versions"] == {"joe": 2}
    assert ttsfarm_reload_voices(SimpleNamespace(consumer=SimpleNamespace()))["ok"] is False


def test_the_cli_broadcasts_on_the_workers_broker() -> None:
    from celery.worker.control import Panel

    from wire.control import RELOAD_COMMAND, control_app
    from workers.app import app

    assert RELOAD_COMMAND in Panel.data
    mine = control_app(app.conf.ttsfarm_settings)
    assert mine.conf.broker_url == app.conf.broker_url
    assert mine.conf.broker_transport_options == app.conf.broker_transport_options


# -- a real worker under load --------------------------------------------------------------------
def _joe(farm: Farm) -> dict[str, Any]:
    (raw,) = farm.client().redis.hgetall(Keys(farm.prefix).workers()).values()
    return json.loads(raw)


@pytest.mark.slow
def test_reload_under_load_loses_and_fails_nothing(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cli import main

    configs = joe_only_config(tmp_path / "configs")
    farm = Farm(redis_url, tmp_path, TTSFARM_CONFIG_DIR=str(configs), TTSFARM_QUEUE_MAX_BATCH_CPU="2")
    monkeypatch.setenv("TTSFARM_REDIS_URL", redis_url)
    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", farm.prefix)
    farm.start_worker()
    try:
        client = farm.client()
        before = _joe(farm)["voice_info"]["joe"]
        assert before["version"] == 1
        jobs: list[Any] = []
        stop = threading.Event()

        def submit() -> None:
            i = 0
            while not stop.is_set():
                lane = "bulk" if i % 3 == 2 else "interactive"
                jobs.append(client.submit(f"Job number {i} is on its way. It arrives soon.", voice="joe", lane=lane))
                i += 1
                time.sleep(0.2)

        producer = threading.Thread(target=submit)
        producer.start()
        time.sleep(3.0)
        joe_only_config(configs, precision="fp32", max_batch=8)  # the new version: another model file, precision
        requested = time.time()
        assert main(["voices", "reload", "joe"]) == 0
        out = capsys.readouterr().out
        assert "reloaded in" in out and "joe v2" in out, out
        reloaded = time.time()
        time.sleep(3.0)
        stop.set()
        producer.join()

        states = [job.wait(timeout=120).state for job in jobs]
        assert len(states) >= 20 and states == ["done"] * len(states)
        keys = Keys(farm.prefix)
        assert client.redis.xlen(keys.dead_letters()) == 0
        finished = [float(job.status()["finished"]) for job in jobs]
        assert any(requested <= t <= reloaded for t in finished), "serving paused during the reload"
        assert any(t > reloaded for t in finished)

        after = _joe(farm)
        info = after["voice_info"]["joe"]
        assert info["version"] == 2 and info["precision"] == "fp32" and info["model"] == "acoustic.fp32.onnx+vocoder.fp32.onnx"
        assert {stage: served["precision"] for stage, served in info["stages"].items()} == {"acoustic": "fp32", "vocoder": "fp32"}
        assert info["session"] != before["session"]
        assert after["reload"]["ok"] and after["reload"]["versions"] == {"joe": 2}
        assert after["errors"] == {}

        # A version that cannot load: refused, the serving version stays and keeps serving.
        joe_only_config(configs, model=str(tmp_path / "missing.onnx"))
        assert main(["voices", "reload", "joe"]) == 1
        assert "old voices still serving" in capsys.readouterr().out
        assert client.submit("Still here after a failed reload.", voice="joe").wait(timeout=60).state == "done"
        info = _joe(farm)["voice_info"]["joe"]
        assert info["version"] == 2 and info["session"] == after["voice_info"]["joe"]["session"]
    finally:
        farm.stop()
