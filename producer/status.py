"""Reading the per-job status record (a Redis hash) into plain Python values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from producer.wire.errors import error_from_dict
from producer.wire.records import JobResult, Word, text_of

_NUMBERS = {"total": int, "done": int, "sample_rate": int, "created": float, "started": float, "first_chunk": float,
            "finished": float, "duration": float, "deadline": float, "est_seconds": float}


def decode_status(raw: Mapping[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key, val = text_of(k), text_of(v)
        conv = _NUMBERS.get(key)
        out[key] = conv(val) if conv and val not in ("", None) else val
    return out


def result_from_status(job_id: str, st: Mapping[str, Any]) -> JobResult:
    """The result of an ended job; a failed or cancelled job raises its error instead."""
    if st["state"] != "done":
        raise error_from_dict({"code": st.get("error_code") or f"JOB_{str(st['state']).upper()}",
                                      "message": st.get("error_message") or f"job {job_id} {st['state']}"})
    created = float(st.get("created", 0.0))
    timings = {name: round(float(st[name]) - created, 4) for name in ("started", "first_chunk", "finished") if st.get(name)}
    info = json.loads(st["info"]) if st.get("info") else {}
    words = tuple(Word(**w) for w in json.loads(st["words"])) if st.get("words") else ()
    return JobResult(job_id=job_id, state=st["state"], url=str(st.get("url", "")), duration_s=float(st.get("duration", 0.0)),
                     timings=timings, info=info, words=words)
