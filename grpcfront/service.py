"""``nvidia.riva.tts.RivaSpeechSynthesis`` over the farm: each call is one farm job, made through the asyncio SDK.

- ``Synthesize``: the job's whole audio in one response (PCM16, Ogg Opus or FLAC at the asked rate), with every
  word's time when asked.
- ``SynthesizeOnline``: one response per farm chunk as it is published (PCM16 as it is; Ogg Opus through one
  streaming encoder, a response per encoded page batch), each with the words that end inside it. A stream of one
  message (the Riva client's ``synthesize_online(text)``) is one whole text; a stream of several (text in pieces, an
  LLM's output as it is generated) is a job whose text is appended (``producer.appending``): each finished sentence is
  queued while the rest is still being written, and the job is closed when the client half-closes.
- ``GetRivaSynthesisConfig``: ``grpcfront.voices``.

A call whose client goes away (cancelled, or past its deadline) cancels its job: the call's done callback does it,
whatever the call was doing then. Errors end the call with the status of ``grpcfront.errors``; the server keeps
serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import grpc
from riva.client.proto import riva_tts_pb2, riva_tts_pb2_grpc

from pipeline.errors import INTERNAL_ERROR, TEXT_TOO_LONG, InputError, TTSFarmError
from producer.aio import AsyncJob, AsyncOpenJob
from producer.encoded import aencode_chunks
from wire.errors import BACKEND_UNAVAILABLE, BrokerError, JobTimeoutError, TransientError
from wire.records import Chunk, Word
from grpcfront.asks import Asked, lenient, parsed, read_request, same_config, submit_error
from grpcfront.errors import CODE_KEY, FrontError, details, status_for, unauthenticated
from grpcfront.state import FrontState
from grpcfront.voices import model_configs

log = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 64 * 1024  # room for a response's metadata beside its audio
WHOLE_TEXT_GRACE_S = 0.05  # a stream that ends this soon after its first message is one whole text
JOB_KEY = "ttsfarm-job-id"  # metadata naming the call's job (initial on SynthesizeOnline, trailing on Synthesize)


def word_timings(words: Iterable[Word]) -> list[Any]:
    """Riva's ``WordTiming``s (milliseconds in the call's audio) of the farm's words."""
    return [riva_tts_pb2.WordTiming(word=w.text, start_time=round(w.start_s * 1000), end_time=round(w.end_s * 1000))
            for w in words]


class SpeechSynthesis(riva_tts_pb2_grpc.RivaSpeechSynthesisServicer):
    def __init__(self, farm: FrontState) -> None:
        self.farm = farm
        self._cleanups: set[asyncio.Task[None]] = set()  # jobs being cancelled after their call ended

    @asynccontextmanager
    async def call(self, method: str, context: Any) -> AsyncIterator[None]:
        """One call's frame: the key check, metrics, and every error answered with its status and code."""
        metrics = self.farm.metrics
        metrics.in_flight.labels(method).inc()
        status, code = grpc.StatusCode.OK, ""
        try:
            if not self.farm.key_ok(context.invocation_metadata()):
                raise unauthenticated()
            yield
        except TTSFarmError as exc:
            status, code = status_for(exc), exc.code
            if status in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE):
                log.warning("%s -> %s %s", method, status.name, exc)
            await self._abort(context, status, exc)
        except BrokerError as exc:
            status, code = grpc.StatusCode.UNAVAILABLE, BACKEND_UNAVAILABLE
            await self._abort(context, status, TransientError(f"lost Redis: {exc}"))
        except asyncio.CancelledError:
            status = grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            log.exception("%s failed unexpectedly", method)
            status, code = grpc.StatusCode.INTERNAL, INTERNAL_ERROR
            await self._abort(context, status, TTSFarmError("the front end failed unexpectedly; see its log",
                                                            code=INTERNAL_ERROR))
        finally:
            metrics.in_flight.labels(method).dec()
            metrics.calls.labels(method, status.name, code).inc()

    @staticmethod
    async def _abort(context: Any, status: grpc.StatusCode, exc: TTSFarmError) -> None:
        await context.abort(status, details(exc),
                            trailing_metadata=(*(context.trailing_metadata() or ()), (CODE_KEY, exc.code)))

    async def _submit(self, text: str, asked: Asked) -> AsyncJob:
        await self.farm.require_workers()
        try:
            return await self.farm.client.submit(text, **asked.submit_kwargs())
        except InputError as exc:
            raise submit_error(exc) from None

    async def _chunks(self, job: AsyncJob, *, first_timeout: bool = True) -> AsyncIterator[Chunk]:
        """The job's chunks; none within ``first_chunk_timeout_s`` ends the call (DEADLINE_EXCEEDED), unless the
        text comes in pieces (``first_timeout`` False: its first sentence may be written later)."""
        front = self.farm.front
        chunks = job.stream(timeout=front.job_timeout_s)
        try:
            first = await asyncio.wait_for(anext(chunks), front.first_chunk_timeout_s if first_timeout else None)
        except TimeoutError:
            raise JobTimeoutError(f"no audio within {front.first_chunk_timeout_s:g} s; the job was cancelled") from None
        except StopAsyncIteration:
            return
        yield first
        async for chunk in chunks:
            yield chunk

    def _cancel_when_over(self, context: Any, job: AsyncJob, feeder: asyncio.Task[None] | None = None) -> None:
        """When the call is over, however it ended, stop the job's text feeder and cancel the job unless it ended.

        A ``finally`` in the handler is not enough: a deadline or a client's cancel lands wherever the call's task
        waits, and a streaming call's task waits in gRPC's own write of a response as often as in the handler. The
        handler's generator is then left suspended, and its ``finally`` runs only when the generator is collected
        (seen: a reader that stopped reading past its deadline had its job cancelled from the generator's finalizer;
        in CI a job was still running 10 s after its deadline). gRPC runs done callbacks when the call's task ends,
        on its event loop."""
        def over(_: Any) -> None:
            if feeder is not None:
                feeder.cancel()
            task = asyncio.get_running_loop().create_task(self._cancel_unfinished(job), name=f"cancel-{job.id}")
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)

        context.add_done_callback(over)

    async def settle(self) -> None:
        """Wait for the cancels that calls which ended have started (the server's stop, before Redis closes)."""
        await asyncio.gather(*self._cleanups, return_exceptions=True)

    async def _cancel_unfinished(self, job: AsyncJob) -> None:
        """Cancel the job unless it ended (its client went away, or the call failed); shielded, since a feeder runs
        this while the call may be cancelling it."""
        async def cancel() -> None:
            try:
                if not (await job.status()).ended and await job.cancel():
                    log.info("job %s cancelled: its call ended first", job.id)
            except (TTSFarmError, BrokerError) as exc:
                log.debug("could not cancel job %s: %s", job.id, exc)

        await asyncio.shield(cancel())

    # -- the protocol's calls ------------------------------------------------------------------------------------
    async def Synthesize(self, request: Any, context: Any) -> Any:
        async with self.call("Synthesize", context):
            asked = read_request(request, self.farm.settings, self.farm.front, streaming=False)
            started = time.monotonic()
            job = await self._submit(request.text, asked)
            self._cancel_when_over(context, job)
            context.set_trailing_metadata(((JOB_KEY, job.id),))
            pcm, words, rate = bytearray(), [], asked.sample_rate or 0
            async for chunk in self._chunks(job):
                pcm += chunk.pcm
                words.extend(chunk.words)
                rate = chunk.sample_rate
            audio = bytes(pcm) if asked.fmt == "pcm" else await asyncio.to_thread(_encode, bytes(pcm), rate, asked.fmt)
            if len(audio) > self.farm.front.max_message_bytes - MESSAGE_OVERHEAD:
                raise FrontError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"the audio is {len(audio)} bytes, over grpc.max_message_bytes "
                                 f"({self.farm.front.max_message_bytes}); use SynthesizeOnline for long texts",
                                 code=TEXT_TOO_LONG)
            self.farm.metrics.first_audio.labels("Synthesize").observe(time.monotonic() - started)
            self.farm.metrics.audio.labels("Synthesize").inc(len(pcm) / 2 / rate if rate else 0.0)
            meta = riva_tts_pb2.SynthesizeSpeechResponseMetadata(text=request.text)
            if asked.word_offsets:
                meta.words.extend(word_timings(words))
            return riva_tts_pb2.SynthesizeSpeechResponse(audio=audio, meta=meta, id=request.id)
        raise AssertionError("unreachable")  # the frame aborts or returns

    async def SynthesizeOnline(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        async with self.call("SynthesizeOnline", context):
            requests = aiter(request_iterator)
            first = await anext(requests, None)
            if first is None:
                return
            asked = read_request(first, self.farm.settings, self.farm.front, streaming=True)
            started = time.monotonic()
            following = asyncio.ensure_future(anext(requests, None))
            await asyncio.wait({following}, timeout=WHOLE_TEXT_GRACE_S)
            feeder: asyncio.Task[None] | None = None
            if following.done() and following.result() is None:  # one message: one whole text
                job: AsyncJob = await self._submit(first.text, asked)
            else:  # text in pieces: each finished sentence is queued while the rest is written
                try:
                    job = await self._open(asked)
                except BaseException:
                    following.cancel()
                    raise
                feeder = asyncio.create_task(self._feed(job, first, following, requests), name=f"feed-{job.id}")
            self._cancel_when_over(context, job, feeder)
            await context.send_initial_metadata(((JOB_KEY, job.id),))
            try:
                async for response in self._responses(job, asked, first, started, first_timeout=feeder is None):
                    yield response
                if feeder is not None:
                    await feeder
            except TTSFarmError:
                if feeder is not None and feeder.done() and not feeder.cancelled() and feeder.exception():
                    raise feeder.exception() from None  # what ended the job: the text's error, not its cancel
                raise

    async def _open(self, asked: Asked) -> AsyncOpenJob:
        await self.farm.require_workers()
        try:
            return await self.farm.client.open(**asked.submit_kwargs())
        except InputError as exc:
            raise submit_error(exc) from None

    async def _feed(self, job: AsyncOpenJob, first: Any, following: asyncio.Future[Any], requests: Any) -> None:
        """Append the stream's text as it comes, then close the job; an error cancels the job (the call then ends
        with the error)."""
        async def text(step: Awaitable[int]) -> None:
            try:
                await step
            except InputError as exc:
                raise submit_error(exc) from None

        try:
            await text(job.append(first.text))
            later = await following
            while later is not None:
                same_config(first, later)
                await text(job.append(later.text))
                later = await anext(requests, None)
            await text(job.close())
        except TTSFarmError:
            await self._cancel_unfinished(job)
            raise

    async def _responses(self, job: AsyncJob, asked: Asked, first: Any, started: float, *,
                         first_timeout: bool = True) -> AsyncIterator[Any]:
        """One response per chunk (PCM), or per encoded piece (Ogg Opus), with the words that ended so far."""
        metrics, words = self.farm.metrics, []
        sent_first = False

        async def chunks() -> AsyncIterator[Chunk]:
            async for chunk in self._chunks(job, first_timeout=first_timeout):
                words.extend(chunk.words)
                metrics.audio.labels("SynthesizeOnline").inc(len(chunk.pcm) / 2 / chunk.sample_rate)
                yield chunk

        pieces: AsyncIterator[bytes]
        if asked.fmt == "pcm":
            pieces = (chunk.pcm async for chunk in chunks())
        else:
            pieces = aencode_chunks(chunks(), asked.fmt)
        async for audio in pieces:
            if not audio:
                continue
            meta = riva_tts_pb2.SynthesizeSpeechResponseMetadata()
            if asked.word_offsets:
                meta.words.extend(word_timings(words))
            words.clear()
            if not sent_first:
                metrics.first_audio.labels("SynthesizeOnline").observe(time.monotonic() - started)
                sent_first = True
            yield riva_tts_pb2.SynthesizeSpeechResponse(audio=audio, meta=meta, id=first.id)

    async def GetRivaSynthesisConfig(self, request: Any, context: Any) -> Any:
        async with self.call("GetRivaSynthesisConfig", context):
            return model_configs(self.farm.settings, self.farm.front, parsed(request).model_name)
        raise AssertionError("unreachable")  # the frame aborts or returns


def add_to_server(servicer: SpeechSynthesis, server: Any) -> None:
    """Like the generated ``add_RivaSpeechSynthesisServicer_to_server`` (same service, methods and messages), with
    request bytes that do not parse handed to the call as ``Malformed`` (INVALID_ARGUMENT) rather than failing in
    gRPC's deserializer (UNKNOWN)."""
    tts = riva_tts_pb2
    handlers = {
        "Synthesize": grpc.unary_unary_rpc_method_handler(
            servicer.Synthesize, request_deserializer=lenient(tts.SynthesizeSpeechRequest),
            response_serializer=tts.SynthesizeSpeechResponse.SerializeToString),
        "SynthesizeOnline": grpc.stream_stream_rpc_method_handler(
            servicer.SynthesizeOnline, request_deserializer=lenient(tts.SynthesizeSpeechRequest),
            response_serializer=tts.SynthesizeSpeechResponse.SerializeToString),
        "GetRivaSynthesisConfig": grpc.unary_unary_rpc_method_handler(
            servicer.GetRivaSynthesisConfig, request_deserializer=lenient(tts.RivaSynthesisConfigRequest),
            response_serializer=tts.RivaSynthesisConfigResponse.SerializeToString),
    }
    service = tts.DESCRIPTOR.services_by_name["RivaSpeechSynthesis"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def _encode(pcm: bytes, rate: int, fmt: str) -> bytes:
    from pipeline.audio import encode, from_pcm16

    return encode(from_pcm16(pcm), rate, fmt)
