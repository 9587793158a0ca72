"""Backpressure: a backlog limit per lane, in queued segments and in predicted audio seconds.

A submission is admitted and written by one Lua script, so two producers cannot both slip past the
limit: it checks the lane's counters, then writes the status record, every segment's stream entry and
the new counts at once. Workers take a segment off the counters when their XACK of it succeeds (an
XACK counts once, so a redelivered entry cannot be subtracted twice). A lane that is empty admits any
job, so a job larger than the limit can still run when nothing else waits.
"""

from __future__ import annotations

import json
from typing import Any

from producer.contract import Keys
from producer.submit import Submission
from producer.wire.errors import OverloadedError
from producer.wire.settings import QueueSettings

# KEYS: status, backlog hash, then one stream key per segment.
# ARGV: max_n, max_s, add_s, ttl, status json, then one job-fields json per segment.
ADMIT = """
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local s = tonumber(redis.call('HGET', KEYS[2], 's') or '0')
local max_n, max_s, add_s = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local add_n = #KEYS - 2
if n > 0 and ((max_n > 0 and n + add_n > max_n) or (max_s > 0 and s + add_s > max_s)) then
  return {0, n, tostring(s)}
end
local status = cjson.decode(ARGV[5])
for k, v in pairs(status) do redis.call('HSET', KEYS[1], k, tostring(v)) end
redis.call('EXPIRE', KEYS[1], ARGV[4])
for i = 3, #KEYS do
  local f = cjson.decode(ARGV[i + 3])
  redis.call('XADD', KEYS[i], '*', 'v', f['v'], 'job', f['job'])
end
redis.call('HINCRBY', KEYS[2], 'n', add_n)
redis.call('HINCRBYFLOAT', KEYS[2], 's', add_s)
return {1, n + add_n, tostring(s + add_s)}
"""

# KEYS: backlog hash. ARGV: segments, seconds. Never below zero (entries written around the SDK).
RELEASE = """
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0') - tonumber(ARGV[1])
local s = tonumber(redis.call('HGET', KEYS[1], 's') or '0') - tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'n', math.max(n, 0), 's', math.max(s, 0))
return 1
"""


def limits(q: QueueSettings, lane: str) -> tuple[int, float]:
    if lane == "bulk":
        return q.max_backlog_bulk_segments, q.max_backlog_bulk_seconds
    return q.max_backlog_interactive_segments, q.max_backlog_interactive_seconds


def admit_args(sub: Submission, keys: Keys, q: QueueSettings) -> tuple[list[str], list[Any]]:
    lane = sub.segments[0].lane
    max_n, max_s = limits(q, lane)
    add_s = round(sum(s.est_s for s in sub.segments), 3)
    script_keys = [keys.status(sub.job_id), keys.backlog(lane), *sub.streams]
    status = {k: repr(v) if isinstance(v, float) else str(v) for k, v in sub.status.items()}
    argv: list[Any] = [max_n, max_s, add_s, q.job_ttl_s, json.dumps(status)]
    argv += [json.dumps(seg.to_fields(), ensure_ascii=False) for seg in sub.segments]
    return script_keys, argv


def check_admitted(reply: list[Any], sub: Submission, q: QueueSettings) -> None:
    if int(reply[0]) == 1:
        return
    lane = sub.segments[0].lane
    max_n, max_s = limits(q, lane)
    raise OverloadedError(
        f"the {lane} lane is full ({int(reply[1])} segments, {float(reply[2]):.0f} s of audio queued; "
        f"limits {max_n} segments, {max_s:.0f} s): retry later",
        lane=lane, queued_segments=int(reply[1]), queued_seconds=float(reply[2]),
    )
