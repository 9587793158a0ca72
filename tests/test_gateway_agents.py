"""The agents' socket, ``WS /v1/agents`` (``gateway.agents``, docs/AGENTS.md), end to end: real redis-server, a real
worker, the gateway served by uvicorn, a websockets client as an agent framework's plugin would use."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from gateway import create_app
from tests.conftest import Farm, FarmSpec
from tests.gateway_server import BackgroundServer
from tests.test_farm_cancel_trim import IN_FLIGHT, drained, made

pytestmark = pytest.mark.slow

FARM = FarmSpec(metrics=True)  # the clear test counts the segments the worker makes (its metrics endpoint)

FIRST = "The first context reads this sentence. Then a second one, a little longer. "
SECOND = "Meanwhile the second context says something else entirely. "
LONG = " ".join(f"Sentence number {i} of a long answer is read now." for i in range(10))


class Agent:
    """One socket: JSON messages out; messages in, an audio message's PCM put back as bytes under ``pcm``."""

    def __init__(self, url: str, *, binary: bool = False) -> None:
        self.ws: ClientConnection = connect(f"{url}/v1/agents?binary={int(binary)}", open_timeout=10, max_size=None)
        self.binary = binary
        self.seen: list[dict[str, Any]] = []

    def send(self, **message: Any) -> None:
        self.ws.send(json.dumps(message))

    def recv(self, timeout: float = 60) -> dict[str, Any]:
        message = json.loads(self.ws.recv(timeout=timeout))
        if message["type"] == "audio":
            message["pcm"] = self.ws.recv(timeout=timeout) if self.binary else base64.b64decode(message["pcm"])
            assert len(message["pcm"]) == message["bytes"]
        self.seen.append(message)
        return message

    def until(self, done: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not done(message := self.recv(timeout=max(0.1, deadline - time.monotonic()))):
            pass
        return message

    def audio(self, context_id: str) -> list[dict[str, Any]]:
        return [m for m in self.seen if m["type"] == "audio" and m["context_id"] == context_id]

    def close(self) -> None:
        self.ws.close()


def is_(kind: str, context_id: str | None = None) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m["type"] == kind and (context_id is None or m.get("context_id") == context_id)


@pytest.fixture
def agent(gateway_server: BackgroundServer) -> Iterator[Agent]:
    a = Agent(gateway_server.ws_url, binary=True)
    yield a
    a.close()


@pytest.fixture(scope="module")
def strict_server(farm: Farm) -> Iterator[BackgroundServer]:
    """A gateway whose agents' sockets time out after a second and take two contexts."""
    gw = dataclasses.replace(farm.settings.gateway, agent_idle_s=1.0, agent_max_contexts=2)
    with BackgroundServer(create_app(farm.settings, gw)) as s:
        yield s


def _check_words(audio: list[dict[str, Any]], text: str) -> None:
    """Each audio message's words are spoken inside the audio sent up to its end, in order, and read ``text``."""
    sent_s, last_end = 0.0, 0.0
    for m in audio:
        sent_s += len(m["pcm"]) / 2 / m["sample_rate"]
        for w in m["words"]:
            assert last_end - 0.01 <= w["start_s"] <= w["end_s"] <= sent_s + 0.01, (w, sent_s)
            assert w["text"] == text[w["char_start"]:w["char_end"]]
            last_end = w["end_s"]
    words = [w["text"] for m in audio for w in m["words"]]
    assert words == [w.strip(".,") for w in text.split()], words


def test_two_contexts_interleaved_on_one_socket(agent: Agent, gateway_http: httpx.Client) -> None:
    agent.send(type="open", context_id="a", voice="joe", format="pcm")
    agent.send(type="open", context_id="b", voice="joe", format="pcm")
    jobs = {m["context_id"]: m["job_id"] for m in (agent.until(is_("opened")), agent.until(is_("opened")))}
    assert set(jobs) == {"a", "b"} and jobs["a"] != jobs["b"]
    for one, other in zip(FIRST.split(" "), SECOND.split(" ") + [""] * 20):
        agent.send(type="text", context_id="a", text=one + " ")
        if other:
            agent.send(type="text", context_id="b", text=other + " ")
    agent.send(type="close", context_id="b")
    agent.send(type="close", context_id="a")
    done = {m["context_id"]: m for m in (agent.until(is_("done")), agent.until(is_("done")))}
    for cid, text in (("a", FIRST), ("b", SECOND)):
        audio = agent.audio(cid)
        assert [m["seq"] for m in audio] == list(range(len(audio)))
        pcm = b"".join(m["pcm"] for m in audio)
        assert done[cid]["state"] == "done" and done[cid]["job_id"] == jobs[cid]
        assert done[cid]["samples_sent"] == len(pcm) // 2 and done[cid]["chunks_sent"] == len(audio)
        stored = gateway_http.get(f"/v1/jobs/{jobs[cid]}/audio")
        assert stored.status_code == 200 and stored.content == pcm  # what went out is the context's whole audio
        _check_words(audio, " ".join(text.split()))
    order = [m["context_id"] for m in agent.seen if m["type"] == "audio"]
    assert order.index("b") < len(order) - 1 - order[::-1].index("a")  # b's audio came while a's still played


def test_flush_mid_sentence_gives_audio_while_the_context_is_open(agent: Agent) -> None:
    agent.send(type="open", context_id="turn", voice="joe", text="A reply cut off in the middle of")
    agent.until(is_("opened"))
    agent.send(type="flush", context_id="turn")
    assert agent.until(is_("flushed"))["segments"] >= 1
    first = agent.until(is_("audio", "turn"))  # no close was sent: the flush alone made it speak
    assert first["seq"] == 0 and len(first["pcm"]) > 0
    agent.send(type="text", context_id="turn", text=" a sentence")
    agent.send(type="close", context_id="turn", text=".")
    assert agent.until(is_("done", "turn"))["state"] == "done"
    _check_words(agent.audio("turn"), "A reply cut off in the middle of a sentence.")


def test_clear_is_acknowledged_with_the_audio_sent_and_cancels_the_job(agent: Agent, farm: Farm,
                                                                      gateway_http: httpx.Client) -> None:
    before = made(farm)  # bulk segments the worker finished: a context that plays to its end moves the count
    agent.send(type="open", context_id="probe", voice="joe", lane="bulk", text="One bulk sentence. ")
    agent.send(type="close", context_id="probe")
    agent.until(is_("done", "probe"))
    drained(farm)
    assert made(farm) - before == 1
    before = made(farm)
    agent.send(type="open", context_id="long", voice="joe", lane="bulk")
    job_id = agent.until(is_("opened"))["job_id"]
    for sentence in LONG.split(". "):  # a segment per sentence: each text message finishes one
        agent.send(type="text", context_id="long", text=sentence.rstrip(".") + ". ")
    agent.send(type="open", context_id="other", voice="joe", text=SECOND)
    agent.until(is_("opened", "other"))
    agent.until(is_("audio", "long"))
    agent.send(type="clear", context_id="long")
    cleared = agent.until(is_("cleared", "long"))
    at_clear = made(farm)
    audio = agent.audio("long")
    assert cleared["job_id"] == job_id and cleared["cancelled"] is True
    assert cleared["chunks_sent"] == len(audio) >= 1
    assert cleared["samples_sent"] == sum(len(m["pcm"]) for m in audio) // 2
    assert cleared["audio_sent_s"] == pytest.approx(cleared["samples_sent"] / audio[0]["sample_rate"], abs=0.001)
    assert gateway_http.get(f"/v1/jobs/{job_id}").json()["state"] == "cancelled"
    agent.send(type="close", context_id="other")  # the other context plays on, to its end
    assert agent.until(is_("done", "other"))["state"] == "done"
    assert len(agent.audio("long")) == len(audio)  # nothing of the cleared context after its answer
    agent.send(type="text", context_id="long", text="more")
    assert agent.until(is_("error"))["error"]["code"] == "UNKNOWN_CONTEXT"
    drained(farm)  # the worker stopped: it finished at most the segments it was making when the clear came
    assert made(farm) - at_clear <= IN_FLIGHT and made(farm) - before < len(LONG.split(". "))


@pytest.mark.parametrize(("message", "code"), [
    ("not json", "BAD_INPUT"),
    ("[1, 2]", "BAD_INPUT"),
    ({"type": "shout", "context_id": "c"}, "BAD_INPUT"),
    ({"type": "text", "text": "no context"}, "BAD_INPUT"),
    ({"type": "text", "context_id": "c", "text": 42}, "MALFORMED_JOB"),
    ({"type": "text", "context_id": "c", "text": "hi", "extra": 1}, "BAD_INPUT"),
    ({"type": "text", "context_id": "nobody", "text": "hi"}, "UNKNOWN_CONTEXT"),
    ({"type": "clear", "context_id": "nobody"}, "UNKNOWN_CONTEXT"),
    ({"type": "open", "context_id": "c"}, "CONTEXT_EXISTS"),
    ({"type": "open", "context_id": "has space"}, "BAD_INPUT"),
    ({"type": "open", "context_id": "v", "voice": "nobody"}, "UNKNOWN_VOICE"),
    ({"type": "open", "context_id": "s", "speed": "fast"}, "BAD_INPUT"),
    (b"\x00\x01", "BAD_INPUT"),
])
def test_a_bad_message_gets_a_coded_error_and_disturbs_no_context(agent: Agent, message: Any, code: str) -> None:
    agent.send(type="open", context_id="c", voice="joe", text="This context is not disturbed. ")
    agent.until(is_("opened", "c"))
    agent.ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    error = agent.until(is_("error"))
    assert error["error"]["code"] == code and error["error"]["message"]
    if isinstance(message, dict) and isinstance(message.get("context_id"), str):
        assert error["context_id"] == message["context_id"]
    agent.send(type="close", context_id="c")
    assert agent.until(is_("done", "c"))["state"] == "done"
    _check_words(agent.audio("c"), "This context is not disturbed.")


def test_too_many_contexts_idle_timeout_and_keepalive(strict_server: BackgroundServer,
                                                      gateway_http: httpx.Client) -> None:
    agent = Agent(strict_server.ws_url)
    for cid in ("one", "two", "three"):
        agent.send(type="open", context_id=cid, voice="joe")
    assert agent.until(is_("error"))["error"]["code"] == "TOO_MANY_CONTEXTS"
    job_id = next(m["job_id"] for m in agent.seen if m["type"] == "opened" and m["context_id"] == "one")
    started = time.monotonic()
    while time.monotonic() - started < 2.5:  # pings past the 1 s idle limit keep the socket open
        agent.send(type="ping")
        assert agent.until(is_("pong"), timeout=5)
        time.sleep(0.4)
    error = agent.until(is_("error"), timeout=5)
    assert error["error"]["code"] == "IDLE_TIMEOUT" and time.monotonic() - started >= 2.9
    with pytest.raises(ConnectionClosed) as closed:
        agent.ws.recv(timeout=5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4408
    deadline = time.monotonic() + 10  # the contexts it left open were cancelled with it
    while gateway_http.get(f"/v1/jobs/{job_id}").json()["state"] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_socket_without_the_key_is_refused(farm: Farm) -> None:
    gw = dataclasses.replace(farm.settings.gateway, api_keys=("k-one",))
    with BackgroundServer(create_app(farm.settings, gw)) as server:
        refused = Agent(server.ws_url)
        assert refused.recv()["error"]["code"] == "UNAUTHORIZED"
        with pytest.raises(ConnectionClosed):
            refused.recv()
        with connect(f"{server.ws_url}/v1/agents?api_key=k-one", open_timeout=10) as ws:
            ws.send(json.dumps({"type": "ping"}))
            assert json.loads(ws.recv(timeout=10)) == {"type": "pong"}
