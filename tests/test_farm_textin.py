"""Text-in streaming end to end: a job whose text is appended while it plays (``producer.appending``), on a real
redis-server and a real worker, through both SDK faces."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from pipeline.errors import BAD_OPTION, EMPTY_TEXT, MALFORMED_JOB, InputError
from producer.aio import AsyncClient
from wire.errors import JobError
from wire.records import Chunk
from tests.conftest import Farm

pytestmark = pytest.mark.slow

SENTENCES = ["The first sentence arrives on its own. ", "Then the model writes a second one, ",
             "word by word, while the first is already playing. ", "And a short last one."]


def _words(text: str) -> list[str]:
    return [w + " " for w in text.split(" ") if w]


class Listener:
    """A job's stream read on a thread, each chunk stamped with when it came."""

    def __init__(self, job) -> None:  # type: ignore[no-untyped-def]
        self.chunks: list[tuple[float, Chunk]] = []
        self.error: Exception | None = None
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(job,), daemon=True)
        self.thread.start()

    def _read(self, job) -> None:  # type: ignore[no-untyped-def]
        try:
            for chunk in job.stream(timeout=120):
                self.chunks.append((time.monotonic(), chunk))
                self.first.set()
        except Exception as exc:
            self.error = exc
            self.first.set()

    def join(self) -> list[Chunk]:
        self.thread.join(120)
        if self.error:
            raise self.error
        return [c for _, c in self.chunks]


def test_the_first_sentence_plays_before_the_last_piece_is_written(farm: Farm) -> None:
    client = farm.client()
    job = client.open(voice="joe", format="pcm")
    listener = Listener(client.job(job.id))  # another handle, as another process would follow it
    appended = [job.append(piece) for piece in _words(SENTENCES[0])]
    assert sum(appended) == 1 and appended[-1] == 1  # queued by the piece that finished the sentence
    assert listener.first.wait(60) and listener.error is None  # audio while the job is open
    assert client.job(job.id).status().open
    for piece in _words("".join(SENTENCES[1:])):
        job.append(piece)
    last_piece_at = time.monotonic()
    job.close()
    chunks = listener.join()
    assert listener.chunks[0][0] < last_piece_at
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert [c.seg for c in chunks] == sorted(c.seg for c in chunks) and chunks[-1].seg == job.total - 1 >= 2
    result = job.wait(timeout=60)
    assert Path(result.url[len("file://"):]).read_bytes() == b"".join(c.pcm for c in chunks)
    text = "".join(SENTENCES)
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words] == [text[w.char_start:w.char_end] for w in words]
    assert [w.text for w in words][-4:] == ["And", "a", "short", "last"] or "one" in words[-1].text
    assert job.status().state == "done" and job.status().total == job.total and not job.status().open


def test_a_close_after_every_segment_is_done_still_finishes_the_job(farm: Farm) -> None:
    client = farm.client()
    job = client.open(voice="joe", format="wav")
    queued = job.append("Only this sentence, spoken before the close. ")
    deadline = time.monotonic() + 60
    while job.status().done < queued and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queued >= 1 and job.status().done == queued and job.status().state != "done"  # spoken; the close is awaited
    assert job.close() == 0
    result = job.wait(timeout=60)
    assert result.state == "done" and result.duration_s > 1.0 and result.url.endswith(".wav")
    assert job.status().total == queued


def test_flush_queues_a_sentence_not_finished_on_both_faces(farm: Farm) -> None:
    client = farm.client()
    job = client.open(voice="joe", format="pcm")
    assert job.append("A turn that ends with no punctuation") == 0  # buffered: the sentence is not finished
    assert job.flush() >= 1 and job.flush() == 0  # queued now; nothing is left to flush
    first = next(iter(client.job(job.id).stream(timeout=60)))  # audio while the job is open
    assert first.seg == 0 and len(first.pcm) > 0 and job.status().open
    assert job.append(" and the next words. ") >= 1
    job.close()
    words = [w.text for c in job.stream(timeout=60) for w in c.words]
    assert words[:3] == ["A", "turn", "that"] and "punctuation" in words and "next" in words

    async def scenario() -> tuple[int, int, str]:
        async with AsyncClient.from_url(settings=farm.settings) as aclient:
            async with await aclient.open(voice="joe", format="pcm") as ajob:
                buffered = await ajob.append("Hello from the async")
                flushed = await ajob.flush(" face")
            return buffered, flushed, (await ajob.wait(timeout=60)).state

    assert asyncio.run(scenario()) == (0, 1, "done")


def test_resume_and_the_async_face(farm: Farm) -> None:
    async def scenario() -> tuple[list[Chunk], list[Chunk], str]:
        async with AsyncClient.from_url(settings=farm.settings) as client:
            async with await client.open(voice="joe", format="pcm") as job:
                for piece in _words("".join(SENTENCES[:2])):
                    await job.append(piece)
                first = await anext(aiter(job.stream(timeout=60)))
                await job.append(SENTENCES[2])
            whole = [c async for c in job.stream(timeout=60)]
            rest = [c async for c in job.stream(after_seq=first.seq, timeout=60)]
            return whole, rest, (await job.status()).state

    whole, rest, state = asyncio.run(scenario())
    assert state == "done" and rest == whole[1:] and len({c.seg for c in whole}) >= 2


def test_cancel_while_open_ends_the_stream_and_refuses_more_text(farm: Farm) -> None:
    client = farm.client()
    job = client.open(voice="joe")
    job.append(SENTENCES[0] + SENTENCES[0])
    assert job.cancel()
    with pytest.raises(JobError) as info:
        list(job.stream(timeout=30))
    assert info.value.code == "JOB_CANCELLED"
    with pytest.raises(JobError) as info:
        job.append("More text. ")
    assert info.value.code == "JOB_CANCELLED"


def test_bad_input_is_refused_with_its_code(farm: Farm) -> None:
    client = farm.client()
    with pytest.raises(InputError) as info:
        client.open(ssml=True)
    assert info.value.code == BAD_OPTION
    with pytest.raises(InputError) as info:
        client.open(voice=42)
    assert info.value.code == BAD_OPTION
    job = client.open(voice="joe")
    for bad in (b"bytes", 3, None, ["list"]):
        with pytest.raises(InputError) as info:
            job.append(bad)  # type: ignore[arg-type]
        assert info.value.code == MALFORMED_JOB
    with pytest.raises(InputError) as info:
        job.close("   ")
    assert info.value.code == EMPTY_TEXT and job.status().state == "cancelled"
    with client.open(voice="joe") as fine:  # the context closes it
        fine.append("Still served. ")
    assert fine.wait(timeout=60).state == "done"
    with pytest.raises(JobError) as closed:
        fine.append("Too late. ")
    assert closed.value.code == "JOB_CLOSED"


def test_the_gateway_websocket_takes_text_frames(farm: Farm) -> None:
    import json

    from websockets.sync.client import connect

    from gateway import create_app
    from tests.gateway_server import BackgroundServer

    with BackgroundServer(create_app(farm.settings)) as server, \
            connect(f"{server.ws_url}/v1/jobs/text?binary=1", max_size=None) as ws:
        ws.send(json.dumps({"type": "open", "voice": "joe", "format": "pcm"}))
        opened = json.loads(ws.recv(timeout=30))
        assert opened["type"] == "opened" and opened["links"]["audio"].endswith("/audio")
        for piece in _words(SENTENCES[0]):
            ws.send(json.dumps({"type": "text", "text": piece}))
        first = json.loads(ws.recv(timeout=60))  # the first sentence's audio, the text not yet ended
        assert first["type"] == "chunk" and first["seq"] == 0
        pcm = [ws.recv(timeout=30)]
        ws.send(json.dumps({"type": "close", "text": SENTENCES[3]}))
        while (message := json.loads(ws.recv(timeout=60)))["type"] == "chunk":
            pcm.append(ws.recv(timeout=30))
        assert message["type"] == "done" and message["id"] == opened["id"]
        stored = Path(farm.client().job(opened["id"]).wait(timeout=30).url[len("file://"):]).read_bytes()
        assert b"".join(pcm) == stored

    with BackgroundServer(create_app(farm.settings)) as server:
        for bad in ("not json", json.dumps({"type": "open", "text": "no"}), json.dumps({"type": "open", "voice": 3})):
            with connect(f"{server.ws_url}/v1/jobs/text") as ws:
                ws.send(bad)
                assert json.loads(ws.recv(timeout=30))["error"]["code"] in ("BAD_INPUT", "BAD_OPTION")
        with connect(f"{server.ws_url}/v1/jobs/text") as ws:
            ws.send(json.dumps({"type": "open", "voice": "joe"}))
            job_id = json.loads(ws.recv(timeout=30))["id"]
            ws.send(json.dumps({"type": "text", "text": 42}))
            assert json.loads(ws.recv(timeout=30))["error"]["code"] == "BAD_INPUT"
        assert farm.client().job(job_id).status().state == "cancelled"
