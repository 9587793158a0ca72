"""The command line, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis
import soundfile as sf


def ttsfarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=300)


def test_say_writes_mixed_text_offline(tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    res = ttsfarm("say", "今天天气很好，我们去公园散步吧。Hello from the farm.", "-o", str(out))
    assert res.returncode == 0, res.stderr
    audio, rate = sf.read(out)
    assert rate == 24000 and 2.5 < len(audio) / rate < 10


def test_say_other_format_and_rate(tmp_path: Path) -> None:
    out = tmp_path / "out.flac"
    res = ttsfarm("say", "Sixteen kilohertz, please.", "-o", str(out), "--rate", "16000", "--voice", "joe")
    assert res.returncode == 0, res.stderr
    info = sf.info(out)
    assert info.samplerate == 16000 and info.format == "FLAC"


def test_phonemize_shows_pinyin_and_tokens() -> None:
    res = ttsfarm("phonemize", "我在银行工作。I work at a bank.")
    assert res.returncode == 0, res.stderr
    assert "yin2 hang2" in res.stdout
    assert "tokens:" in res.stdout and " en voice=joe" in res.stdout and " zh voice=baker" in res.stdout


def test_bad_input_exits_with_its_code(tmp_path: Path) -> None:
    res = ttsfarm("say", "   ", "-o", str(tmp_path / "x.wav"))
    assert res.returncode == 2 and "EMPTY_TEXT" in res.stderr
    res = ttsfarm("say", "hello", "-o", str(tmp_path / "x.wma"))
    assert res.returncode == 2 and "UNSUPPORTED_FORMAT" in res.stderr
    res = ttsfarm("say", "hello", "--voice", "nobody", "-o", str(tmp_path / "x.wav"))
    assert res.returncode == 2 and "UNKNOWN_VOICE" in res.stderr


def test_dlq_lists_shows_and_purges_through_the_sdk_connection(r: redis.Redis, redis_url: str,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from cli import main
    from wire.keys import Keys

    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", "clidlq")
    entry = r.xadd(Keys("clidlq").dead_letters(), {"code": "TOO_MANY_DELIVERIES", "message": "boom", "deliveries": 5})
    entry = entry.decode() if isinstance(entry, bytes) else entry
    assert main(["--redis", redis_url, "dlq", "list"]) == 0
    listed = capsys.readouterr().out
    assert entry in listed and "TOO_MANY_DELIVERIES" in listed and "deliveries=5" in listed and "boom" in listed
    assert main(["--redis", redis_url, "dlq", "show", entry]) == 0 and '"message": "boom"' in capsys.readouterr().out
    assert main(["--redis", redis_url, "dlq", "show", "1-1"]) == 1 and "no dead letter 1-1" in capsys.readouterr().err
    assert main(["--redis", redis_url, "dlq", "purge"]) == 0 and "removed 1 dead letter(s)" in capsys.readouterr().out
    assert r.xlen(Keys("clidlq").dead_letters()) == 0


def test_dlq_requeue_puts_the_segment_back_and_reopens_its_job_once(r: redis.Redis, redis_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from cli import main
    from wire.keys import Keys
    from wire.records import SegmentJob, dead_letter_fields, final_fields

    monkeypatch.setenv("TTSFARM_REDIS_KEY_PREFIX", "clirq")
    keys = Keys("clirq")
    job = SegmentJob(job_id="requeued-job-0001", seg=0, total=1, text="hi", lang="en", voice="joe",
                     request_voice="joe", format="wav", sample_rate=22050, lane="bulk")
    stream = keys.queue("bulk", 1)
    r.hset(keys.status(job.job_id), mapping={"state": "failed", "final": 1, "error_code": "TOO_MANY_FAILURES",
                                             "error_message": "boom", "finished": 1.0, "total": 1})
    chunk = r.xadd(keys.results(job.job_id), {"type": "chunk", "seg": 0})
    r.xadd(keys.results(job.job_id), final_fields("failed"))
    entry = r.xadd(keys.dead_letters(), dead_letter_fields(stream, "1-0", "TOO_MANY_FAILURES", "boom", 3, job.to_fields()))
    entry = entry.decode()
    malformed = r.xadd(keys.dead_letters(), dead_letter_fields(stream, "2-0", "MALFORMED_JOB", "bad", 1, {"x": "1"})).decode()

    assert main(["--redis", redis_url, "dlq", "requeue", entry]) == 0
    new_id = capsys.readouterr().out.split("requeued as ")[1].strip()
    (queued_id, fields), = r.xrange(stream)
    assert queued_id.decode() == new_id and SegmentJob.from_fields(fields).to_fields() == job.to_fields()
    status = r.hgetall(keys.status(job.job_id))
    assert status[b"state"] == b"queued" and not {b"final", b"error_code", b"error_message", b"finished"} & set(status)
    assert [i for i, _ in r.xrange(keys.results(job.job_id))] == [chunk]  # the final record went, the chunk stayed
    assert [i.decode() for i, _ in r.xrange(keys.dead_letters())] == [malformed]
    # a second requeue of the same dead letter finds nothing and queues nothing
    assert main(["--redis", redis_url, "dlq", "requeue", entry]) == 1 and "no dead letter" in capsys.readouterr().err
    assert r.xlen(stream) == 1
    # a malformed entry cannot be requeued: it stays
    assert main(["--redis", redis_url, "dlq", "requeue", malformed]) == 2 and "MALFORMED_JOB" in capsys.readouterr().err
    assert r.xlen(keys.dead_letters()) == 1 and r.xlen(stream) == 1
