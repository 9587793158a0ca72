"""Every Lua script of the Redis wire, in one place. Each runs atomically on the server; the comment above
each says its KEYS and ARGV. ``producer.wire.redis_broker.RedisBroker`` runs the broker's steps with them;
another broker implements the same steps its own way.
"""

from __future__ import annotations

from producer.wire.keys import STATES_FINAL
from producer.wire.records import FINAL

# Creates the consumer group ARGV[1] on each queue stream in KEYS unless it is there: one round trip,
# the same call from the sync SDK, the asyncio SDK and the workers.
ENSURE_GROUPS = """
for _, key in ipairs(KEYS) do
  local reply = redis.pcall('XGROUP', 'CREATE', key, ARGV[1], '0', 'MKSTREAM')
  if type(reply) == 'table' and reply.err and not string.find(reply.err, 'BUSYGROUP') then
    return redis.error_reply(reply.err)
  end
end
return #KEYS
"""

# Cancels each job whose status hash is in KEYS unless it has ended (one job's cancel, a book's); ARGV[1]: now.
# Atomic, so a worker's finish cannot slip between the check and the write. Returns per key -1 (no such job),
# 0 (had ended), 1 (cancelled).
CANCEL = f"""
local out = {{}}
for i, key in ipairs(KEYS) do
  local state = redis.call('HGET', key, 'state')
  if not state then
    out[i] = -1
  elseif {" or ".join(f"state == '{s}'" for s in STATES_FINAL)} then
    out[i] = 0
  else
    redis.call('HSET', key, 'state', 'cancelled', 'finished', ARGV[1])
    out[i] = 1
  end
end
return out
"""

# Reads the results stream KEYS[1] after ARGV[1] (an exclusive start, "(1-0"), at most ARGV[2] entries, with
# how many entries the stream has lost at its head (Redis 7's entries-added minus its length; -1 before 7):
# workers trim it at results_maxlen and nothing else deletes from it, so a reader that has read fewer entries
# than that has lost some. nil when the stream does not exist (not yet, or expired).
READ_RESULTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local added, length = -1, 0
for i = 1, #info, 2 do
  if info[i] == 'entries-added' then added = info[i + 1] end
  if info[i] == 'length' then length = info[i + 1] end
end
local lost = -1
if added >= 0 then lost = added - length end
return {lost, redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])}
"""

# KEYS: status, backlog hash, then one stream key per segment.
# ARGV: max_n, max_s, add_s, ttl, status json, then one job-fields json per segment.
# Idempotent per job id: a job whose status exists was admitted already (a retry after a lost reply) and answers 2.
ADMIT = """
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local s = tonumber(redis.call('HGET', KEYS[2], 's') or '0')
if redis.call('EXISTS', KEYS[1]) == 1 then return {2, n, tostring(s)} end
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

# KEYS: status, results, parts, done-set, stream, lane backlog. ARGV: force, ttl, v, job json, max_n, max_s,
# est_s, then status field/value pairs. Admission is ``ADMIT``'s, one segment at a time: a full
# lane answers 'full' and the runner offers the segment again later.
SUBMIT_BOOK_SEGMENT = """
local st = redis.call('HGET', KEYS[1], 'state')
if st == 'queued' or st == 'running' then return st end
if st == 'done' and ARGV[1] ~= '1' then return st end
local n = tonumber(redis.call('HGET', KEYS[6], 'n') or '0')
local s = tonumber(redis.call('HGET', KEYS[6], 's') or '0')
local max_n, max_s, add_s = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if n > 0 and ((max_n > 0 and n + 1 > max_n) or (max_s > 0 and s + add_s > max_s)) then return 'full' end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
local pairs = {}
for i = 8, #ARGV do pairs[#pairs + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('XADD', KEYS[5], '*', 'v', ARGV[3], 'job', ARGV[4])
redis.call('HINCRBY', KEYS[6], 'n', 1)
redis.call('HINCRBYFLOAT', KEYS[6], 's', add_s)
return 'submitted'
"""

# KEYS: status, results. ARGV: state, the final record and the one to write instead if a client's cancel won
# the race (each the flat JSON list of ``records.final_record``), results maxlen, ttl, then field/value pairs
# for status. A client's cancel wins over a finish that races it: the job then ends cancelled, whatever was made.
FINALIZE = """
if redis.call('HSETNX', KEYS[1], 'final', '1') == 0 then return 0 end
local state, record = ARGV[1], ARGV[2]
if redis.call('HGET', KEYS[1], 'state') == 'cancelled' and state ~= 'cancelled' then
  state = 'cancelled'
  record = ARGV[3]
else
  local status = {}
  for i = 6, #ARGV do status[#status + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'state', state, unpack(status))
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(cjson.decode(record)))
redis.call('EXPIRE', KEYS[2], ARGV[5])
if state == 'cancelled' and ARGV[1] ~= 'cancelled' then return 2 end
return 1
"""


# KEYS: status. ARGV: now, worker. The first segment to start marks the job started and running, but
# never over a state a client or a finish wrote meanwhile (a cancel between the worker's state check and
# this mark would otherwise be undone). Returns 1 for the job's first start, else 0.
MARK_STARTED = """
if redis.call('HSETNX', KEYS[1], 'started', ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'state') == 'queued' then redis.call('HSET', KEYS[1], 'state', 'running') end
redis.call('HSET', KEYS[1], 'worker', ARGV[2])
return 1
"""

# KEYS: frames hash, status. ARGV: seg, attempt, frames, ttl. The first attempt to stream a segment stores its
# tag and acoustic frames and gets {1, its tag, '', 0}; a later one gets {0, that tag, those frames ('' once the segment
# was published whole), windows published so far}.
CLAIM_FRAMES = """
local won = redis.call('HSETNX', KEYS[1], ARGV[1] .. ':attempt', ARGV[2])
if won == 1 then
  redis.call('HSET', KEYS[1], ARGV[1] .. ':frames', ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
if won == 1 then return {1, ARGV[2], '', 0} end
return {0, redis.call('HGET', KEYS[1], ARGV[1] .. ':attempt'), redis.call('HGET', KEYS[1], ARGV[1] .. ':frames') or '',
        redis.call('HGET', KEYS[2], 'windows:' .. ARGV[1]) or 0}
"""

# KEYS: dead-letter stream, the job's status, its results stream, the queue stream to requeue on. ARGV: the dead
# letter's entry id, then the job record's fields and values. Puts the segment back on its queue and reopens its
# job (state queued, its end and final record removed) at once; a dead letter that is gone (requeued or purged
# meanwhile) answers false and nothing is written, so two requeues cannot both queue it.
REQUEUE_DEAD_LETTER = f"""
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
redis.call('HDEL', KEYS[2], 'final', 'error_code', 'error_message', 'finished')
redis.call('HSET', KEYS[2], 'state', 'queued')
for _, entry in ipairs(redis.call('XRANGE', KEYS[3], '-', '+')) do
  local f = entry[2]
  for i = 1, #f, 2 do
    if f[i] == 'type' then
      if f[i + 1] == '{FINAL}' then redis.call('XDEL', KEYS[3], entry[1]) end
      break
    end
  end
end
local job = {{}}
for i = 2, #ARGV do job[#job + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[4], '*', unpack(job))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
"""
