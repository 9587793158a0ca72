"""Audiobooks, the chapter join: exact length, no clicks, a peak limiter that holds its ceiling, one gated
loudness gain per book, streamed encoding, and workers that write only into marked folders."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline.errors import InputError
from books import BookOptions, book_gain, loudness_of
from tests.book_files import join_steps, layout, typical_step
from workers.assembly import LoudnessMeter, join_chapter, limit_peaks


def test_join_is_exact_and_click_free_where_a_plain_concatenation_clicks() -> None:
    rate = 24000
    t = np.arange(int(0.5 * rate)) / rate
    segs = [(0.5 * np.sin(2 * np.pi * 220 * t + phase)).astype(np.float32) for phase in (0.4, 1.1, 2.0)]  # cut mid-wave
    pauses = [0.3, 0.0, 0.0]
    y = np.concatenate(list(join_chapter(zip(segs, pauses), rate, head_s=0.5, tail_s=1.0)))
    length, joins = layout([len(s) for s in segs], pauses, rate, 0.5, 1.0)
    assert len(y) == length
    naive = np.concatenate([np.zeros(12000), segs[0], np.zeros(7200), segs[1], segs[2], np.zeros(24000)]).astype(np.float32)
    assert join_steps(naive, joins) > 3 * typical_step(naive)  # the measure does catch a click
    assert join_steps(y, joins) <= 0.1 * typical_step(y)
    mid = slice(joins[0] + 500, joins[1] - 500)
    np.testing.assert_array_equal(y[mid], segs[0][500:-500])  # between the fades the audio is untouched


def test_limiter_holds_the_ceiling_and_leaves_quiet_audio_alone() -> None:
    rate = 24000
    x = (0.3 * np.sin(2 * np.pi * 180 * np.arange(rate) / rate)).astype(np.float32)
    x[12000:12030] = np.linspace(0.9, -0.95, 30)  # a short burst over the ceiling
    y = limit_peaks(x.copy(), rate, ceiling=0.5)
    assert np.max(np.abs(y)) <= 0.5 + 1e-6
    np.testing.assert_array_equal(y[:11000], x[:11000])  # gain dips only around the burst (+-20 ms)
    np.testing.assert_array_equal(y[13100:], x[13100:])
    assert np.max(np.abs(np.diff(y))) <= np.max(np.abs(np.diff(x)))  # no new edge


def test_limiter_holds_the_ceiling_over_long_loud_segments() -> None:
    """Minutes of audio mostly over the ceiling: the gain's running sums must not drift above it."""
    rng = np.random.default_rng(7)
    for rate, seconds in ((22050, 90), (24000, 47), (16000, 300)):
        x = (rng.standard_normal(rate * seconds) * 0.4).astype(np.float32)
        y = limit_peaks(x.copy(), rate, ceiling=0.708)
        assert np.max(np.abs(y)) <= 0.708 * (1 + 1e-6), (rate, seconds)


def test_gated_loudness_and_one_gain_for_the_book() -> None:
    rate = 24000
    loud, quiet = LoudnessMeter(rate), LoudnessMeter(rate)
    tone = np.sin(2 * np.pi * 200 * np.arange(2 * rate) / rate).astype(np.float32)
    loud.add(0.2 * tone)
    loud.add(np.zeros(rate, np.float32))  # silence is gated out
    quiet.add(0.1 * tone)
    assert loudness_of([loud.bins]) == pytest.approx(20 * np.log10(0.2 / np.sqrt(2)), abs=0.05)
    both = loudness_of([loud.bins, quiet.bins])
    assert 20 * np.log10(0.1 / np.sqrt(2)) < both < 20 * np.log10(0.2 / np.sqrt(2))
    gain, capped = book_gain(-26.0, 0.5, BookOptions(loudness_db=-20.0, peak_db=-3.0, limit_db=6.0))
    assert gain == pytest.approx(6.0) and not capped
    gain, capped = book_gain(-30.0, 1.0, BookOptions(loudness_db=-20.0, peak_db=-3.0, limit_db=6.0))
    assert gain == pytest.approx(3.0) and capped  # the limiter may take 6 dB off a 0 dBFS peak, no more


def test_stream_encoder_writes_each_format_with_tags() -> None:
    from workers.assembly import StreamEncoder

    rate = 22050
    x = (0.3 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate)).astype(np.float32)
    for fmt, out_rate in (("flac", 22050), ("wav", 22050), ("ogg", 24000), ("mp3", 22050)):  # Opus: 24 kHz, not 22.05
        enc = StreamEncoder(fmt, rate, {"title": "第一章 Morning", "album": "Book", "tracknumber": "3"})
        for i in range(0, rate, 1000):
            enc.write(x[i : i + 1000])
        f = sf.SoundFile(io.BytesIO(enc.close()))
        assert (f.samplerate, f.frames) == (out_rate, out_rate), fmt
        if fmt != "wav":
            assert (f.title, f.album, f.tracknumber) == ("第一章 Morning", "Book", "3")


def test_workers_write_only_into_marked_folders(tmp_path: Path) -> None:
    from books import OUTPUT_MARKER, normalize_out
    from wire.settings import StorageSettings
    from workers.assembly import output_storage

    with pytest.raises(InputError) as err:
        output_storage(StorageSettings(), str(tmp_path))  # any folder a task names: refused
    assert err.value.code == "BOOK_OUTPUT_REFUSED"
    out = normalize_out(str(tmp_path / "book"))  # the runner makes the folder and marks it
    assert (Path(out) / OUTPUT_MARKER).is_file()
    assert output_storage(StorageSettings(), out).put("001-a.flac", b"x", "audio/flac").startswith("file://")
    with pytest.raises(InputError):
        output_storage(StorageSettings(), "relative/dir")


# -- end to end on a farm --------------------------------------------------------------------------------------
