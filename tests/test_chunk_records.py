"""A piece's chunks travel as one results-stream record (``records.chunks_fields``): one XADD per piece instead of one
per chunk. Readers still get every chunk on its own, numbered, with its words and the last flag where it was; a plain
one-chunk record reads as before; a record whose sizes do not add up is refused."""

from __future__ import annotations

import pytest
import redis

from producer.reader import ResultsReader
from wire.keys import Keys
from wire.redis.broker import RedisBroker
from wire.records import SegmentJob, chunk_fields, chunk_parts, chunks_fields, text_of
from workers.publisher import Publisher, SegmentProgress

RATE = 16000


def _text(fields: dict) -> dict:
    return {text_of(k): v for k, v in fields.items()}


def test_several_chunks_in_one_record_read_back_as_they_were() -> None:
    pcms = [b"\x01\x00" * 5, b"\x02\x00" * 5, b"\x03\x00" * 2]
    words = [[[0, 4, 0, 3, "one", 0, " "]], [], [[10, 12, 4, 7, "two", 0, "."]]]
    fields = chunks_fields(3, 7, True, "w/1", RATE, pcms, words)
    assert fields["pcm"] == b"".join(pcms) and fields["sizes"] == "10,10,4"
    assert chunk_parts(_text(fields)) == [(7, pcms[0], False, words[0]), (8, pcms[1], False, []), (9, pcms[2], True, words[2])]
    not_last = chunks_fields(3, 0, False, "w/1", RATE, pcms, [[], [], []])
    assert "words" not in not_last and [p[2] for p in chunk_parts(_text(not_last))] == [False, False, False]


def test_one_chunk_is_a_plain_chunk_record() -> None:
    one = chunks_fields(0, 2, True, "w/1", RATE, [b"\x05\x00" * 3], [[[0, 3, 0, 2, "hi", 0, None]]])
    assert one == chunk_fields(0, 2, True, "w/1", RATE, b"\x05\x00" * 3, [[0, 3, 0, 2, "hi", 0, None]])
    assert chunk_parts(_text(one)) == [(2, b"\x05\x00" * 3, True, [[0, 3, 0, 2, "hi", 0, None]])]


@pytest.mark.parametrize("sizes", ["10,10,5", "10,10", "30,-6"])
def test_sizes_that_do_not_match_the_pcm_are_refused(sizes: str) -> None:
    fields = _text(chunks_fields(0, 0, True, "w/1", RATE, [b"\0" * 10, b"\0" * 10, b"\0" * 4], [[], [], []]))
    fields["sizes"] = sizes
    with pytest.raises(ValueError, match="sizes"):
        chunk_parts(fields)


def test_a_published_segment_is_one_entry_and_reads_as_its_chunks(r: redis.Redis) -> None:
    keys = Keys("pieces")
    job = SegmentJob(job_id="piecejob1234", seg=0, total=1, text="One two three.", lang="en", voice="joe",
                     request_voice="joe", format="pcm", sample_rate=RATE, lane="interactive")
    pub = Publisher(RedisBroker(r, keys), storage=None, chunk_ms=100, maxlen=100, ttl_s=60)  # type: ignore[arg-type]
    pcm = bytes(range(256)) * 31 + bytes(64)  # 4,000 samples: two whole chunks of 100 ms (1,600) and 800 samples
    words = [[0, 1000, 0, 3, "One", 0, " "], [1000, 2500, 4, 7, "two", 0, " "], [2500, 3800, 8, 13, "three", 0, "."]]
    out = pub.publish_segment(job, pcm, attempt="w/1", batch_id="b#1", worker="w", words=words)
    assert out is not None and out.done == 1 and out.output is not None and out.output[0] == {0: pcm}  # the job's part
    entries = r.xrange(keys.results(job.job_id))
    assert len(entries) == 1 and entries[0][1][b"sizes"] == b"3200,3200,1600"
    reader = ResultsReader(total=1, job_id=job.job_id)
    chunks = [c for entry_id, fields in entries for c in reader.feed(entry_id, fields)]
    assert [c.seq for c in chunks] == [0, 1, 2] and b"".join(c.pcm for c in chunks) == pcm
    assert [len(c.pcm) for c in chunks] == [3200, 3200, 1600] and [c.last for c in chunks] == [False, False, True]
    assert [[w.text for w in c.words] for c in chunks] == [["One"], ["two"], ["three"]]
