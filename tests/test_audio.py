"""Tests for pipeline.audio: formats round-trip, resampling keeps time and pitch, bad input is refused."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline import audio
from tests.decode import decode_av
from pipeline.errors import NOTHING_TO_SPEAK, UNSUPPORTED_FORMAT, UNSUPPORTED_SAMPLE_RATE, InputError


def sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[np.argmax(spectrum)])


def decode(data: bytes, dtype: str = "float32") -> tuple[np.ndarray, int]:
    if data[:2] == b"\xff\xf1" or data[:2] == b"\xff\xf9":  # AAC in ADTS: libsndfile has no AAC decoder
        return decode_av(data)
    samples, rate = sf.read(io.BytesIO(data), dtype=dtype)
    return np.asarray(samples), int(rate)


def slack(fmt: str) -> int:
    """Samples a decoded file may differ by: Opus ends on a 20 ms boundary before its granule trims it;
    MP3 (LAME tag) within one frame; AAC in ADTS carries no gapless data (1,024 priming samples + padding)."""
    return {"ogg": 320, "mp3": 576, "aac": 2048}.get(fmt, 1)


# -- PCM16 conversion ------------------------------------------------------------------------------


def test_to_pcm16_scales_rounds_and_clips() -> None:
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, np.nan, np.inf, -np.inf, 1 / 32768], dtype=np.float32)
    got = np.frombuffer(audio.to_pcm16(x), dtype="<i2")
    assert got.tolist() == [0, 16384, -16384, 32767, -32768, 32767, -32768, 0, 32767, -32768, 1]


def test_to_pcm16_is_little_endian_and_two_bytes_per_sample() -> None:
    data = audio.to_pcm16(np.array([1 / 32768, -1 / 32768], dtype=np.float32))
    assert data == b"\x01\x00\xff\xff"


def test_pcm16_round_trip_is_exact() -> None:
    every = np.arange(-32768, 32768, dtype="<i2").tobytes()
    assert audio.to_pcm16(audio.from_pcm16(every)) == every
    assert audio.from_pcm16(every).dtype == np.float32


def test_from_pcm16_rejects_odd_length() -> None:
    with pytest.raises(InputError):
        audio.from_pcm16(b"\x00\x01\x02")


# -- formats ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_formats_decode_to_exact_pcm16(fmt: str) -> None:
    x = sine(440, 22050, 1.3) + np.float32(0.001) * np.random.default_rng(0).standard_normal(28665).astype(np.float32)
    data = audio.encode(x, 22050, fmt)
    decoded, rate = decode(data, dtype="int16")
    assert rate == 22050
    assert sf.info(io.BytesIO(data)).subtype == "PCM_16"
    assert decoded.astype("<i2").tobytes() == audio.to_pcm16(x)


def test_pcm_format_is_raw_pcm16() -> None:
    x = sine(300, 16000, 0.5)
    data = audio.encode(x, 16000, "pcm")
    assert data == audio.to_pcm16(x)
    assert len(data) == 2 * len(x)


@pytest.mark.parametrize("rate", [8000, 16000, 24000, 48000])
def test_ogg_is_opus_and_keeps_length_and_pitch(rate: int) -> None:
    x = sine(440, rate, 2.0)
    data = audio.encode(x, rate, "ogg")
    info = sf.info(io.BytesIO(data))
    assert (info.format, info.subtype) == ("OGG", "OPUS")
    decoded, out_rate = decode(data)
    assert out_rate == rate
    # Opus pre-skip and end trimming are honoured by libsndfile; allow one 20 ms frame either way.
    assert abs(len(decoded) - len(x)) <= rate // 50
    assert abs(peak_hz(decoded, rate) - 440) < 5
    # lossy, but close: the tone survives with most of its energy
    n = min(len(x), len(decoded))
    assert np.corrcoef(x[rate // 10 : n], decoded[rate // 10 : n])[0, 1] > 0.9


@pytest.mark.parametrize(("asked", "opus"), [(22050, 24000), (44100, 48000), (11025, 12000), (32000, 48000)])
def test_ogg_at_a_non_opus_rate_goes_up_to_the_next_opus_rate(asked: int, opus: int) -> None:
    x = sine(440, asked, 1.0)
    assert audio.output_rate("ogg", asked) == opus
    decoded, out_rate = decode(audio.encode(x, asked, "ogg"))
    assert out_rate == opus
    assert abs(len(decoded) - opus) <= opus // 50  # still one second
    assert abs(peak_hz(decoded, opus) - 440) < 5


def test_ogg_from_native_rate_with_out_rate() -> None:
    x = sine(1000, 22050, 1.0)
    decoded, rate = decode(audio.encode(x, 22050, "ogg", out_rate=48000))
    assert rate == 48000
    assert abs(len(decoded) - 48000) <= 960


@pytest.mark.parametrize("fmt", audio.FORMATS)
def test_out_rate_resamples_every_format(fmt: str) -> None:
    x = sine(500, 22050, 1.0)
    data = audio.encode(x, 22050, fmt, out_rate=16000)
    if fmt == "pcm":
        decoded, rate = audio.from_pcm16(data), 16000
    else:
        decoded, rate = decode(data)
    assert rate == 16000
    assert abs(len(decoded) - 16000) <= slack(fmt)
    assert abs(peak_hz(decoded, rate) - 500) < 5


@pytest.mark.parametrize("fmt", audio.FORMATS)
def test_empty_audio_is_refused(fmt: str) -> None:
    with pytest.raises(InputError) as err:
        audio.encode(np.zeros(0, dtype=np.float32), 24000, fmt)
    assert err.value.code == NOTHING_TO_SPEAK


@pytest.mark.parametrize("fmt", audio.FORMATS)
def test_a_single_sample_encodes(fmt: str) -> None:
    data = audio.encode(np.array([0.25], dtype=np.float32), 24000, fmt)
    decoded = audio.from_pcm16(data) if fmt == "pcm" else decode(data)[0]
    assert 1 <= len(decoded) <= 1 + (slack(fmt) if fmt in ("mp3", "aac") else 0)


def test_stereo_wav_keeps_channels() -> None:
    x = np.stack([sine(300, 16000, 0.5), sine(600, 16000, 0.5)], axis=1)
    decoded, _ = decode(audio.encode(x, 16000, "wav"), dtype="int16")
    assert decoded.shape == x.shape
    assert decoded.astype("<i2").tobytes() == audio.to_pcm16(x)


def test_content_types() -> None:
    assert set(audio.CONTENT_TYPES) == set(audio.FORMATS)
    assert audio.content_type("wav", 22050) == "audio/wav"
    assert audio.content_type("FLAC", 22050) == "audio/flac"
    assert audio.content_type("ogg", 48000).startswith("audio/ogg")
    assert audio.content_type("pcm", 22050) == "audio/L16;rate=22050;channels=1"


# -- write -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("suffix", "expect"), [(".wav", "WAV"), (".flac", "FLAC"), (".ogg", "OGG"), (".opus", "OGG")])
def test_write_picks_format_from_suffix(tmp_path: Path, suffix: str, expect: str) -> None:
    path = audio.write(tmp_path / f"out{suffix}", sine(440, 24000, 0.5), 24000)
    assert sf.info(str(path)).format == expect


def test_write_pcm_and_explicit_format(tmp_path: Path) -> None:
    x = sine(440, 16000, 0.25)
    assert audio.write(tmp_path / "a.raw", x, 16000).read_bytes() == audio.to_pcm16(x)
    path = audio.write(tmp_path / "a.bin", x, 16000, fmt="flac")
    assert sf.info(str(path)).format == "FLAC"


def test_write_unknown_suffix_raises(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        audio.write(tmp_path / "a.wma", sine(440, 16000, 0.1), 16000)
    assert err.value.code == UNSUPPORTED_FORMAT
    assert not (tmp_path / "a.wma").exists()


# -- resampling ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("src", "dst"), [(22050, 48000), (48000, 16000), (24000, 44100), (16000, 8000)])
def test_resample_keeps_duration_and_frequency(src: int, dst: int) -> None:
    x = sine(440, src, 2.0)
    y = audio.resample(x, src, dst)
    assert y.dtype == np.float32
    assert abs(len(y) - round(len(x) * dst / src)) <= 1
    assert abs(peak_hz(y, dst) - 440) < 2
    # amplitude kept away from the edges (HQ filter, tone far below Nyquist)
    assert abs(np.max(np.abs(y[dst // 10 : -dst // 10])) - 0.5) < 0.01


def test_resample_identity_returns_same_samples() -> None:
    x = sine(440, 22050, 0.1)
    assert audio.resample(x, 22050, 22050) is x


def test_resample_empty() -> None:
    assert audio.resample(np.zeros(0, np.float32), 22050, 48000).shape == (0,)


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wma", "", "wav ", "WAV"])
def test_check_format(fmt: str) -> None:
    if fmt.strip().lower() == "wav":
        assert audio.check_format(fmt) == "wav"
        return
    with pytest.raises(InputError) as err:
        audio.check_format(fmt)
    assert err.value.code == UNSUPPORTED_FORMAT
    assert "wav" in err.value.message  # the message lists what is supported


@pytest.mark.parametrize("rate", [0, -16000, 12000, 96000, 22050.0, "16000", True])
def test_check_sample_rate_refuses(rate: object) -> None:
    with pytest.raises(InputError) as err:
        audio.check_sample_rate(rate)  # type: ignore[arg-type]
    assert err.value.code == UNSUPPORTED_SAMPLE_RATE


@pytest.mark.parametrize("rate", audio.SAMPLE_RATES)
def test_check_sample_rate_accepts(rate: int) -> None:
    assert audio.check_sample_rate(rate) == rate


def test_encode_refuses_bad_format_and_rate() -> None:
    x = sine(440, 16000, 0.1)
    with pytest.raises(InputError) as err:
        audio.encode(x, 16000, "wma")
    assert err.value.code == UNSUPPORTED_FORMAT
    with pytest.raises(InputError) as err:
        audio.encode(x, 16000, "wav", out_rate=12345)
    assert err.value.code == UNSUPPORTED_SAMPLE_RATE
    with pytest.raises(InputError) as err:
        audio.encode(x, 0, "wav")
    assert err.value.code == UNSUPPORTED_SAMPLE_RATE


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "ogg", "mp3"])
@pytest.mark.parametrize("rate", [16000, 22050, 24000])
def test_encoding_pcm16_as_is_matches_the_float_path(fmt: str, rate: int) -> None:
    """A finished job's PCM16 is encoded without the trip through float where the format keeps it: the same bytes
    as encoding the float audio (the lossy formats and a rate the format changes go through float still)."""
    from pipeline.audio import encode, encode_pcm16, from_pcm16

    rng = np.random.default_rng(rate)
    pcm = (rng.standard_normal(rate // 3) * 6000).clip(-32768, 32767).astype("<i2").tobytes()
    expected = pcm if fmt == "pcm" else encode(from_pcm16(pcm), rate, fmt)
    if fmt in ("ogg", "mp3"):  # the float path itself (an Ogg stream's serial number differs run to run)
        assert len(encode_pcm16(pcm, rate, fmt)) > 0
    else:
        assert encode_pcm16(pcm, rate, fmt) == expected
    with pytest.raises(InputError) as err:
        encode_pcm16(b"", rate, fmt)
    assert err.value.code == "NOTHING_TO_SPEAK"


@pytest.mark.parametrize("rate", [8000, 22050, 48000])
@pytest.mark.parametrize("samples", [1, 3, 22050])
def test_the_wav_header_is_the_one_libsndfile_writes(rate: int, samples: int) -> None:
    """A finished job's WAV is its PCM behind ``wav_header``: the bytes soundfile (libsndfile) makes of it."""
    import io

    import soundfile as sf

    from pipeline.audio import encode_pcm16, wav_header

    pcm = (np.arange(samples, dtype=np.int64) * 977 % 65536 - 32768).astype("<i2").tobytes()
    buf = io.BytesIO()
    sf.write(buf, np.frombuffer(pcm, dtype="<i2"), rate, format="WAV", subtype="PCM_16")
    assert wav_header(len(pcm), rate) + pcm == buf.getvalue() == encode_pcm16(pcm, rate, "wav")


def test_pcm16_of_non_finite_samples() -> None:
    """NaN is silence and +-inf full scale, wherever they fall."""
    samples = np.array([np.nan, np.inf, -np.inf, 0.5, -1.5, 2.0, np.nan], dtype=np.float32)
    assert np.frombuffer(audio.to_pcm16(samples), "<i2").tolist() == [0, 32767, -32768, 16384, -32768, 32767, 0]
