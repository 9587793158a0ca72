"""``gateway.streams.ClosingStreamingResponse``: a streamed body's generator is closed however its response ended, so
its ``finally`` (which cancels a job whose client went away, or stops a follower's reader) runs then, not whenever
the generator is collected. The test keeps a reference to the generator, as a reference cycle would: a plain
``StreamingResponse`` leaves it suspended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi.responses import StreamingResponse

from gateway.streams import ClosingStreamingResponse


def _run(response_class: type[StreamingResponse], fail_on: str) -> list[str]:
    seen: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            for i in range(5):
                yield f"chunk {i}".encode()
                await asyncio.sleep(0)
        finally:
            seen.append("closed")

    async def main() -> None:
        gen = body()  # held here until the end: only an explicit close runs its finally in time
        response = response_class(gen, media_type="audio/pcm")
        sent = 0

        async def send(message: dict[str, Any]) -> None:
            nonlocal sent
            if message["type"] == "http.response.body":
                sent += 1
                if sent == 2:
                    if fail_on == "oserror":
                        raise OSError("the client went away")  # ASGI 2.4 servers: a send after a disconnect raises
                    raise asyncio.CancelledError()  # older servers: the disconnect cancels the send

        async def receive() -> dict[str, Any]:
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
        with pytest.raises(BaseException):
            await response(scope, receive, send)
        seen.append("returned")
        assert gen is not None

    asyncio.run(main())
    return seen


@pytest.mark.parametrize("fail_on", ["oserror", "cancelled"])
def test_a_streamed_body_is_closed_when_its_client_goes_away_mid_send(fail_on: str) -> None:
    assert _run(ClosingStreamingResponse, fail_on) == ["closed", "returned"]


def test_starlettes_own_response_leaves_the_body_suspended() -> None:
    """Why the class exists: if Starlette closes its body iterators one day, this fails and the class can go."""
    assert _run(StreamingResponse, "oserror") == ["returned", "closed"]  # closed by asyncio.run's own shutdown, after
