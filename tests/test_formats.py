"""MP3, Ogg Opus and AAC through pipeline.encoders: stored files and streams decode (with FFmpeg) to the
right duration, bitrates are honoured, and bad formats or bitrates get stable codes."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from pipeline import audio
from pipeline.encoders import MP3_PRIMING, AudioEncoder, check_bitrate, encode_lossy, mp3_frame_samples
from pipeline.errors import BAD_OPTION, UNSUPPORTED_FORMAT, InputError
from producer.submit import prepare_submission
from wire.settings import Settings
from tests.decode import decode_av

OPUS_DECODE_RATE = 48000  # FFmpeg decodes Opus at 48 kHz whatever it was made at


def voice_like(rate: int, seconds: float) -> np.ndarray:
    """A tone with a syllable-like envelope, so an encoder has something to do."""
    t = np.arange(int(rate * seconds)) / rate
    return (0.4 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def in_blocks(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


@pytest.mark.parametrize("rate", [22050, 24000, 44100])
def test_stored_mp3_decodes_to_its_length_within_one_frame(rate: int) -> None:
    x = voice_like(rate, 1.37)
    data = encode_lossy(x, rate, "mp3")
    decoded, out_rate = decode_av(data)
    assert out_rate == rate and abs(len(decoded) - len(x)) <= mp3_frame_samples(rate)
    assert sf.info(io.BytesIO(data)).frames == pytest.approx(len(x), abs=mp3_frame_samples(rate))  # libsndfile too


@pytest.mark.parametrize(("rate", "opus_rate"), [(22050, 24000), (24000, 24000), (16000, 16000)])
def test_stored_opus_decodes_to_exactly_its_length(rate: int, opus_rate: int) -> None:
    x = voice_like(rate, 1.37)
    data = encode_lossy(x, rate, "ogg")
    decoded, out_rate = decode_av(data)
    assert out_rate == OPUS_DECODE_RATE
    assert abs(len(decoded) / OPUS_DECODE_RATE - len(x) / rate) <= 1 / rate + 1 / opus_rate
    info = sf.info(io.BytesIO(data))
    assert info.samplerate == opus_rate and abs(info.frames - round(len(x) * opus_rate / rate)) <= 1


def _streamed(fmt: str, x: np.ndarray, rate: int, block: int, **kw: object) -> tuple[list[bytes], bytes]:
    enc = AudioEncoder(fmt, rate, **kw)  # type: ignore[arg-type]
    pieces = [enc.write(b) for b in in_blocks(x, block)]
    pieces.append(enc.close())
    return pieces, b"".join(pieces)


def test_streamed_opus_comes_out_as_it_is_made_and_ends_exactly() -> None:
    rate = 22050
    x = voice_like(rate, 3.0)
    pieces, data = _streamed("ogg", x, rate, rate // 10)  # 100 ms chunks, as a worker sends them
    assert sum(1 for p in pieces[:-1] if p) >= 20  # pages go out while it is made, not all at the end
    assert data[:4] == b"OggS" and data.count(b"OggS") >= 20
    decoded, _ = decode_av(data)
    assert abs(len(decoded) / OPUS_DECODE_RATE - len(x) / rate) <= 1 / rate + 1 / 24000  # the end granule trims it
    assert abs(sf.info(io.BytesIO(data)).frames - round(len(x) * 24000 / rate)) <= 1


@pytest.mark.parametrize("rate", [22050, 24000])
def test_streamed_mp3_is_playable_at_once_and_has_only_the_codec_priming(rate: int) -> None:
    x = voice_like(rate, 2.0)
    pieces, data = _streamed("mp3", x, rate, rate // 10)
    assert sum(1 for p in pieces[:-1] if p) >= 15 and pieces[0][:3] == b"ID3"  # an ID3v2 header, then frames
    decoded, out_rate = decode_av(data)
    frame = mp3_frame_samples(rate)
    # A stream cannot carry the LAME tag (it needs the total length, known only at the end): it decodes
    # with LAME's priming in front, and padding to a whole frame at the end.
    assert out_rate == rate and abs(len(decoded) - MP3_PRIMING - len(x)) <= frame
    burst = np.zeros(rate // 2, np.float32)
    burst[rate // 10 : rate // 5] = 0.3 * np.random.default_rng(1).standard_normal(rate // 10)
    _, data = _streamed("mp3", burst, rate, rate // 10)
    heard, _ = decode_av(data)
    lag = int(np.argmax(np.correlate(heard[: rate // 2], burst[rate // 10 : rate // 5], "valid"))) - rate // 10
    assert abs(lag - MP3_PRIMING) <= 8  # the audio starts where the priming ends


def test_streamed_aac_decodes() -> None:
    rate = 24000
    x = voice_like(rate, 1.0)
    pieces, data = _streamed("aac", x, rate, 2400)
    assert sum(1 for p in pieces[:-1] if p) >= 5 and data[:2] in (b"\xff\xf1", b"\xff\xf9")
    decoded, out_rate = decode_av(data)
    assert out_rate == rate and 0 <= len(decoded) - len(x) <= 2 * 1024 + 1024


def test_bitrate_is_honoured() -> None:
    rate = 24000
    x = voice_like(rate, 4.0) + 0.1 * np.random.default_rng(0).standard_normal(4 * rate).astype(np.float32)
    for fmt, low, high in (("mp3", 32_000, 128_000), ("ogg", 16_000, 96_000), ("aac", 32_000, 128_000)):
        small, big = encode_lossy(x, rate, fmt, bitrate=low), encode_lossy(x, rate, fmt, bitrate=high)
        assert len(small) * 8 / 4.0 == pytest.approx(low, rel=0.35), fmt
        assert len(big) > 2 * len(small), fmt


def test_mp3_tags_and_the_rate_asked_for() -> None:
    x = voice_like(24000, 1.0)
    data = audio.encode(x, 24000, "mp3", out_rate=16000)
    f = sf.SoundFile(io.BytesIO(data))
    assert f.samplerate == 16000 and abs(f.frames - 16000) <= mp3_frame_samples(16000)
    enc = AudioEncoder("mp3", 24000, seekable=True, tags={"title": "第一章", "artist": "ttsfarm", "tracknumber": "2"})
    enc.write(x)
    tagged = sf.SoundFile(io.BytesIO(enc.close()))
    assert (tagged.title, tagged.artist, tagged.tracknumber) == ("第一章", "ttsfarm", "2")


@pytest.mark.parametrize(("fmt", "bitrate", "rate"), [
    ("mp3", 4_000, None), ("mp3", 320_000, 24000), ("mp3", 192_000, 22050), ("ogg", 1_000_000, None),
    ("aac", 8_000, None), ("mp3", "128k", None), ("mp3", 64_000.5, None), ("mp3", True, None), ("wav", 64_000, None),
    ("flac", 128_000, None),
])
def test_bad_bitrates_are_bad_options(fmt: str, bitrate: object, rate: int | None) -> None:
    with pytest.raises(InputError) as err:
        check_bitrate(fmt, bitrate, rate)
    assert err.value.code == BAD_OPTION


def test_job_requests_check_format_and_bitrate(base_settings: Settings) -> None:
    sub = prepare_submission(base_settings, "Hello there.", voice="joe", format="mp3", bitrate=48_000)
    assert sub.segments[0].format == "mp3" and sub.segments[0].bitrate == 48_000 and sub.status["bitrate"] == 48_000
    assert prepare_submission(base_settings, "Hello there.", format="ogg").segments[0].bitrate == 0  # the default
    for request, code in (({"format": "wma"}, UNSUPPORTED_FORMAT), ({"format": "mp3", "bitrate": 999}, BAD_OPTION),
                          ({"format": "wav", "bitrate": 64_000}, BAD_OPTION),
                          ({"format": "mp3", "bitrate": 320_000}, BAD_OPTION)):  # joe is 22.05 kHz: MPEG-2, 160k at most
        with pytest.raises(InputError) as err:
            prepare_submission(base_settings, "Hello there.", voice="joe", **request)
        assert err.value.code == code, request


def test_encoder_refuses_what_it_cannot_make() -> None:
    with pytest.raises(InputError) as err:
        audio.encode(np.zeros((100, 2), np.float32), 24000, "mp3")
    assert err.value.code == UNSUPPORTED_FORMAT  # the lossy formats are mono
    with pytest.raises(InputError) as err:
        AudioEncoder("flac", 24000)
    assert err.value.code == UNSUPPORTED_FORMAT
    enc = AudioEncoder("mp3", 24000)
    with pytest.raises(InputError) as err:
        enc.close()
    assert err.value.code == "NOTHING_TO_SPEAK"


def test_chunks_encode_as_they_come_and_bad_requests_fail_before_any() -> None:
    from producer.encoded import encode_chunks
    from wire.records import Chunk

    rate = 24000
    x = voice_like(rate, 2.0)
    chunks = [Chunk(i, 0, audio.to_pcm16(b), rate, False) for i, b in enumerate(in_blocks(x, 2400))]
    pieces = list(encode_chunks(iter(chunks), "ogg"))
    assert len(pieces) > 10
    decoded, _ = decode_av(b"".join(pieces))
    assert abs(len(decoded) / OPUS_DECODE_RATE - len(x) / rate) <= 2 / rate
    assert list(encode_chunks(iter([]), "mp3")) == []
    for fmt, bitrate, code in (("wav", None, UNSUPPORTED_FORMAT), ("mp3", 5, BAD_OPTION)):
        with pytest.raises(InputError) as err:
            next(encode_chunks(iter(chunks), fmt, bitrate=bitrate))
        assert err.value.code == code
