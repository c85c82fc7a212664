//! The Lua scripts of the Redis store: each is `prelude.lua` (arguments, key layout and the
//! helpers that keep counters, caps, retention and tombstones) followed by one operation.
//! Redis runs a script atomically, so each operation's checks and writes are one step for
//! every node; scripts are sent by SHA (EVALSHA) and loaded again when Redis has forgotten
//! them (after a restart).
//!
//! Replies are a status string first (`ok`, `unknown`, `completed`, `expired`, …), then the
//! operation's values. Those that may evict live events for the caps (CREATE, APPEND,
//! APPEND_MANY) answer `ok` with the evicted streams first: a flat list of stream id and its
//! first seq after the eviction.

/// Creates a stream with its priming event. ARGV: stream, principal, session, kind (`r` or
/// `s`), request ids (JSON), node id, the priming frame as a chunk of one (`store/chunk.rs`).
/// Reply: `ok` and the evicted streams, or `too_many`.
pub(super) const CREATE: &str = concat!(
    include_str!("prelude.lua"),
    r"
local s, principal, sess, kind = ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local requests, node, chunk = ARGV[11], ARGV[12], ARGV[13]
expire(sess, now_ms())
-- Completed streams make room for new ones; only live streams count against the cap in the
-- end, so a busy session is not refused for what it already finished.
local evicted = false
while tonumber(redis.call('HGET', k_usage(sess), 'streams') or 0) >= MAX_STREAMS do
  if not evict_oldest_completed(sess) then
    if evicted then compact(sess) end
    return {'too_many'}
  end
  evicted = true
end
if evicted then compact(sess) end
local len = string.len(chunk) - CHUNK_LENGTH_BYTES
redis.call('HSET', k_stream(s), 'p', principal, 'sess', sess, 'kind', kind, 'req', requests,
  'node', node, 'done', 0, 'first', 0, 'next', 1, 'ev', 1, 'by', len)
redis.call('XADD', k_events(s), '1-0', 'n', 1, 'c', chunk)
redis.call('SADD', k_streams(sess), s)
local u = k_usage(sess)
redis.call('HINCRBY', u, 'streams', 1)
redis.call('HINCRBY', u, 'events', 1)
redis.call('HINCRBY', u, 'bytes', len)
redis.call('RPUSH', k_appended(sess), s .. ' 0 0 ' .. len)
if kind == 'r' then
  redis.call('SADD', k_open(node), s)
  -- Known even if the node dies before its next heartbeat, so its streams are claimed.
  redis.call('SADD', K_NODES, node)
end
evict_to_caps(sess)
return {'ok', evicted_list()}
"
);

/// Appends one frame built for seq ARGV[8]: stored only if that is the stream's next seq
/// (reply `ok` and the evicted streams), else the reply is `seq` and the next seq, and the
/// caller builds the frame again. ARGV: stream, seq, the frame as a chunk of one.
pub(super) const APPEND: &str = concat!(
    include_str!("prelude.lua"),
    r"
local s, seq, chunk = ARGV[7], ARGV[8], ARGV[9]
local ks = k_stream(s)
local sess = redis.call('HGET', ks, 'sess')
if not sess then return {gone_for_writer(s)} end
expire(sess, now_ms())
local h = redis.call('HMGET', ks, 'done', 'next')
if not h[1] then return {gone_for_writer(s)} end
if h[1] == '1' then return {'completed'} end
if tonumber(seq) ~= tonumber(h[2]) then return {'seq', tonumber(h[2])} end
local len = string.len(chunk) - CHUNK_LENGTH_BYTES
if len > MAX_BYTES then return {'too_large'} end
redis.call('XADD', k_events(s), '1-' .. seq, 'n', 1, 'c', chunk)
redis.call('HINCRBY', ks, 'next', 1)
redis.call('HINCRBY', ks, 'ev', 1)
redis.call('HINCRBY', ks, 'by', len)
local u = k_usage(sess)
redis.call('HINCRBY', u, 'events', 1)
redis.call('HINCRBY', u, 'bytes', len)
redis.call('RPUSH', k_appended(sess), s .. ' ' .. seq .. ' ' .. seq .. ' ' .. len)
-- The new event is the session's newest and fits the caps alone, so eviction stops before
-- reaching it.
evict_to_caps(sess)
wake(s)
return {'ok', evicted_list()}
"
);

/// Appends many chunks of frames in order, as the pipeline queued them
/// (`store/pipeline.rs`, `store/chunk.rs`). ARGV from 7: groups of six: stream, the chunk's
/// first seq, its event count, its frame bytes, its frame lengths (comma-separated), the
/// chunk. A run of consecutive groups of one stream is checked, counted, logged, capped and
/// announced once; each chunk is stored only if its first seq is the stream's next (the
/// pipeline has checked each frame against the caps). Reply: `ok`, the evicted streams, then
/// for each run its stream, its status (`ok`, `completed`, `unknown` or `seq`: the chunks of
/// the run from the first refused one on are not stored) and the stream's next seq after the
/// run.
pub(super) const APPEND_MANY: &str = concat!(
    include_str!("prelude.lua"),
    r"
local out = {'ok', {}}
local n = #ARGV
local i = 7
local now = now_ms()
while i <= n do
  local s = ARGV[i]
  local last = i
  while last + 6 <= n and ARGV[last + 6] == s do last = last + 6 end
  local ks = k_stream(s)
  local sess = redis.call('HGET', ks, 'sess')
  local status, next = 'ok', 0
  local h = {}
  if sess then
    expire(sess, now)
    h = redis.call('HMGET', ks, 'done', 'next')
  end
  if not sess or not h[1] then
    status = gone_for_writer(s)
  elseif h[1] == '1' then
    status = 'completed'
  else
    next = tonumber(h[2])
    local count, bytes, log = 0, 0, {}
    for k = i, last, 6 do
      local first, events = tonumber(ARGV[k + 1]), tonumber(ARGV[k + 2])
      if first ~= next then status = 'seq' break end
      redis.call('XADD', k_events(s), '1-' .. first, 'n', events, 'c', ARGV[k + 5])
      next = next + events
      count = count + events
      bytes = bytes + tonumber(ARGV[k + 3])
      log[#log + 1] = s .. ' ' .. first .. ' ' .. (next - 1) .. ' ' .. ARGV[k + 4]
    end
    if count > 0 then
      redis.call('HSET', ks, 'next', next)
      redis.call('HINCRBY', ks, 'ev', count)
      redis.call('HINCRBY', ks, 'by', bytes)
      local u = k_usage(sess)
      redis.call('HINCRBY', u, 'events', count)
      redis.call('HINCRBY', u, 'bytes', bytes)
      for b = 1, #log, 1000 do
        redis.call('RPUSH', k_appended(sess), unpack(log, b, math.min(b + 999, #log)))
      end
      -- Evicting once after the run keeps the same events as evicting after each one:
      -- eviction takes the oldest first, and the run only adds.
      evict_to_caps(sess)
      wake(s)
    end
  end
  out[#out + 1] = s
  out[#out + 1] = status
  out[#out + 1] = next
  i = last + 6
end
out[2] = evicted_list()
return out
"
);

/// Marks a stream complete (idempotent: a second completion does not restart retention).
/// ARGV: stream.
pub(super) const COMPLETE: &str = concat!(
    include_str!("prelude.lua"),
    r"
local s = ARGV[7]
local ks = k_stream(s)
local sess = redis.call('HGET', ks, 'sess')
local function gone()
  if redis.call('HEXISTS', K_TOMB, s) == 1 then return {'ok'} end
  return {'unknown'}
end
if not sess then return gone() end
local now = now_ms()
expire(sess, now)
local h = redis.call('HMGET', ks, 'done', 'kind', 'node')
if not h[1] then return gone() end
if h[1] ~= '1' then
  redis.call('HSET', ks, 'done', 1, 'at', now)
  redis.call('RPUSH', k_completed(sess), s)
  redis.call('ZADD', K_DUE, 'NX', now, sess)
  if h[2] == 'r' then redis.call('SREM', k_open(h[3]), s) end
  wake(s)
end
return {'ok'}
"
);

/// Reads a stream for its owner. ARGV: stream, principal, session, first seq to read (empty:
/// none, only the state), events wanted. Reply: `ok`, complete (0 or 1), the XRANGE entries
/// from the one holding the first seq on, until they hold the events wanted from it or the
/// stream ends (the first entry may begin before it).
pub(super) const READ: &str = concat!(
    include_str!("prelude.lua"),
    r"
local s, principal, sess, from, count = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local h = redis.call('HMGET', k_stream(s), 'p', 'sess', 'done', 'at', 'first')
if not h[2] then
  -- Gone: a tombstone of this owner says it expired.
  if redis.call('HGET', K_TOMB, s) == sess .. ' ' .. principal then return {'expired'} end
  return {'unknown'}
end
-- MCP 2025-11-25 transports: MUST NOT replay another stream's messages; a foreign stream
-- looks like no stream at all.
if h[1] ~= principal or h[2] ~= sess then return {'unknown'} end
local complete = 0
if h[3] == '1' then
  complete = 1
  -- Past retention reads as expired even before anything removed it.
  if now_ms() - tonumber(h[4]) >= RETENTION then return {'expired'} end
end
if from == '' then return {'ok', complete, {}} end
from, count = tonumber(from), tonumber(count)
if from < tonumber(h[5]) then return {'expired'} end
local k = k_events(s)
local start = '1-' .. from
local holder = redis.call('XREVRANGE', k, start, '-', 'COUNT', 1)
if holder[1] then start = holder[1][1] end
-- Pages of 2, 4, 8 … entries: a chunk holds up to hundreds of events, so the first page
-- usually suffices, while a stream of one-event entries still takes few calls.
local entries, got, page_size = {}, 0, 2
while got < count do
  local page = redis.call('XRANGE', k, start, '+', 'COUNT', page_size)
  for _, entry in ipairs(page) do
    entries[#entries + 1] = entry
    local first, events = entry_span(entry)
    local last = first + events - 1
    if last >= from then got = got + last - math.max(first, from) + 1 end
    if got >= count then break end
  end
  if #page < page_size then break end
  start = '(' .. page[#page][1]
  page_size = math.min(2 * page_size, READ_PAGE)
end
return {'ok', complete, entries}
"
);

/// Drops everything of a session. ARGV: session. Reply: `ok`, the removed stream ids.
pub(super) const REMOVE_SESSION: &str = concat!(
    include_str!("prelude.lua"),
    r"
local sess = ARGV[7]
local streams = redis.call('SMEMBERS', k_streams(sess))
for _, s in ipairs(streams) do
  local h = redis.call('HMGET', k_stream(s), 'kind', 'node', 'done')
  if h[1] == 'r' and h[3] ~= '1' then redis.call('SREM', k_open(h[2]), s) end
  redis.call('DEL', k_stream(s), k_events(s))
  wake(s)
end
for _, s in ipairs(redis.call('SMEMBERS', k_tombs(sess))) do redis.call('HDEL', K_TOMB, s) end
redis.call('DEL', k_streams(sess), k_usage(sess), k_completed(sess), k_appended(sess),
  k_tombs(sess))
redis.call('ZREM', K_DUE, sess)
return {'ok', streams}
"
);

/// A session's usage, after expiring what is past retention. ARGV: session. Reply: `ok`,
/// streams, events, bytes.
pub(super) const USAGE: &str = concat!(
    include_str!("prelude.lua"),
    r"
local sess = ARGV[7]
expire(sess, now_ms())
local h = redis.call('HMGET', k_usage(sess), 'streams', 'events', 'bytes')
return {'ok', tonumber(h[1] or 0), tonumber(h[2] or 0), tonumber(h[3] or 0)}
"
);

/// Expires the completed streams past retention of up to ARGV[7] sessions, oldest due
/// first, for sessions nobody touches. Reply: `ok`, sessions visited.
pub(super) const SWEEP: &str = concat!(
    include_str!("prelude.lua"),
    r"
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', K_DUE, '-inf', now - RETENTION, 'LIMIT', 0, ARGV[7])
for _, sess in ipairs(due) do
  expire(sess, now)
  refresh_due(sess)
end
return {'ok', #due}
"
);

/// Opens this node's lease and collects what an earlier process under the same node id left
/// open, in one step: once the heartbeat is set no other node claims this node's streams, and
/// streams another node claimed while the lease had lapsed are no longer in this node's set.
/// ARGV: node, lease (ms). Reply: `ok`, then `<stream> <principal> <session> <request ids>`
/// of each incomplete Request stream, flat; entries of streams complete or gone are dropped.
pub(super) const NODE_OPEN: &str = concat!(
    include_str!("prelude.lua"),
    r"
local node, lease = ARGV[7], ARGV[8]
redis.call('SET', k_node(node), '1', 'PX', lease)
redis.call('SADD', K_NODES, node)
local out = {}
local open = k_open(node)
for _, s in ipairs(redis.call('SMEMBERS', open)) do
  if not add_orphan(out, s) then redis.call('SREM', open, s) end
end
return {'ok', out}
"
);

/// Renews this node's lease. ARGV: node, lease (ms).
pub(super) const HEARTBEAT: &str = concat!(
    include_str!("prelude.lua"),
    r"
redis.call('SET', k_node(ARGV[7]), '1', 'PX', ARGV[8])
redis.call('SADD', K_NODES, ARGV[7])
return {'ok'}
"
);

/// The node recorded with stream ARGV[7] (a session's standalone stream: its home), and
/// whether that node's lease is current (1) or not (0). Reply: node (empty if the stream is
/// unknown), alive.
pub(super) const SESSION_HOME: &str = concat!(
    include_str!("prelude.lua"),
    r"
local node = redis.call('HGET', k_stream(ARGV[7]), 'node')
if not node then return {'ok', '', 0} end
return {'ok', node, redis.call('EXISTS', k_node(node))}
"
);

/// Claims up to ARGV[8] incomplete Request streams of nodes whose lease has lapsed, for node
/// ARGV[7] (never its own). Atomic, so concurrent callers on several nodes each get distinct
/// streams and no stream twice. A claimed stream moves to the claimer's set and records the
/// claimer as its node: completing it, or removing its session, clears it there, and if the
/// claimer dies before answering it, the stream is claimed again from the claimer. A dead
/// node whose set is empty is forgotten. Reply: as for NODE_OPEN.
pub(super) const CLAIM_ORPHANS: &str = concat!(
    include_str!("prelude.lua"),
    r"
local me, limit = ARGV[7], tonumber(ARGV[8])
local out = {}
local claimed = 0
for _, node in ipairs(redis.call('SMEMBERS', K_NODES)) do
  if claimed >= limit then break end
  if node ~= me and redis.call('EXISTS', k_node(node)) == 0 then
    local open = k_open(node)
    while claimed < limit do
      local s = redis.call('SPOP', open)
      if not s then break end
      if add_orphan(out, s) then
        redis.call('HSET', k_stream(s), 'node', me)
        redis.call('SADD', k_open(me), s)
        claimed = claimed + 1
      end
    end
    if redis.call('EXISTS', open) == 0 then redis.call('SREM', K_NODES, node) end
  end
end
if claimed > 0 then redis.call('SADD', K_NODES, me) end
return {'ok', out}
"
);

/// Stores a session record, last seen now. ARGV: id, version, principal, standalone stream,
/// the client's handshake as JSON ('' for none).
pub(super) const SESSION_INSERT: &str = concat!(
    include_str!("prelude.lua"),
    r"
redis.call('DEL', k_session(ARGV[7]))
redis.call('HSET', k_session(ARGV[7]), 'v', ARGV[8], 'p', ARGV[9], 'st', ARGV[10])
if ARGV[11] ~= '' then
  redis.call('HSET', k_session(ARGV[7]), 'c', ARGV[11])
end
redis.call('ZADD', K_SEEN, now_ms(), ARGV[7])
redis.call('SADD', k_principal(ARGV[9]), ARGV[7])
return {'ok'}
"
);

/// Records activity of an existing session. ARGV: id.
pub(super) const SESSION_TOUCH: &str = concat!(
    include_str!("prelude.lua"),
    r"
redis.call('ZADD', K_SEEN, 'XX', now_ms(), ARGV[7])
return {'ok'}
"
);

/// Removes and returns the sessions idle for longer than ARGV[7] ms, in one step, so two
/// nodes never both expire (and report) one session.
pub(super) const SESSION_EXPIRE_IDLE: &str = concat!(
    include_str!("prelude.lua"),
    r"
local cutoff = now_ms() - tonumber(ARGV[7])
local ids = redis.call('ZRANGEBYSCORE', K_SEEN, '-inf', '(' .. cutoff)
for _, id in ipairs(ids) do
  redis.call('ZREM', K_SEEN, id)
  forget_principal_session(id)
  redis.call('DEL', k_session(id))
end
return {'ok', ids}
"
);

/// Removes a session record. ARGV: id. Reply: `ok`, 1 if it existed.
pub(super) const SESSION_REMOVE: &str = concat!(
    include_str!("prelude.lua"),
    r"
forget_principal_session(ARGV[7])
local existed = redis.call('DEL', k_session(ARGV[7]))
redis.call('ZREM', K_SEEN, ARGV[7])
return {'ok', existed}
"
);
