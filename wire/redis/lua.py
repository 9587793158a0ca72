"""The Lua scripts of the Redis wire's steps: the queue's heads, a batch's start, its pieces published (with a
streamed segment's claim, and the admission they allow inside), acks, a job's end, results read, dead letters
requeued, a book's segments. A job's admission (submit, sweep, cancel, text appended) is in ``wire.redis.lua_admission``. Each
runs atomically on the server; the comment above each says its KEYS and ARGV. ``wire.redis.broker.RedisBroker``
runs the broker's steps with them; another broker implements the same steps its own way.
"""

from __future__ import annotations

from wire.redis.lua_admission import ADMISSION_FUNCTIONS
from wire.records import FINAL, RESULTS_SLACK_S

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

# The heads a consumer may take, in one step. KEYS: queue streams. ARGV: the group, then per stream the group's
# last-delivered id as the caller last read it ('' if unknown). A stream with no entry after that id (one XREAD over
# all of them) has nothing undelivered: the group's id only moves on, so it is at or past it. Only the others are
# asked for the group's id (XINFO GROUPS, one per stream); where it is still the caller's, the entries that XREAD
# read are the heads (no XRANGE). Returns {ids, lag, heads}: ids per stream, the group's
# last-delivered id (or the caller's, with nothing after it; '' where the stream or the group is missing); lag:
# entries not yet delivered over the streams, where Redis knows it; heads: per stream with undelivered entries {stream,
# its first two} (read as XRANGE returns them). Delivered entries are never needed: a stream holds only what is pending
# or undelivered.
HEADS = """
local ids, heads, lag = {}, {}, 0

local function peek(i, key, seen, after)  -- the group's id on the stream, and its undelivered head
  local groups = redis.pcall('XINFO', 'GROUPS', key)
  local last, known = '', false
  if type(groups) == 'table' and not groups.err then
    for _, g in ipairs(groups) do
      local name, delivered, behind = nil, nil, nil
      for j = 1, #g, 2 do
        if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then delivered = g[j + 1]
        elseif g[j] == 'lag' then behind = g[j + 1] end
      end
      if name == ARGV[1] then
        last = delivered
        if type(behind) == 'number' then
          lag, known = lag + behind, behind == 0
        end
      end
    end
  end
  ids[i] = last
  if last ~= '' and not known then
    local entries = seen  -- what the XREAD below read after the caller's id, if that is still the group's
    if last ~= after or not seen then entries = redis.call('XRANGE', key, '(' .. last, '+', 'COUNT', 2) end
    if #entries > 0 then heads[#heads + 1] = {key, entries} end
  end
end

local read, after, moved = {'XREAD', 'COUNT', 2, 'STREAMS'}, {}, {}
for i, key in ipairs(KEYS) do
  if ARGV[i + 1] ~= '' then
    read[#read + 1], after[#after + 1] = key, ARGV[i + 1]
  end
end
if #after > 0 then
  for _, id in ipairs(after) do read[#read + 1] = id end
  for _, got in ipairs(redis.call(unpack(read)) or {}) do moved[got[1]] = got[2] end
end
for i, key in ipairs(KEYS) do
  if ARGV[i + 1] ~= '' and not moved[key] then ids[i] = ARGV[i + 1] else peek(i, key, moved[key], ARGV[i + 1]) end
end
return {ids, lag, heads}
"""

# Pieces of segments published, one after the other in one step (a window step's pieces): per piece its chunk record
# (the piece's chunks in one entry), its PCM for the job's assembly (the record's pcm, in the parts hash under
# 'seg:piece', unless the job is this one segment: the audio is sent once), the job's playback clock (a piece already there, by the segment's 'windows:seg'
# count, is a repeat: its first copy stays and its chunks are not sent again), the entries the job's results stream was
# ever given (the status's 'results_entries', with FINALIZE's final record; each record carries its number in 'entry',
# so a reader tells by a gap what trimming took: ``producer.reader``), and with the segment's first end its
# words (in the parts hash under 'words:seg', one HSET with the piece) and its count in the status's 'done' (the end's
# 'batch:seg' marks it counted, once); then the job's next segments admitted if this audio made them due
# (``admit_next``, the same step as the audio). A piece of a job that ended (a client's cancel) writes nothing. A
# streamed segment's first piece from an attempt carries the attempt's claim ('tag|replay record', and the frames of a
# voice that cannot make them again): the first claim is written into the status ('claim:seg') with the piece, its
# frames into the frames hash; a piece whose claim finds another attempt's writes nothing and gets that claim back. A
# claim and the pieces it covers are written by one script, so they replicate together: a failover never keeps pieces
# whose claim it lost. KEYS: per piece its job's status, results, parts, frames. ARGV: results maxlen, ttl, now, then
# per piece: seg, piece (its index in the segment), seconds, chunks (records: 0 or 1), claim ('' for none), its frames
# ('' for none), then per record the count of its field/value items and those items; then 1 with the segment's end
# (else 0) and its words json, batch id, worker, the job's segment count, 1 if its claim stored frames (the end drops
# them); then the admission: prefix, job id, idle_ahead ('' when the job has nothing staged); then 1 to copy the
# piece's PCM into the parts hash (0: the job is this one segment, all its records kept in its results stream, where
# ``job_output`` reads them). Returns per piece
# {first_chunk, delivered_s, segments done, state, the job's total as its status holds it (an appended job's, once
# closed), 1 when this ended the job's last segment (its parts are read by the caller, outside the script), 2 when
# the job is this one piece (its parts are what was sent), 3 when the job's last segment was ended before (a redo:
# the parts an earlier attempt left are read), then 1 written (0: the job had ended, 2: the claim lost) and, for a
# lost claim, the holder's tag, replay record, frames ('' if none, or once the segment ended), windows published, 1
# once the segment was published whole}
# (first_chunk and delivered_s '' without chunks; done 0 without the end).
PUBLISH_PIECES = ADMISSION_FUNCTIONS + """
local maxlen, ttl, now = ARGV[1], ARGV[2], ARGV[3]

local function publish(k, at)
  local k_status, k_results, k_parts, k_frames = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local seg, piece, seconds, chunks = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local claim, claim_frames = ARGV[at + 4], ARGV[at + 5]
  at = at + 6
  local records, pcm = {}, {}
  for c = 1, chunks do
    local width, fields = tonumber(ARGV[at]), {}
    for i = 1, width do fields[i] = ARGV[at + i] end
    for i = 1, width, 2 do
      if fields[i] == 'pcm' then pcm[#pcm + 1] = fields[i + 1] end
    end
    records[c] = fields
    at = at + width + 1
  end
  local st = redis.call('HMGET', k_status, 'first_chunk', 'state', 'total', 'delivered_s', 'done', 'batch:' .. seg,
                        'windows:' .. seg, 'claim:' .. seg, 'results_entries')
  local first, delivered, state = st[1], '', st[2] or ''
  local done, windows = tonumber(st[5] or '0') or 0, tonumber(st[7] or '0') or 0
  if final_state(state) then  -- the job ended (a client's cancel): nothing of it is written
    return {first or '', st[4] or '0', done, state, st[3] or '0', 0, 0, '', '', '', 0, 0}, at + 10
  end
  local status, parts = {}, {}
  if claim ~= '' then
    if st[8] and st[8] ~= claim then  -- another attempt holds the segment: what it left, and nothing written
      local tag, held = string.match(st[8], '^(.*)|([^|]*)$')
      local ended, stored = 0, ''
      if st[6] then ended = 1 else stored = redis.call('HGET', k_frames, seg) or '' end
      return {first or '', st[4] or '0', done, state, st[3] or '0', 0, 2, tag, held, stored, windows, ended}, at + 10
    end
    if not st[8] then
      status[1], status[2] = 'claim:' .. seg, claim
      if claim_frames ~= '' then  -- frames live while the segment runs
        redis.call('HSET', k_frames, seg, claim_frames)
        redis.call('EXPIRE', k_frames, ttl)
      end
    end
  end
  -- the first copy of a piece stays: a repeat (a step retried after a lost reply, or a reclaimed segment redone
  -- by its attempt) may differ in rounding, and readers keep the first copy they saw
  local wrote = chunks > 0 and piece >= windows
  if wrote then
    if ARGV[at + 9] == '1' then parts[1], parts[2] = seg .. ':' .. piece, table.concat(pcm) end
    local entry = tonumber(st[9] or '0') or 0
    for c, fields in ipairs(records) do  -- each numbered: a reader tells by a gap what trimming took
      redis.call('XADD', k_results, 'MAXLEN', '~', maxlen, '*', 'entry', entry + c, unpack(fields))
    end
    -- the job's first chunk made the stream: it expires RESULTS_SLACK_S past the TTL (when, in 'results_expire'), so
    -- a job that ends within half that keeps its results a TTL after its end without FINALIZE setting it again
    if not first then
      local keep = ttl + """ + str(RESULTS_SLACK_S) + """
      redis.call('EXPIRE', k_results, keep)
      status[#status + 1], status[#status + 2] = 'results_expire', string.format('%.17g', tonumber(now) + keep)
    end
    -- the job's playback clock: audio delivered by every worker, and when its first chunk went out
    delivered = string.format('%.17g', (tonumber(st[4] or '0') or 0) + seconds)
    for _, kv in ipairs({'delivered_s', delivered, 'windows:' .. seg, piece + 1,
                         'results_entries', (tonumber(st[9] or '0') or 0) + #records}) do status[#status + 1] = kv end
  elseif chunks > 0 then
    delivered = st[4] or '0'
  end
  local ending, output = tonumber(ARGV[at]), 0
  if (chunks > 0 or ending == 1) and not first then
    first = now
    status[#status + 1], status[#status + 2] = 'first_chunk', now
  end
  local counted = false
  if ending == 1 then
    if ARGV[at + 5] == '1' then redis.call('HDEL', k_frames, seg) end  -- frames live while the segment runs
    if not st[6] then  -- the segment's first end counts ('batch:seg' is written with the status below)
      done, counted = done + 1, true
      parts[#parts + 1], parts[#parts + 2] = 'words:' .. seg, ARGV[at + 1]
      for _, kv in ipairs({'batch:' .. seg, ARGV[at + 2], 'worker:' .. seg, ARGV[at + 3], 'done', done}) do
        status[#status + 1] = kv
      end
    end
  end
  local whole, total = false, 0  -- whether this ended the job's last segment
  if ending == 1 then
    -- an appended job's records say 0 until it is closed; its status then holds the total
    total = tonumber(ARGV[at + 4]) or 0
    if total == 0 then total = tonumber(st[3] or '0') or 0 end
    whole = total > 0 and done >= total
  end
  -- the job is whole: the caller reads its parts with a plain HGETALL (not here: every byte read into a script
  -- becomes a Lua string, hashed whole, about 1.2 us per KB), or, a job of this piece alone, has them (what it sent)
  if whole and counted and total == 1 and piece == 0 and wrote then
    output = 2
  elseif whole and counted then
    output = 1
  elseif whole then  -- an earlier attempt's end counted (this is a redo): what readers heard is what that one stored
    output = 3
  end
  if #parts > 0 then redis.call('HSET', k_parts, unpack(parts)) end
  -- the first segment done: the parts expire, unless that ended the job (FINALIZE deletes them, and acks the entry that
  -- ended it, in one step; an end that failed before it leaves the entry to a reclaim, which ends the job again)
  if counted and done == 1 and not whole then redis.call('EXPIRE', k_parts, ttl) end
  if #status > 0 then redis.call('HSET', k_status, unpack(status)) end
  if ARGV[at + 8] ~= '' then admit_next(ARGV[at + 6], ARGV[at + 7], tonumber(now), tonumber(ARGV[at + 8]), ending) end
  return {first or '', delivered, done, state, st[3] or '0', output, 1, '', '', '', 0, 0}, at + 10
end

local out, at = {}, 4
for k = 1, #KEYS, 4 do
  out[#out + 1], at = publish(k, at)
end
return out
"""

# Entries acked, a step of its own (``ACK``) or the end of the job whose last segment they carry (``FINALIZE``):
# ``ack_entries(group, keys, args, at)`` over ``keys`` (the entries' queue streams, one per entry) and, from ``args[at]``,
# per entry its id, its lane's backlog hash key ('' for an entry that never parsed) and its predicted seconds. Acks each
# entry (one XACK each: its reply says whether that entry counted) and deletes them, one XDEL per stream (the group is
# the only reader: a finished entry would otherwise stay for ever); those whose XACK counted leave their lane's
# counters, all of them and those in its bucket streams (q), once even if redelivered. Never below zero (entries
# written around the SDK). Returns how many XACKs counted.
ACK_FUNCTIONS = """
local function ack_entries(group, keys, args, at)
  local tally, lanes, acked, gone, streams = {}, {}, 0, {}, {}
  for i, stream in ipairs(keys) do
    local id, backlog, est = args[at + 3 * i - 3], args[at + 3 * i - 2], tonumber(args[at + 3 * i - 1]) or 0
    local n = redis.call('XACK', stream, group, id)
    if not gone[stream] then
      gone[stream] = {}
      streams[#streams + 1] = stream
    end
    table.insert(gone[stream], id)
    acked = acked + n
    if n == 1 and backlog ~= '' then
      if not tally[backlog] then
        tally[backlog] = {0, 0}
        lanes[#lanes + 1] = backlog
      end
      tally[backlog][1] = tally[backlog][1] + 1
      tally[backlog][2] = tally[backlog][2] + est
    end
  end
  for _, stream in ipairs(streams) do redis.call('XDEL', stream, unpack(gone[stream])) end
  for _, backlog in ipairs(lanes) do
    local now = redis.call('HMGET', backlog, 'n', 's', 'q')
    local count, seconds = tally[backlog][1], tally[backlog][2]
    local n = tonumber(now[1] or '0') - count
    local s = tonumber(now[2] or '0') - seconds
    local q = tonumber(now[3] or '0') - count
    redis.call('HSET', backlog, 'n', math.max(n, 0), 's', math.max(s, 0), 'q', math.max(q, 0))
  end
  return acked
end
"""

# KEYS: the entries' queue streams, one per entry. ARGV: the group, then per entry its id, its lane's backlog hash key
# and its predicted seconds (``ack_entries``).
ACK = ACK_FUNCTIONS + """
return ack_entries(ARGV[1], KEYS, ARGV, 2)
"""

# KEYS: status, results, parts, stream, lane backlog. ARGV: force, ttl, v, job json, max_n, max_s,
# est_s, then status field/value pairs. Admission is ``ADMIT``'s, one segment at a time: a full
# lane answers 'full' and the runner offers the segment again later.
SUBMIT_BOOK_SEGMENT = """
local st = redis.call('HGET', KEYS[1], 'state')
if st == 'queued' or st == 'running' then return st end
if st == 'done' and ARGV[1] ~= '1' then return st end
local n = tonumber(redis.call('HGET', KEYS[5], 'n') or '0')
local s = tonumber(redis.call('HGET', KEYS[5], 's') or '0')
local max_n, max_s, add_s = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if n > 0 and ((max_n > 0 and n + 1 > max_n) or (max_s > 0 and s + add_s > max_s)) then return 'full' end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local pairs = {}
for i = 8, #ARGV do pairs[#pairs + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(pairs))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('XADD', KEYS[4], '*', 'v', ARGV[3], 'job', ARGV[4])
redis.call('HINCRBY', KEYS[5], 'n', 1)
redis.call('HINCRBYFLOAT', KEYS[5], 's', add_s)
redis.call('HINCRBY', KEYS[5], 'q', 1)
return 'submitted'
"""

# KEYS: status, results, the queue streams of the entries acked with the end (ARGV[9] of them: the entry whose segment
# ended the job, acked in the same step), then what the job keeps only while it runs, deleted when this ends it
# (parts, frames; none to keep them). ARGV: state, the final record and the one to write instead if a client's cancel
# won the race (each the flat JSON list of ``records.final_record``), results maxlen, ttl, prefix, job id, the time,
# how many entries to ack, the group, per entry its id, backlog key and predicted seconds (``ack_entries``), then
# field/value pairs for status. The entries are acked whatever the end finds (a job that ended already too). A
# client's cancel wins over a finish that races it: the job then ends cancelled, whatever was made. A job that ends
# otherwise than done drops its staged segments. The results stream keeps a TTL after the end: set here unless the
# expiry the first chunk set ('results_expire', RESULTS_SLACK_S past the TTL) still covers it with half the slack to
# spare (workers' clocks may differ). The final record counts in the status's
# 'results_entries' (see PUBLISH_PIECES).
FINALIZE = ADMISSION_FUNCTIONS + ACK_FUNCTIONS + """
local acks = tonumber(ARGV[9])
if acks > 0 then ack_entries(ARGV[10], {unpack(KEYS, 3, 2 + acks)}, ARGV, 11) end
local now = redis.call('HMGET', KEYS[1], 'final', 'state', 'lane', 'results_expire', 'results_entries')
if now[1] then return 0 end  -- ended already ('final' is written below: read and write are one step in a script)
local state, record = ARGV[1], ARGV[2]
local lane = now[3]
local entries = (tonumber(now[5] or '0') or 0) + 1  -- the final record is one more entry of the results stream
if now[2] == 'cancelled' and state ~= 'cancelled' then
  state = 'cancelled'
  record = ARGV[3]
  redis.call('HSET', KEYS[1], 'final', '1', 'results_entries', entries)
else
  local status = {}
  for i = 11 + 3 * acks, #ARGV do status[#status + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'final', '1', 'state', state, 'results_entries', entries, unpack(status))
end
if state ~= 'done' and lane then drop_staged(ARGV[6], ARGV[7], lane) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'entry', entries, unpack(cjson.decode(record)))
local expires = tonumber(now[4] or '')
if not expires or expires < tonumber(ARGV[8]) + tonumber(ARGV[5]) + """ + str(RESULTS_SLACK_S // 2) + """ then
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
if #KEYS > 2 + acks then redis.call('DEL', unpack(KEYS, 3 + acks)) end
if state == 'cancelled' and ARGV[1] ~= 'cancelled' then return 2 end
return 1
"""

# A batch's segments start: KEYS: each segment's job status; ARGV: now, worker, then per key 1 if the segment may start
# (0: its deadline passed) and when the worker claimed it. Per key its job's state as read ('' for none) and 1 where
# this marked the job's first start (started once, running over queued only, never over a state written meanwhile, so
# a client's cancel read here stands; the worker and its claim time kept); a job that ended is not marked.
START_SEGMENTS = ADMISSION_FUNCTIONS + """
local out = {}
for i, key in ipairs(KEYS) do
  local st = redis.call('HMGET', key, 'state', 'started')  -- read, then written below: one step, as the script is
  local state = st[1] or ''
  local first = 0
  if ARGV[2 * i + 1] == '1' and not final_state(state) and not st[2] then
    if state == 'queued' then
      redis.call('HSET', key, 'started', ARGV[1], 'state', 'running', 'worker', ARGV[2], 'claimed', ARGV[2 * i + 2])
    else
      redis.call('HSET', key, 'started', ARGV[1], 'worker', ARGV[2], 'claimed', ARGV[2 * i + 2])
    end
    first = 1
  end
  out[#out + 1] = state
  out[#out + 1] = first
end
return out
"""

# KEYS: dead-letter stream, the job's status, its results stream, the queue stream to requeue on, its lane's backlog
# hash. ARGV: the dead
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
      if f[i + 1] == '{FINAL}' then  -- its number is the next record's: no gap for a reader to take for trimming
        redis.call('XDEL', KEYS[3], entry[1])
        redis.call('HINCRBY', KEYS[2], 'results_entries', -1)
      end
      break
    end
  end
end
local job = {{}}
for i = 2, #ARGV do job[#job + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[4], '*', unpack(job))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[5], 'n', 1)  -- queued again: on its lane's backlog until a worker acks it
redis.call('HINCRBY', KEYS[5], 'q', 1)
return id
"""
