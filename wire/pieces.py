"""The records of a worker's results steps (``broker.WorkBroker.publish_pieces``): a piece of a segment to publish,
its segment's end, a streamed segment's claim on its attempt, and what the store answered."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wire.records import CHUNK, chunk_parts, record_type, text_of

if TYPE_CHECKING:
    from wire.admission import Admission


@dataclass(frozen=True)
class SegmentEnd:
    """What a segment's last piece writes besides its chunks: the segment's words (JSON), and which batch and worker
    made it. (Its PCM for assembly is its pieces', each stored as it is published: ``job_output`` joins them.)"""

    words_json: str
    batch_id: str
    worker: str
    open: bool = False  # the segment's job had its text appended (total 0 in its records): read its total too
    frames: bool = False  # the segment's claim stored its frames (``FrameClaim.frames``): the end drops them


@dataclass(frozen=True)
class FrameClaim:
    """A streamed segment's claim on its attempt, sent with the first piece the attempt publishes (``Piece.claim``):
    the attempt's tag, its replay record (text: how its windows are cut and how many frames it has; a redo of a voice
    that makes the same frames again from the same seed needs no more) and, from a voice that cannot, the frames."""

    attempt: str
    replay: str
    frames: bytes = b""


@dataclass(frozen=True)
class ClaimReply:
    """Who holds a streamed segment, as a piece whose claim found another attempt's (``PieceReply.claim``; a claim
    that wins, or an attempt's own sent again, gets none): that attempt's tag, replay record and frames (b"" where it
    stored none), the windows it published so far, and whether it published the segment whole (``ended``: only its
    bookkeeping may be left)."""

    attempt: str
    replay: str
    frames: bytes = b""
    windows: int = 0
    ended: bool = False


@dataclass(frozen=True)
class Piece:
    """One piece of a segment to publish: its chunk record (``records.chunks_fields``, the piece's chunks in one;
    none for a window an earlier attempt published), its index in the segment, its seconds of audio, the segment's
    end with its last piece, and the admission policy when the job may have staged segments (``admission.may_stage``)."""

    job_id: str
    seg: int
    chunks: Sequence[Mapping[str, Any]]
    piece: int
    seconds: float
    end: SegmentEnd | None = None
    admission: Admission | None = None
    total: int = 0  # the job's segments: the piece that ends its last one gets the job's output back
    claim: FrameClaim | None = None  # with an attempt's first piece of a streamed segment: its claim
    copy: bool = True  # its PCM copied into the job's parts hash too; False: the job is this one segment and all its
    # records stay in its results stream (no trimming reaches them), where ``job_output`` reads it when asked

    @property
    def pcm(self) -> bytes:
        """The piece's audio: its chunks' PCM joined (what the job's assembly keeps of it)."""
        return b"".join(bytes(f["pcm"]) for f in self.chunks if "pcm" in f)


@dataclass(frozen=True)
class PieceReply:
    """What the store said after a piece: the job's state as read; the job's playback clock (its first chunk's time,
    0.0 before; the audio seconds delivered including this piece); after a segment's end, the segments done. A piece
    is ``written`` unless its job had ended (a client's cancel: its state says which) or its claim lost (``claim``:
    who holds the segment); then nothing of it was written."""

    first_chunk: float = 0.0
    delivered_s: float = 0.0
    done: int = 0
    state: str = ""
    total: int = 0  # the job's total as its status holds it (read for a job whose text is appended: ``SegmentEnd.open``)
    output: tuple[dict[int, bytes], dict[int, Any]] | None = None  # when this piece was the whole job (one segment of
    # one piece): its parts and words, as sent; a longer job's are read by whoever ends it (``job_output``)
    written: bool = True
    claim: ClaimReply | None = None  # the piece carried a claim that another attempt held before it
    counted: bool = True  # its segment's end counted here (False: an earlier attempt's did; what readers heard of the
    # segment is that attempt's, read with ``job_output``, not this attempt's own audio)


def parts_output(fields: Mapping[Any, bytes]) -> tuple[dict[int, bytes], dict[int, Any]]:
    """A job's parts (``Keys.parts``) read back: each segment's PCM (its pieces, under ``seg:piece``, joined in order)
    and its words (under ``words:seg``), by segment."""
    by_seg: dict[int, list[tuple[int, bytes]]] = {}
    words: dict[int, Any] = {}
    for key, value in fields.items():
        name, _, rest = text_of(key).partition(":")
        if name == "words":
            words[int(rest)] = json.loads(value)
        else:
            by_seg.setdefault(int(name), []).append((int(rest or 0), value))
    parts = {seg: b"".join(pcm for _, pcm in sorted(found)) for seg, found in by_seg.items()}
    return parts, words


def stream_pcm(records: Iterable[Mapping[Any, Any]]) -> dict[int, bytes]:
    """Each segment's PCM as a job's results stream holds it (its chunk records joined in part order, the first copy of
    a part kept): the output of a job that is one segment, whose PCM the parts hash does not copy (``Piece.copy``)."""
    by_seg: dict[int, dict[int, bytes]] = {}
    for raw in records:
        if record_type(raw) != CHUNK:
            continue
        fields = {text_of(k): v for k, v in raw.items()}
        seg = by_seg.setdefault(int(text_of(fields["seg"])), {})
        for part, pcm, _, _ in chunk_parts(fields):
            seg.setdefault(part, pcm)
    return {n: b"".join(pcm for _, pcm in sorted(parts.items())) for n, parts in by_seg.items()}
