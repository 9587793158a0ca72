"""Audiobooks end to end on real worker processes: Markdown into a folder, the EPUB of the same book into
S3 (moto) reusing every segment, an edited book, and a SIGKILL of the worker and the runner midway
through a book."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from books import BookOptions, BookPlan, BookResult, plan_book, run_book, segment_key, submit_book
from books.formats import load_book
from producer.client import Client
from tests.book_files import BOOK_ID, MD, epub_of, join_steps, layout, typical_step
from tests.conftest import AWS_ENV, Farm, FarmSpec
from workers.assembly import join_chapter

ROOT = Path(__file__).resolve().parent.parent
FARM = FarmSpec(s3=True, env={"TTSFARM_QUEUE_CLAIM_IDLE_MS": "10000"})  # a dead worker's entries come back after 10 s


@pytest.fixture(scope="module")
def md_run(farm: Farm, tmp_path_factory: pytest.TempPathFactory) -> tuple[BookResult, Path, str]:
    out = tmp_path_factory.mktemp("md_out")
    err = io.StringIO()
    result = run_book(farm.settings, MD, None, str(out), book_id=BOOK_ID, progress=err, timeout=150)
    return result, out, err.getvalue()


def _check_chapters(farm: Farm, plan: BookPlan, result: BookResult, read: Any) -> dict[str, float]:
    """Every chapter: its length is its segments plus the planned pauses; no join clicks; one gain."""
    from wire.storage import storage_from_settings

    store = storage_from_settings(farm.settings.storage)
    opts = BookOptions()
    gain = 10 ** (result.gain_db / 20)
    worst, plain, ratios, errors = 0.0, 0.0, [], []
    for ch, made in zip(plan.chapters, result.chapters):
        audio, rate = read(made.file)
        assert rate == plan.sample_rate
        segs = [np.frombuffer(store.get(segment_key(s.job_id)), "<i2").astype(np.float32) / 32768 for s in ch.segments]
        length, joins = layout([len(s) for s in segs], [s.pause_after_s for s in ch.segments], rate, opts.head_s, opts.tail_s)
        errors.append(abs(len(audio) - length) / rate)
        assert abs(len(audio) - length) / rate <= 0.020, (made.title, len(audio), length)
        assert abs(made.duration_s - len(audio) / rate) < 1e-3
        step = join_steps(audio, joins) / typical_step(audio)
        worst = max(worst, step)
        assert step <= 1.0, (made.title, step)
        pieces = list(zip(segs, [s.pause_after_s for s in ch.segments]))
        naive = np.zeros(length, np.float32)
        pos = round(opts.head_s * rate)
        for seg, pause in pieces:  # the same layout without fades: what the joins would be without them
            naive[pos : pos + len(seg)] = seg * gain
            pos += len(seg) + round(pause * rate)
        plain = max(plain, join_steps(naive, joins) / typical_step(naive))
        ref = np.concatenate(list(join_chapter(pieces, rate, fade_ms=opts.fade_ms, head_s=opts.head_s, tail_s=opts.tail_s)))
        loud = np.abs(ref) > 0.02
        ratios.append(float(np.median(audio[loud] / ref[loud])))
        assert np.max(np.abs(audio)) <= 10 ** (opts.peak_db / 20) + 2 / 32768
    assert max(abs(r - gain) for r in ratios) < 0.01 * gain, ratios  # the same gain in every chapter
    return {"max_join_step_over_typical": round(worst, 3), "unfaded_max_join_step_over_typical": round(plain, 3),
            "max_duration_error_s": max(errors), "gain_db": round(result.gain_db, 2)}


def _bar_minutes(progress: str) -> float:
    """The audio minutes on the progress bar's last line."""
    m = re.search(r"segments  ([\d.]+) min audio", progress.strip().splitlines()[-1])
    assert m, progress
    return float(m.group(1))


@pytest.mark.slow
def test_markdown_book_into_a_folder(farm: Farm, md_run: tuple[BookResult, Path, str]) -> None:
    result, out, progress = md_run
    plan = plan_book(farm.settings, load_book(MD), book_id=BOOK_ID, opts=BookOptions())
    assert len(result.chapters) == 11 and result.segments == len(plan.jobs) == result.synthesized
    assert result.reused == 0 and not result.skipped
    numbers = _check_chapters(farm, plan, result, lambda f: sf.read(out / f, dtype="float32"))
    print(f"\nmarkdown book: {numbers}, {result.duration_s:.1f} s of audio in {result.wall_s:.1f} s")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert [c["title"] for c in manifest["chapters"]] == [c.title for c in plan.chapters]
    assert [c["file"] for c in manifest["chapters"]] == sorted(p.name for p in out.glob("*.flac"))
    loud = manifest["loudness"]
    assert loud["gain_capped"] or abs(loud["measured_db"] + loud["gain_db"] - loud["target_db"]) < 0.01
    m3u = (out / "playlist.m3u8").read_text(encoding="utf-8").splitlines()
    assert m3u[0] == "#EXTM3U" and m3u[-1] == "011-第十章-再见.flac" and m3u[-2].endswith(",第十章 再见")
    last = progress.strip().splitlines()[-1]
    assert last.startswith("done") and f"{len(plan.jobs)}/{len(plan.jobs)} segments" in last and "chapters 11/11" in last
    assert _bar_minutes(progress) == pytest.approx(result.duration_s / 60, abs=0.051)  # the manifest's audio
    assert sf.info(str(out / result.chapters[2].file)).format == "FLAC"


@pytest.mark.slow
def test_epub_of_the_same_book_into_s3_reuses_every_segment(farm: Farm, md_run: tuple[BookResult, Path, str],
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wire.settings import StorageSettings
    from wire.storage.s3 import S3Storage

    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    first, md_out, _ = md_run
    epub = epub_of(load_book(MD), tmp_path / "small_farm.epub")
    bucket = f"books-{uuid.uuid4().hex[:10]}"
    s3 = S3Storage(StorageSettings(s3_bucket=bucket, s3_endpoint_url=farm.settings.storage.s3_endpoint_url, prefix="audio/small"))
    s3.ensure_bucket()
    err = io.StringIO()
    result = run_book(farm.settings, epub, None, f"s3://{bucket}/audio/small", book_id=BOOK_ID, progress=err, timeout=120)
    assert result.reused == result.segments == first.segments and result.synthesized == 0
    assert _bar_minutes(err.getvalue()) == pytest.approx(result.duration_s / 60, abs=0.051)  # reused audio counts
    assert result.manifest_url == f"s3://{bucket}/audio/small/manifest.json"
    listing = s3.client.list_objects_v2(Bucket=bucket)["Contents"]
    assert len(listing) == 11 * 2 + 2 + 1  # a chapter file and its captions each, manifest and playlist, the book's M4B
    manifest = json.loads(s3.get("manifest.json"))
    assert manifest["title"] == "The Small Farm" and len(manifest["chapters"]) == 11
    for a, b in zip(first.chapters, result.chapters):  # the same segments, pauses and gain: the same audio
        s3_audio, _ = sf.read(io.BytesIO(s3.get(b.file)), dtype="int16")
        local, _ = sf.read(md_out / a.file, dtype="int16")
        np.testing.assert_array_equal(s3_audio, local)
        assert s3.get(b.captions) == (md_out / a.captions).read_bytes()  # reused segments keep their words


@pytest.mark.slow
def test_edited_book_remakes_only_the_changed_segments(farm: Farm, md_run: tuple[BookResult, Path, str], tmp_path: Path) -> None:
    assert md_run[0].synthesized  # the book was made once before
    edited = tmp_path / "small_farm.md"
    edited.write_text(MD.read_text(encoding="utf-8").replace("came out, one by one", "came out slowly").replace(
        "## Chapter 1: Morning", "## Prologue: Dawn\n\nIt was early.\n\n## Chapter 1: Morning"), encoding="utf-8")
    result = run_book(farm.settings, edited, None, str(tmp_path / "out"), book_id=BOOK_ID, timeout=120)
    assert result.synthesized == 4 and result.reused == result.segments - 4  # see the planning test
    assert len(result.chapters) == 12


KILL_BOOK = "\n\n".join(
    [f"Chapter {n}\n\n{a}. {b}. The end of part {n}." for n, (a, b) in enumerate(
        [("The road was long", "We walked all day"), ("Rain fell on the roof", "The cat slept"),
         ("A boat crossed the lake", "Fish jumped"), ("The bell rang twice", "Children ran out"),
         ("Snow covered the town", "Lamps were lit"), ("A train came late", "Nobody minded"),
         ("The garden grew wild", "Bees hummed"), ("Letters piled up", "Someone answered them")], 1)]
    + ["第九章 夜\n\n夜很静。"])


@pytest.mark.slow
def test_killed_worker_and_runner_then_a_rerun_redoes_only_what_was_in_flight(farm: Farm, tmp_path: Path) -> None:
    """Last in the module: it kills the module's worker and leaves a new one. The bulk lane admits 6
    segments at a time, so the runner also dies holding segments it never queued."""
    book = tmp_path / "kill_book.txt"
    book.write_text(KILL_BOOK, encoding="utf-8")
    out = tmp_path / "out"
    settings = farm.settings.replace(queue={"max_backlog_bulk_segments": 6})
    plan = plan_book(settings, load_book(book), book_id="kill-book", opts=BookOptions())
    ids = list(plan.jobs)
    client = farm.client()

    def states() -> dict[str, str]:
        pipe = client.redis.pipeline()
        for j in ids:
            pipe.hget(client.keys.status(j), "state")
        return {j: (s or b"absent").decode() for j, s in zip(ids, pipe.execute())}

    def entries_added() -> int:  # finished entries leave their stream: count what was ever added
        return sum(int(client.redis.xinfo_stream(stream)["entries-added"])
                   for stream in client.keys.queues(farm.settings.queue.n_buckets) if client.redis.exists(stream))

    added_before = entries_added()  # the module's farm: earlier tests queued jobs on these streams too
    env = {**os.environ, **farm.env, "PYTHONPATH": str(ROOT), "TTSFARM_QUEUE_MAX_BACKLOG_BULK_SEGMENTS": "6"}
    runner = subprocess.Popen([sys.executable, "-m", "books", str(book), "--out", str(out), "--book-id", "kill-book",
                               "--quiet"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while sum(s == "done" for s in states().values()) < len(ids) // 3:
        assert runner.poll() is None, runner.stderr.read() if runner.stderr else ""
        assert time.monotonic() < deadline, states()
        time.sleep(0.05)
    for w in farm.workers:
        w.stop(signal.SIGKILL)  # type: ignore[attr-defined]
    runner.send_signal(signal.SIGKILL)
    runner.wait(10)
    before = states()
    in_flight = sorted(j for j, s in before.items() if s != "done")
    assert 0 < len(in_flight) < len(ids) and set(before.values()) <= {"done", "queued", "running", "absent"}, before
    assert "absent" in before.values()  # held back by the full lane when the runner died
    rerun_at = time.time()
    with Client.from_url(settings=settings) as sdk:  # the rerun, through the SDK this time
        handle = submit_book(sdk, book, out=str(out), book_id="kill-book")
        p = handle.progress()
        assert (p.done, p.reused, p.total) == (len(ids) - len(in_flight), len(ids) - len(in_flight), len(ids))
        farm.start_worker()  # only now: nothing can finish between the snapshot and the rerun's submission
        chapters = list(handle.results(timeout=150))
        result = handle.result()
    assert [c.index for c in chapters] == [c.index for c in plan.chapters] and result.chapters == tuple(chapters)
    assert (result.reused, result.synthesized, result.skipped) == (len(ids) - len(in_flight), len(in_flight), ())
    finished = {j: float(client.redis.hget(client.keys.status(j), "finished") or 0) for j in ids}
    assert sorted(j for j in ids if finished[j] > rerun_at) == in_flight  # only those were made again
    added = entries_added() - added_before  # no job was queued twice: one entry per job, runner and rerun together
    assert added == len(ids), (added, len(ids))
    numbers = _check_chapters(farm, plan, result, lambda f: sf.read(out / f, dtype="float32"))
    print(f"\nkilled and rerun: {len(in_flight)} of {len(ids)} redone, {numbers}, rerun {result.wall_s:.1f} s")


@pytest.mark.slow
def test_chapters_have_captions_listed_in_the_manifest(farm: Farm, md_run: tuple[BookResult, Path, str]) -> None:
    from tests.test_word_timings_farm import _parse_vtt

    result, out, _ = md_run
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    opts = BookOptions()
    for entry, made in zip(manifest["chapters"], result.chapters):
        assert entry["captions"] == made.captions == Path(made.file).stem + ".vtt"
        cues = _parse_vtt((out / entry["captions"]).read_text(encoding="utf-8"))
        assert cues, entry
        assert cues[0][0] >= opts.head_s - 1e-3 and cues[-1][1] <= made.duration_s + 1e-3
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(cues, cues[1:]))  # in order, no overlap
    # the chapter's words are its text's words: the third chapter (Chinese) as the characters read
    third = _parse_vtt((out / result.chapters[2].captions).read_text(encoding="utf-8"))
    assert any("\u4e00" <= ch <= "\u9fff" for _, _, text in third for ch in text)
    assert [text for _, _, text in third] == ["第二章 雨", "今天下雨了。"]  # a cue a paragraph, its marks kept
    chapter3 = next(c for c in result.chapters if c.title == "Chapter 3: The Market")
    market = _parse_vtt((out / chapter3.captions).read_text(encoding="utf-8"))
    assert [text for _, _, text in market] == ["Chapter 3: The Market", "We sold apples and pears.", "我们卖苹果。"]


# -- one file a listener can carry -------------------------------------------------------------------------------


def _m4b_chapters(path: Path) -> tuple[dict[str, str], list[tuple[str, float, float]], float, str]:
    """(metadata, [(title, start s, end s)], audio seconds, codec) of an M4B, as FFmpeg reads it."""
    import av

    with av.open(str(path)) as c:
        chapters = [(ch["metadata"].get("title", ""), float(ch["start"] * ch["time_base"]), float(ch["end"] * ch["time_base"]))
                    for ch in c.chapters()]
        stream = c.streams.audio[0]
        return dict(c.metadata), chapters, float(stream.duration * stream.time_base), stream.codec_context.name


@pytest.mark.slow
def test_markdown_book_has_one_m4b_with_its_chapters(farm: Farm, md_run: tuple[BookResult, Path, str]) -> None:
    result, out, _ = md_run
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    book_file = manifest["book_file"]
    assert book_file["file"] == f"{BOOK_ID}.m4b" and book_file["format"] == "m4b"
    path = out / book_file["file"]
    assert result.book_file_url and path.is_file() and path.stat().st_size == book_file["bytes"]
    meta, chapters, seconds, codec = _m4b_chapters(path)
    assert codec == "aac" and meta.get("title") == result.title
    assert [t for t, _, _ in chapters] == [c.title for c in result.chapters]
    start = 0.0
    for (title, begin, end), ch in zip(chapters, result.chapters):  # chapter marks where the chapters begin
        assert abs(begin - start) <= 0.002 and abs((end - begin) - ch.duration_s) <= 0.002, (title, begin, end, ch)
        start += ch.duration_s
    assert abs(seconds - start) <= 0.05  # the whole book, once
    assert [c["start_s"] for c in book_file["chapters"]] == pytest.approx([b for _, b, _ in chapters], abs=0.002)


@pytest.mark.slow
def test_mp3_chapters_with_a_book_lexicon(farm: Farm, tmp_path: Path) -> None:
    from tests.decode import decode_av

    src = tmp_path / "names.md"
    src.write_text("# Names\n\n## One\n\nWe met Nguyen today.\n\n## 二\n\n我们听单田芳的评书。\n", encoding="utf-8")
    lexicon = {"Nguyen": "ŋwˈɪn", "单田芳": "shan4 tian2 fang1"}
    opts = BookOptions(format="mp3", bitrate=48000, lexicon=lexicon)
    plan = plan_book(farm.settings, load_book(src), book_id="names", opts=opts)
    texts = " ".join(s.text for ch in plan.chapters for s in ch.segments)
    assert "[[ŋwˈɪn]]" in texts and "[[shan4 tian2 fang1]]" in texts
    result = run_book(farm.settings, src, None, str(tmp_path / "out"), book_id="names", opts=opts, timeout=120)
    for ch in result.chapters:
        data = (tmp_path / "out" / ch.file).read_bytes()
        samples, rate = decode_av(data)
        assert ch.file.endswith(".mp3") and abs(len(samples) / rate - ch.duration_s) <= 1152 / rate
    _, chapters, _, _ = _m4b_chapters(tmp_path / "out" / "names.m4b")
    assert [t for t, _, _ in chapters] == ["One", "二"]
