"""The Lua scripts of a job's admission: its segments entering the queue. ``ADMIT`` (a submit: the first segments to
their bucket streams, the rest staged), ``ADMIT_DUE`` (the workers' sweep), ``CANCEL`` (staged segments dropped
with the job), and a job whose text is appended while it plays (``OPEN_JOB``, ``APPEND_SEGMENTS``). The worker's
steps, which admit a job's next segments as its audio is published, are in ``wire.redis.lua`` and share
``ADMISSION_FUNCTIONS``. Each script runs atomically on the server; the comment above each says its KEYS and ARGV.
"""

from __future__ import annotations

from wire.keys import STATES_FINAL

# Just-in-time admission (``wire.admission``), shared by the scripts below. A job's staged segments wait in
# its lane's staging stream (``Keys.staging``), their ids in the job's list (``Keys.staged``); the job is in the
# ``Keys.admission_due`` set, scored by when its next segment falls due. ``admit_next`` moves the job's next staged
# segments to their bucket streams while the audio admitted and not yet played is under the horizon, or while the
# farm has nothing else queued and the job has fewer than ``idle_ahead`` segments in flight. The status keeps
# ``admitted_n``, ``admitted_s`` (predicted audio seconds admitted), ``staged`` and ``horizon_s`` (its submit's); the lane's backlog hash keeps ``q``
# (segments in its bucket streams, not yet acked). Key names are ``Keys``' (wire/keys.py), built here from
# the prefix because the due set names jobs, not keys.
ADMISSION_FUNCTIONS = f"""
local function final_state(state)
  return {" or ".join(f"state == '{s}'" for s in STATES_FINAL)}
end

local function admit_next(prefix, job, now, idle_ahead, ending)
  local k_status, k_staged, k_due = prefix .. ':job:' .. job, prefix .. ':staged:' .. job, prefix .. ':admission_due'
  local staged = redis.call('LLEN', k_staged)
  local st = redis.call('HMGET', k_status, 'state', 'lane', 'first_chunk', 'delivered_s', 'admitted_s', 'admitted_n',
                        'horizon_s', 'done')
  if staged == 0 or not st[1] or final_state(st[1]) then
    redis.call('ZREM', k_due, job)
    return 0
  end
  local lane, first = st[2], tonumber(st[3] or '0') or 0
  local played = 0
  if first > 0 then played = math.max(0, math.min(now - first, tonumber(st[4] or '0') or 0)) end
  local admitted_s, admitted_n = tonumber(st[5] or '0') or 0, tonumber(st[6] or '0') or 0
  local horizon = tonumber(st[7] or '0') or 0  -- the job's own, from its submit
  local k_backlog, k_staging = prefix .. ':backlog:' .. lane, prefix .. ':staging:' .. lane
  -- a segment that ends with this publish is done but not yet acked: in the lane's q, no longer in flight
  local queued = (tonumber(redis.call('HGET', k_backlog, 'q') or '0') or 0) - ending
  local in_flight = math.max(0, admitted_n - (tonumber(st[8] or '0') or 0))
  local added = 0
  while staged > 0 do
    local idle = queued - in_flight <= 0 and in_flight < idle_ahead
    if admitted_s - played >= horizon and not idle then break end
    local id = redis.call('LPOP', k_staged)
    staged = staged - 1
    local entry = redis.call('XRANGE', k_staging, id, id)[1]
    if entry then
      redis.call('XDEL', k_staging, id)
      local f = {{}}
      for i = 1, #entry[2], 2 do f[entry[2][i]] = entry[2][i + 1] end
      redis.call('XADD', f['stream'], '*', 'v', f['v'], 'job', f['job'])
      admitted_s = admitted_s + (tonumber(f['est']) or 0)
      added, in_flight, queued = added + 1, in_flight + 1, queued + 1
    end
  end
  if added > 0 then
    redis.call('HSET', k_status, 'admitted_s', tostring(admitted_s), 'admitted_n', admitted_n + added, 'staged', staged)
    redis.call('HINCRBY', k_backlog, 'q', added)
  end
  if staged == 0 then
    redis.call('ZREM', k_due, job)
    redis.call('DEL', k_staged)
  elseif first > 0 then
    redis.call('ZADD', k_due, first + admitted_s - horizon, job)
  else
    redis.call('ZADD', k_due, now + 0.25, job)  -- before its first chunk: looked at again soon (an idle farm)
  end
  return added
end

-- A job's staged segments, dropped (it ended before they were admitted): off the staging stream, the due set and
-- the lane's backlog counters.
local function drop_staged(prefix, job, lane)
  local k_staged, k_staging = prefix .. ':staged:' .. job, prefix .. ':staging:' .. lane
  local ids = redis.call('LRANGE', k_staged, 0, -1)
  local est = 0
  for _, id in ipairs(ids) do
    local entry = redis.call('XRANGE', k_staging, id, id)[1]
    if entry then
      for i = 1, #entry[2], 2 do
        if entry[2][i] == 'est' then est = est + (tonumber(entry[2][i + 1]) or 0) end
      end
      redis.call('XDEL', k_staging, id)
    end
  end
  redis.call('DEL', k_staged)
  redis.call('ZREM', prefix .. ':admission_due', job)
  if #ids > 0 then
    local k_backlog = prefix .. ':backlog:' .. lane
    local n = tonumber(redis.call('HGET', k_backlog, 'n') or '0') - #ids
    local s = tonumber(redis.call('HGET', k_backlog, 's') or '0') - est
    redis.call('HSET', k_backlog, 'n', math.max(n, 0), 's', math.max(s, 0))
  end
  return #ids
end
"""

# KEYS: status, backlog hash, staging stream, staged list, admission-due set, then one bucket stream key per segment.
# ARGV: max_n, max_s, add_s, ttl, status json, how many to admit now (the first segments), job id, now, the request's
# fingerprint (``Submission.fingerprint``, also in the status json), then per segment its job fields and predicted
# seconds as json ({"v", "job", "est"}). The whole job counts against the lane's backlog limit (and in its counters)
# at once; its first ARGV[6] segments go to their bucket streams, the rest to the staging stream (``admit_next``
# admits them later). Idempotent per request: a job whose status exists with the same fingerprint was admitted
# already (a retry after a lost reply, the same request again) and answers 2; with another fingerprint, or none (a
# job another step wrote), the id is taken by another request: 3, and nothing is written.
ADMIT = ADMISSION_FUNCTIONS + """
local counts = redis.call('HMGET', KEYS[2], 'n', 's', 'q')
local n, s = tonumber(counts[1] or '0'), tonumber(counts[2] or '0')
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'fingerprint') == ARGV[9] then return {2, n, tostring(s)} end
  return {3, n, tostring(s)}
end
local max_n, max_s, add_s = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local add_n = #KEYS - 5
if n > 0 and ((max_n > 0 and n + add_n > max_n) or (max_s > 0 and s + add_s > max_s)) then
  return {0, n, tostring(s)}
end
local now_n, admitted_s = tonumber(ARGV[6]), 0
for i = 6, #KEYS do
  local f = cjson.decode(ARGV[i + 4])
  local seg = i - 5
  if seg <= now_n then
    redis.call('XADD', KEYS[i], '*', 'v', f['v'], 'job', f['job'])
    admitted_s = admitted_s + (tonumber(f['est']) or 0)
  else
    redis.call('RPUSH', KEYS[4], redis.call('XADD', KEYS[3], '*', 'v', f['v'], 'job', f['job'], 'stream', KEYS[i], 'est', f['est']))
  end
end
-- the status in one write: the request's fields and what this admitted
local fields = {'admitted_n', now_n, 'admitted_s', tostring(admitted_s), 'staged', add_n - now_n}
for k, v in pairs(cjson.decode(ARGV[5])) do fields[#fields + 1], fields[#fields + 2] = k, tostring(v) end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], ARGV[4])
if add_n > now_n then
  redis.call('EXPIRE', KEYS[4], ARGV[4])
  redis.call('ZADD', KEYS[5], tonumber(ARGV[8]) + 0.25, ARGV[7])
end
-- the lane's counters in one write (read above, in this same atomic step)
redis.call('HSET', KEYS[2], 'n', n + add_n, 's', string.format('%.17g', s + add_s), 'q', (tonumber(counts[3] or '0') or 0) + now_n)
return {1, n + add_n, tostring(s + add_s)}
"""

# ARGV: prefix, now, idle_ahead, at most this many jobs. The workers' periodic sweep: admits for the jobs
# whose next segment fell due (a listener plays on between publishes); when nothing waits in the interactive streams
# (an idle farm), for any job with staged segments. Returns how many segments it admitted, -1 when no job has staged
# segments (the sweep may then wait longer).
ADMIT_DUE = ADMISSION_FUNCTIONS + """
local prefix, now = ARGV[1], tonumber(ARGV[2])
local k_due = prefix .. ':admission_due'
if redis.call('ZCARD', k_due) == 0 then return -1 end  -- no job has staged segments (an idle farm's sweep)
local jobs = redis.call('ZRANGEBYSCORE', k_due, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
if #jobs == 0 and (tonumber(redis.call('HGET', prefix .. ':backlog:interactive', 'q') or '0') or 0) <= 0 then
  jobs = redis.call('ZRANGE', k_due, 0, tonumber(ARGV[4]) - 1)
end
local added = 0
for _, job in ipairs(jobs) do added = added + admit_next(prefix, job, now, tonumber(ARGV[3]), 0) end
return added
"""

# Cancels each job whose status hash is in KEYS unless it has ended (one job's cancel, a book's); ARGV: now, prefix,
# then each job's id. Atomic, so a worker's finish cannot slip between the check and the write; a cancelled job's
# staged segments are dropped with it. Returns per key -1 (no such job), 0 (had ended), 1 (cancelled).
CANCEL = ADMISSION_FUNCTIONS + """
local out = {}
for i, key in ipairs(KEYS) do
  local state = redis.call('HGET', key, 'state')
  if not state then
    out[i] = -1
  elseif final_state(state) then
    out[i] = 0
  else
    redis.call('HSET', key, 'state', 'cancelled', 'finished', ARGV[1])
    local lane = redis.call('HGET', key, 'lane')
    if lane then drop_staged(ARGV[2], ARGV[i + 2], lane) end
    out[i] = 1
  end
end
return out
"""

# A job whose text is appended while it plays (``producer.appending``): opened with no segments and no known total (its
# status has ``open`` 1, ``total`` 0), its segments appended as its text's sentences finish, its total set at its
# close. Its segment records carry total 0: the worker reads the job's total from the status when a segment ends
# (``publish_piece``), so the job is finished by whichever segment ends last after the close.

# KEYS: status. ARGV: ttl, the request's fingerprint, then status field/value pairs. Idempotent like ``ADMIT``: 1
# opened, 2 the same request had opened it (a retry after a lost reply), 3 the id is another request's.
OPEN_JOB = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'fingerprint') == ARGV[2] then return 2 end
  return 3
end
local pairs = {}
for i = 3, #ARGV do pairs[#pairs + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS: status, lane backlog hash, one bucket stream per appended segment, then (when ARGV[7] is not '') the closer's
# bucket stream. ARGV: max_n, max_s, add_s, ttl, the first appended segment's number, 1 to close
# the job (its total: every segment appended so far), the closer record's json ({"v", "job"}: the job's last segment
# with ``closing`` set, or ''), then per segment its json ({"v", "job"}). The segments count against the lane's
# backlog limit like ``ADMIT``'s and go to their bucket streams at once (no staging: text arrives as it is written).
# A close after every segment was done queues the closer, so that a worker finishes the job (no publish is left to see
# the total). Answers {status, lane segments, lane seconds}: 1 appended, 2 already appended (a retry after a lost
# reply), 0 the lane is full (nothing written), -1 no such job, -2 the job ended (its state in place of the seconds),
# -3 closed already, -4 out of order (the segments appended so far in place of the lane segments), -5 a close with
# no segment at all.
APPEND_SEGMENTS = ADMISSION_FUNCTIONS + """
local st = redis.call('HMGET', KEYS[1], 'state', 'open', 'appended')
if not st[1] then return {-1, 0, '0'} end
local appended, first, add_n = tonumber(st[3] or '0') or 0, tonumber(ARGV[5]), #ARGV - 7
local closing, is_open = ARGV[6] == '1', st[2] == '1'
if (add_n > 0 and first + add_n <= appended) or (closing and not is_open and first + add_n == appended) then
  return {2, 0, '0'}
end
if final_state(st[1]) then return {-2, 0, st[1]} end
if not is_open then return {-3, 0, '0'} end
if first ~= appended then return {-4, appended, '0'} end
if closing and appended + add_n == 0 then return {-5, 0, '0'} end
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local s = tonumber(redis.call('HGET', KEYS[2], 's') or '0')
local max_n, max_s, add_s = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if add_n > 0 and n > 0 and ((max_n > 0 and n + add_n > max_n) or (max_s > 0 and s + add_s > max_s)) then
  return {0, n, tostring(s)}
end
for i = 1, add_n do
  local f = cjson.decode(ARGV[7 + i])
  redis.call('XADD', KEYS[2 + i], '*', 'v', f['v'], 'job', f['job'])
end
appended = appended + add_n
redis.call('HSET', KEYS[1], 'appended', appended, 'admitted_n', appended)
redis.call('HINCRBYFLOAT', KEYS[1], 'est_seconds', add_s)
redis.call('EXPIRE', KEYS[1], ARGV[4])
if add_n > 0 then
  redis.call('HINCRBY', KEYS[2], 'n', add_n)
  redis.call('HINCRBYFLOAT', KEYS[2], 's', add_s)
  redis.call('HINCRBY', KEYS[2], 'q', add_n)
end
if closing then
  redis.call('HSET', KEYS[1], 'total', appended)
  redis.call('HDEL', KEYS[1], 'open')
  if add_n == 0 and ARGV[7] ~= '' and (tonumber(redis.call('HGET', KEYS[1], 'done') or '0') or 0) >= appended then
    local f = cjson.decode(ARGV[7])
    redis.call('XADD', KEYS[#KEYS], '*', 'v', f['v'], 'job', f['job'])
    redis.call('HINCRBY', KEYS[2], 'n', 1)  -- acked like any segment (its est_s is 0)
    redis.call('HINCRBY', KEYS[2], 'q', 1)
  end
end
return {1, n + add_n, tostring(s + add_s)}
"""
