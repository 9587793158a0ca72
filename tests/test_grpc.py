"""The Riva-protocol gRPC front end end to end: real redis-server, a real worker process, the server on a thread,
driven by nvidia-riva-client's own ``SpeechSynthesisService`` (and its generated stub where a call must be
malformed on purpose)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import riva.client
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from riva.client.proto import riva_audio_pb2, riva_tts_pb2, riva_tts_pb2_grpc

from grpcfront import BackgroundServer
from grpcfront.asks import read_request
from grpcfront.errors import CODE_KEY
from grpcfront.service import JOB_KEY
from producer.client import Client
from tests.conftest import Farm, FarmSpec
from wire.connect import connect
from wire.settings import Settings

pytestmark = pytest.mark.slow

EN = "The farm speaks Riva's protocol now. A second sentence follows the first, a little longer."
ZH = "今天天气很好，我们去公园散步吧。"


FARM = FarmSpec(baker=True)


@pytest.fixture(scope="module")
def server(farm: Farm) -> Iterator[BackgroundServer]:
    with BackgroundServer(farm.settings) as s:
        yield s


@pytest.fixture(scope="module")
def tts(server: BackgroundServer) -> Iterator[riva.client.SpeechSynthesisService]:
    auth = riva.client.Auth(uri=server.target)
    yield riva.client.SpeechSynthesisService(auth)
    auth.channel.close()


def _metadata(call: Any, kind: str) -> dict[str, str]:
    return dict(getattr(call, kind)() or ())


def _stored_pcm(farm: Farm, job_id: str) -> tuple[bytes, int]:
    result = farm.client().job(job_id).wait(timeout=60)
    rate = int(farm.client().job(job_id).status()["sample_rate"])
    return Path(result.url[len("file://"):]).read_bytes(), rate


def _rms(pcm: bytes) -> float:
    return float(np.sqrt(np.mean((np.frombuffer(pcm, "<i2") / 32768.0) ** 2)))


@pytest.mark.parametrize("text, language", [(EN, "en-US"), (ZH, "zh-CN")])
def test_synthesize_returns_the_jobs_whole_audio(farm: Farm, tts: Any, text: str, language: str) -> None:
    response, call = tts.stub.Synthesize.with_call(
        riva_tts_pb2.SynthesizeSpeechRequest(text=text, language_code=language, sample_rate_hz=16000,
                                             encoding=riva_audio_pb2.LINEAR_PCM), timeout=180)
    stored, rate = _stored_pcm(farm, _metadata(call, "trailing_metadata")[JOB_KEY])
    assert rate == 16000 and response.audio == stored  # PCM16 at the asked rate: what the farm stored
    assert len(response.audio) / 2 / 16000 > 1.0 and _rms(response.audio) > 0.01


@pytest.mark.parametrize("text, language, voice", [(EN, "en-US", "English-US.Male-1"), (ZH, "zh-CN", None)])
def test_synthesize_online_sends_each_chunk_as_it_is_published(farm: Farm, tts: Any, text: str, language: str,
                                                               voice: str | None) -> None:
    call = tts.synthesize_online(text, voice_name=voice, language_code=language, sample_rate_hz=22050)
    responses = list(call)
    job_id = _metadata(call, "initial_metadata")[JOB_KEY]
    stored, rate = _stored_pcm(farm, job_id)
    assert rate == 22050 and b"".join(r.audio for r in responses) == stored
    chunks = list(farm.client().job(job_id).stream(timeout=30))
    assert len(responses) == len(chunks) > 1 and [r.audio for r in responses] == [c.pcm for c in chunks]


class Pieces(list):  # type: ignore[type-arg]
    """Text pieces for ``synthesize_online`` (it takes a list) that hold the last piece back until ``gate`` is set,
    as an LLM still writing would."""

    def __init__(self, pieces: list[str], gate: Any) -> None:
        super().__init__(pieces)
        self.gate = gate
        self.last_sent = 0.0

    def __iter__(self) -> Iterator[str]:
        pieces = list(super().__iter__())
        for i, piece in enumerate(pieces):
            if i == len(pieces) - 1:
                self.gate.wait(30)
                self.last_sent = time.monotonic()
            yield piece


@pytest.mark.parametrize("pieces, language", [
    (["The first ", "sentence is ", "complete here. ", "The second one ", "comes later, ", "and this ", "is its end."],
     "en-US"),
    (["今天天气", "很好。", "我们去公园", "散步吧，", "好不好？"], "zh-CN"),
])
def test_text_sent_in_pieces_plays_its_first_sentence_before_the_last_piece(farm: Farm, tts: Any,
                                                                            pieces: list[str], language: str) -> None:
    import threading

    gate = threading.Event()
    text = Pieces(pieces, gate)
    call = tts.synthesize_online(text, language_code=language, sample_rate_hz=24000, enable_word_time_offsets=True)
    responses, first_at = [], 0.0
    for response in call:
        if not responses:
            first_at = time.monotonic()
            gate.set()
        responses.append(response)
    assert 0 < first_at < text.last_sent  # the first sentence was heard while the last piece was still unwritten
    job_id = _metadata(call, "initial_metadata")[JOB_KEY]
    stored, rate = _stored_pcm(farm, job_id)
    assert rate == 24000 and b"".join(r.audio for r in responses) == stored
    status = farm.client().job(job_id).status()
    assert status.total >= 2 and not status.open
    spoken = "".join(w.word for r in responses for w in r.meta.words)
    assert spoken.replace(" ", "") and all(ch in "".join(pieces) for ch in spoken)


def test_word_time_offsets_come_from_the_farms_word_timings(tts: Any) -> None:
    responses = list(tts.synthesize_online(EN, language_code="en-US", enable_word_time_offsets=True,
                                           sample_rate_hz=22050))
    words = [w for r in responses for w in r.meta.words]
    duration_ms = sum(len(r.audio) for r in responses) / 2 / 22050 * 1000
    assert [w.word for w in words][:6] == ["The", "farm", "speaks", "Riva's", "protocol", "now"]
    starts = [w.start_time for w in words]
    assert starts == sorted(starts) and all(w.start_time <= w.end_time <= duration_ms + 1 for w in words), [(w.word, w.start_time, w.end_time) for w in words]
    whole = tts.synthesize(EN, language_code="en-US", enable_word_time_offsets=True)
    assert [w.word for w in whole.meta.words] == [w.word for w in words]
    assert not list(tts.synthesize_online("Hello there.", language_code="en-US"))[0].meta.words  # only when asked


def test_a_custom_dictionary_changes_the_reading(tts: Any) -> None:
    word = "Antidisestablishmentarianism"
    plain = tts.synthesize(word, voice_name="joe", sample_rate_hz=22050)
    read = tts.synthesize(word, voice_name="joe", sample_rate_hz=22050, custom_dictionary={word: "bˈiː"})
    assert len(read.audio) < 0.6 * len(plain.audio)  # one short syllable instead of twelve


def test_ogg_opus_streams_and_flac_is_whole(tts: Any) -> None:
    ogg = b"".join(r.audio for r in tts.synthesize_online(EN, encoding=riva_audio_pb2.OGGOPUS, sample_rate_hz=48000))
    assert ogg[:4] == b"OggS" and b"OpusHead" in ogg[:64]
    flac = tts.synthesize("A short one.", encoding=riva_audio_pb2.FLAC, sample_rate_hz=22050).audio
    assert flac[:4] == b"fLaC"


def test_voices_are_listed_as_riva_model_configs(farm: Farm, tts: Any) -> None:
    tts_settings = farm.settings
    configs = tts.stub.GetRivaSynthesisConfig(riva_tts_pb2.RivaSynthesisConfigRequest()).model_config
    by_name = {(c.model_name, c.parameters["language_code"]): c.parameters for c in configs}
    joe = by_name[("joe", "en-US")]
    assert joe["voice_name"] == "English-US" and joe["subvoices"] == "Male-1:0,joe:1" and joe["sample_rate_hz"] == "22050"
    listed = [f"{c.parameters['voice_name']}.{sub.split(':')[0]}" for c in configs  # as Riva's talk.py --list-voices
              for sub in c.parameters["subvoices"].split(",")]
    assert "English-US.Male-1" in listed and "Mandarin-CN.baker" in listed
    for name in listed:  # every listed name is one a request may send
        assert read_request(riva_tts_pb2.SynthesizeSpeechRequest(voice_name=name), tts_settings, tts_settings.grpc,
                            streaming=False)
    assert ("default", "zh-CN") in by_name and ("baker", "zh-CN") in by_name
    one = tts.stub.GetRivaSynthesisConfig(riva_tts_pb2.RivaSynthesisConfigRequest(model_name="joe")).model_config
    assert [c.model_name for c in one] == ["joe"]


def _refused(fn: Any, *args: Any, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = fn(*args, **kwargs)
        if not isinstance(result, riva_tts_pb2.SynthesizeSpeechResponse):
            list(result)
    return info.value


def test_an_unknown_voice_is_invalid_argument_naming_the_field(tts: Any) -> None:
    for err in (_refused(tts.synthesize, "Hello.", voice_name="Klingon-KL.Male-9"),
                _refused(tts.synthesize_online, "Hello.", voice_name="Klingon-KL.Male-9")):
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("UNKNOWN_VOICE: voice_name:")
        assert dict(err.trailing_metadata())[CODE_KEY] == "UNKNOWN_VOICE"


def test_a_cancelled_stream_cancels_its_job(farm: Farm, tts: Any) -> None:
    call = tts.synthesize_online(" ".join([EN] * 8), language_code="en-US")
    next(call)
    job_id = _metadata(call, "initial_metadata")[JOB_KEY]
    call.cancel()
    job = farm.client().job(job_id)
    deadline = time.monotonic() + 10
    while job.status().state != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.status().state == "cancelled"


def test_a_deadline_cancels_its_job(farm: Farm, server: BackgroundServer) -> None:
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel := grpc.insecure_channel(server.target))
    # far more audio than 3 s makes (~240 s of it; the worker runs ~16 x real time): the deadline comes mid-job, and
    # long after the job's submit and first chunk, however slow the machine
    call = stub.SynthesizeOnline(iter([riva_tts_pb2.SynthesizeSpeechRequest(text=" ".join([EN] * 40))]), timeout=3)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    job = farm.client().job(_metadata(call, "initial_metadata")[JOB_KEY])
    deadline = time.monotonic() + 10
    while job.status().state != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.status().state == "cancelled"
    channel.close()


def test_a_deadline_cancels_the_job_of_a_reader_that_stopped_reading(farm: Farm, server: BackgroundServer) -> None:
    # a small receive window and no reads past the first response: the server's task waits in gRPC's write when the
    # deadline comes, outside the handler's generator, so only the call's done callback can cancel the job
    channel = grpc.insecure_channel(server.target, options=[("grpc.http2.bdp_probe", 0),
                                                            ("grpc.http2.lookahead_bytes", 16384)])
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel)
    call = stub.SynthesizeOnline(iter([riva_tts_pb2.SynthesizeSpeechRequest(text=" ".join([EN] * 40))]), timeout=4)
    next(call)  # the first audio: well inside the deadline, however slow the machine
    job = farm.client().job(_metadata(call, "initial_metadata")[JOB_KEY])
    time.sleep(4.5)
    deadline = time.monotonic() + 10
    while job.status().state != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.status().state == "cancelled"
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    channel.close()


def test_a_deadline_cancels_the_job_of_a_unary_synthesize(farm: Farm, server: BackgroundServer) -> None:
    """Synthesize answers once the whole job is done: a deadline that comes first ends the call and cancels the job
    (its id is not sent before the end, so the job is found as the one this call added)."""
    r = farm.client().redis
    jobs = lambda: {k.decode().rpartition(":")[2] for k in r.scan_iter(f"{farm.prefix}:job:*") if  # noqa: E731
                    k.decode().count(":") == 2}
    before = jobs()
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel := grpc.insecure_channel(server.target))
    with pytest.raises(grpc.RpcError) as info:  # ~240 s of audio: the deadline comes mid-job however slow the machine
        stub.Synthesize(riva_tts_pb2.SynthesizeSpeechRequest(text=" ".join([EN] * 40)), timeout=3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    (job_id,) = jobs() - before
    job = farm.client().job(job_id)
    deadline = time.monotonic() + 10
    while job.status().state != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.status().state == "cancelled"
    channel.close()


def test_a_full_lane_is_resource_exhausted(settings: Settings) -> None:
    """OVERLOADED (the lane at its backlog limit) is RESOURCE_EXHAUSTED with its code, as the README says: on the
    stub broker, with a serving worker's heartbeat written by hand (no worker runs)."""
    s = settings.replace(redis={"url": f"memory://grpc-full-{uuid.uuid4().hex}"},
                         queue={"max_backlog_interactive_segments": 1})
    broker = connect(s.redis)
    broker.write_heartbeat("host", 1, {"state": "serving", "ts": time.time()})
    Client(None, s, broker=broker).submit("One sentence fills the lane.")
    with BackgroundServer(s) as full:
        err = _refused(riva.client.SpeechSynthesisService(riva.client.Auth(uri=full.target)).synthesize, "Hello.")
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and err.details().startswith("OVERLOADED:")
    assert dict(err.trailing_metadata())[CODE_KEY] == "OVERLOADED"


def test_keys_are_required_when_configured_and_health_needs_none(farm: Farm) -> None:
    front = dataclasses.replace(farm.settings.grpc, api_keys=("k-one", "k-two"))
    with BackgroundServer(farm.settings, front) as keyed:
        for metadata in (None, [["authorization", "Bearer wrong"]], [["authorization", "k-two"]]):
            tts = riva.client.SpeechSynthesisService(riva.client.Auth(uri=keyed.target, metadata_args=metadata))
            err = _refused(tts.synthesize, "Hello.")
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED and err.details().startswith("UNAUTHORIZED:")
        tts = riva.client.SpeechSynthesisService(riva.client.Auth(uri=keyed.target,
                                                                  metadata_args=[["authorization", "Bearer k-two"]]))
        assert tts.synthesize("Hello.").audio
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(keyed.target))
        deadline = time.monotonic() + 10
        while health.Check(health_pb2.HealthCheckRequest(service="nvidia.riva.tts.RivaSpeechSynthesis")).status != \
                health_pb2.HealthCheckResponse.SERVING and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING


def test_no_worker_is_unavailable(farm: Farm) -> None:
    empty = farm.settings.replace(redis={"key_prefix": "no-workers-here"})
    with BackgroundServer(empty) as s:
        err = _refused(riva.client.SpeechSynthesisService(riva.client.Auth(uri=s.target)).synthesize, "Hello.")
        assert err.code() == grpc.StatusCode.UNAVAILABLE and err.details().startswith("NO_WORKERS:")


def test_reflection_lists_the_services(server: BackgroundServer) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(grpc.insecure_channel(server.target))
    reply = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in reply.list_services_response.service}
    assert {"nvidia.riva.tts.RivaSpeechSynthesis", "grpc.health.v1.Health"} <= names


# Every field with values of every kind the protocol lets through: each answered with a status naming the field.
BAD = [
    ({"text": ""}, "EMPTY_TEXT"),
    ({"text": "x" * 300_000}, "TEXT_TOO_LONG"),
    ({"text": "a\x07b"}, "CONTROL_CHARACTERS"),
    ({"text": "<speak><blink>no</blink></speak>"}, "BAD_SSML"),
    ({"text": "<speak>unclosed"}, "BAD_SSML"),
    ({"language_code": "xx-XX"}, "UNSUPPORTED_LANGUAGE"),
    ({"language_code": "de-DE", "voice_name": "joe"}, "UNSUPPORTED_LANGUAGE"),
    ({"language_code": "zh-CN", "voice_name": "joe"}, "UNSUPPORTED_LANGUAGE"),
    ({"language_code": "\u2603" * 1000}, "UNSUPPORTED_LANGUAGE"),
    ({"encoding": riva_audio_pb2.MULAW}, "UNSUPPORTED_FORMAT"),
    ({"encoding": riva_audio_pb2.ALAW}, "UNSUPPORTED_FORMAT"),
    ({"encoding": 99}, "UNSUPPORTED_FORMAT"),
    ({"encoding": -5}, "UNSUPPORTED_FORMAT"),
    ({"sample_rate_hz": -1}, "UNSUPPORTED_SAMPLE_RATE"),
    ({"sample_rate_hz": 12345}, "UNSUPPORTED_SAMPLE_RATE"),
    ({"sample_rate_hz": 2**31 - 1}, "UNSUPPORTED_SAMPLE_RATE"),
    ({"voice_name": "nobody"}, "UNKNOWN_VOICE"),
    ({"voice_name": "x" * 5000}, "UNKNOWN_VOICE"),
    ({"voice_name": "English-US.Male-1\x00"}, "UNKNOWN_VOICE"),
    ({"custom_dictionary": "no-reading"}, "BAD_LEXICON"),
    ({"custom_dictionary": ",,,"}, "BAD_LEXICON"),
    ({"custom_dictionary": "word  !!!"}, "BAD_LEXICON"),
    ({"zero_shot_data": riva_tts_pb2.ZeroShotData(audio_prompt=b"\x00" * 100, quality=20)}, "BAD_OPTION"),
    ({"custom_configuration": {"exaggeration_factor": "1.5"}}, "BAD_OPTION"),
]


@pytest.mark.parametrize("fields, code", BAD, ids=[f"{next(iter(f))}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_input_at_every_field_is_invalid_argument_and_the_server_keeps_serving(server: BackgroundServer,
                                                                                    fields: dict[str, Any],
                                                                                    code: str) -> None:
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel := grpc.insecure_channel(server.target))
    request = riva_tts_pb2.SynthesizeSpeechRequest(**{"text": "Hello.", "language_code": "en-US", **fields})
    field = next(iter(fields))
    for err in (_refused(stub.Synthesize, request, timeout=30),
                _refused(stub.SynthesizeOnline, iter([request]), timeout=30)):
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
        assert err.details().startswith(f"{code}: {field}:") and dict(err.trailing_metadata())[CODE_KEY] == code
    channel.close()


def test_malformed_messages_and_mixed_streams_get_a_status_and_the_server_keeps_serving(server: BackgroundServer,
                                                                                      tts: Any) -> None:
    channel = grpc.insecure_channel(server.target)
    raw = channel.unary_unary("/nvidia.riva.tts.RivaSpeechSynthesis/Synthesize")
    for garbage in (b"\xff\xff\xff", b"\x0a\x05\xff\xfe\xfd\xfc\xfb", b"\x0a\xff\xff\xff\xff\x0f"):
        with pytest.raises(grpc.RpcError) as info:
            raw(garbage, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info.value.details().startswith("BAD_INPUT:")
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel)
    first = riva_tts_pb2.SynthesizeSpeechRequest(text="One. ", language_code="en-US", sample_rate_hz=22050)
    changed = riva_tts_pb2.SynthesizeSpeechRequest(text="Two.", sample_rate_hz=16000)
    err = _refused(stub.SynthesizeOnline, iter([first, changed]), timeout=30)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details().startswith("BAD_OPTION: sample_rate_hz:")
    bad_piece = riva_tts_pb2.SynthesizeSpeechRequest(text="Two\x07 three. ")
    err = _refused(stub.SynthesizeOnline, iter([first, bad_piece]), timeout=30)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details().startswith("CONTROL_CHARACTERS: text:")
    assert list(stub.SynthesizeOnline(iter([]), timeout=10)) == []  # no message: no audio, no error
    err = _refused(tts.stub.GetRivaSynthesisConfig, riva_tts_pb2.RivaSynthesisConfigRequest(model_name="nobody"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "model_name:" in err.details()
    assert tts.synthesize("Still serving.").audio
    channel.close()


def test_metrics_count_calls_by_status_and_code(server: BackgroundServer, tts: Any) -> None:
    tts.synthesize("Counted.")
    _refused(tts.synthesize, "Hello.", voice_name="nobody")
    sample = server.metrics.registry.get_sample_value
    assert sample("ttsfarm_grpc_calls_total", {"method": "Synthesize", "status": "OK", "code": ""}) >= 1
    assert sample("ttsfarm_grpc_calls_total", {"method": "Synthesize", "status": "INVALID_ARGUMENT",
                                               "code": "UNKNOWN_VOICE"}) >= 1
    assert sample("ttsfarm_grpc_first_audio_seconds_count", {"method": "Synthesize"}) >= 1
