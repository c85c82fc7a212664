-- The prelude every tether Redis script starts with (see `store/redis/mod.rs`): the common
-- arguments, the key layout, and the helpers that keep a session's counters, caps, retention
-- and tombstones exactly as the memory and SQLite stores keep theirs. Each script is this
-- prelude followed by its own body; Redis runs a script atomically, so every check-and-write
-- below is atomic across nodes.
--
-- ARGV[1] key prefix, ARGV[2] retention (ms), ARGV[3] max events per session,
-- ARGV[4] max bytes per session, ARGV[5] max streams per session, ARGV[6] max tombstones;
-- a script's own arguments start at ARGV[7].
--
-- Redis answers a missing value with `false`, hence the `or 0` before every `tonumber`.

local P = ARGV[1]
local RETENTION = tonumber(ARGV[2])
local MAX_EVENTS = tonumber(ARGV[3])
local MAX_BYTES = tonumber(ARGV[4])
local MAX_STREAMS = tonumber(ARGV[5])
local MAX_TOMBS = tonumber(ARGV[6])

-- The length before each frame in a chunk (`store/chunk.rs`).
local CHUNK_LENGTH_BYTES = 4
-- Most stream entries a read fetches per XRANGE.
local READ_PAGE = 64

local K_DUE = P .. 'due'
local K_TOMB = P .. 'tomb'
local K_TOMB_ORDER = P .. 'tomb_order'
local K_WAKE = P .. 'wake'
local K_NODES = P .. 'nodes'

local function k_stream(s) return P .. 's:' .. s end
local function k_events(s) return P .. 'e:' .. s end
local function k_usage(sess) return P .. 'u:' .. sess end
local function k_streams(sess) return P .. 'ss:' .. sess end
local function k_completed(sess) return P .. 'c:' .. sess end
local function k_appended(sess) return P .. 'a:' .. sess end
local function k_tombs(sess) return P .. 'ts:' .. sess end
local function k_open(node) return P .. 'o:' .. node end
local function k_node(node) return P .. 'node:' .. node end
local function k_session(id) return P .. 'sess:' .. id end
-- The ids of a principal's live sessions, for the per-principal limit.
local function k_principal(principal) return P .. 'ps:' .. principal end
local K_SEEN = P .. 'seen'

-- Drops session `id` from its principal's set (before its record is deleted).
local function forget_principal_session(id)
  local principal = redis.call('HGET', k_session(id), 'p')
  if principal then redis.call('SREM', k_principal(principal), id) end
end

-- Redis's clock, so every node measures retention and idleness alike.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function wake(s) redis.call('PUBLISH', K_WAKE, s) end

-- Adds `<stream> <principal> <session> <request ids>` of stream `s` to `out` if it is an
-- incomplete Request stream; false (nothing added) if it is complete, gone or standalone.
local function add_orphan(out, s)
  local h = redis.call('HMGET', k_stream(s), 'p', 'sess', 'done', 'req', 'kind')
  if not h[2] or h[3] ~= '0' or h[5] ~= 'r' then return false end
  out[#out + 1] = s
  out[#out + 1] = h[1]
  out[#out + 1] = h[2]
  out[#out + 1] = h[4] or '[]'
  return true
end

-- A removed stream's owner, so that its reader hears `Expired`; the oldest are forgotten
-- first. The order list may hold ids already forgotten with their session: they only make
-- the bound stricter.
local function tombstone(s, sess, principal)
  if MAX_TOMBS <= 0 then return end
  redis.call('HSET', K_TOMB, s, sess .. ' ' .. principal)
  redis.call('SADD', k_tombs(sess), s)
  redis.call('RPUSH', K_TOMB_ORDER, s)
  while redis.call('LLEN', K_TOMB_ORDER) > MAX_TOMBS do
    local old = redis.call('LPOP', K_TOMB_ORDER)
    local owner = redis.call('HGET', K_TOMB, old)
    if owner then
      redis.call('HDEL', K_TOMB, old)
      local space = string.find(owner, ' ', 1, true)
      redis.call('SREM', k_tombs(string.sub(owner, 1, space - 1)), old)
    end
  end
end

-- Why a writer cannot find stream `s`: only completed streams are removed alone.
local function gone_for_writer(s)
  if redis.call('HEXISTS', K_TOMB, s) == 1 then return 'completed' end
  return 'unknown'
end

-- A stream entry's first seq and event count: a chunk (`n` events, `c` their frames) or, as
-- written before chunks, one frame (`f`).
local function entry_span(entry)
  local first = tonumber(string.sub(entry[1], 3))
  local fields = entry[2]
  if fields[1] == 'n' then return first, tonumber(fields[2]) end
  return first, 1
end

-- An entry of a session's append log: `<stream> <first seq> <last seq> <lengths>` for a
-- chunk (its frame lengths comma-separated), or `<stream> <seq> <length>` as written before
-- chunks.
local function parse_appended(entry)
  local s, first, last, lens = string.match(entry, '^(%S+) (%d+) (%d+) (%S+)$')
  if s then return s, tonumber(first), tonumber(last), lens end
  local old, seq, len = string.match(entry, '^(%S+) (%d+) (%d+)$')
  return old, tonumber(seq), tonumber(seq), len
end

-- Drops stale entries of the session's append log once they outnumber the live events.
local function compact(sess)
  local a = k_appended(sess)
  local len = redis.call('LLEN', a)
  local events = tonumber(redis.call('HGET', k_usage(sess), 'events') or 0)
  if len <= 2 * events + 64 then return end
  local first = {}
  local keep = {}
  for _, entry in ipairs(redis.call('LRANGE', a, 0, -1)) do
    local s, _, last = parse_appended(entry)
    if first[s] == nil then
      first[s] = tonumber(redis.call('HGET', k_stream(s), 'first') or -1)
    end
    if first[s] >= 0 and last >= first[s] then keep[#keep + 1] = entry end
  end
  redis.call('DEL', a)
  for i = 1, #keep, 1000 do
    redis.call('RPUSH', a, unpack(keep, i, math.min(i + 999, #keep)))
  end
end

-- Removes a whole stream (expired or evicted), leaving a tombstone.
local function remove_stream(s)
  local h = redis.call('HMGET', k_stream(s), 'sess', 'p', 'ev', 'by')
  if not h[1] then return end
  local sess = h[1]
  redis.call('DEL', k_stream(s), k_events(s))
  redis.call('SREM', k_streams(sess), s)
  local u = k_usage(sess)
  redis.call('HINCRBY', u, 'streams', -1)
  redis.call('HINCRBY', u, 'events', -tonumber(h[3]))
  redis.call('HINCRBY', u, 'bytes', -tonumber(h[4]))
  tombstone(s, sess, h[2])
  wake(s)
end

-- Keeps `due` (the sweeper's index) at the completion time of the session's oldest
-- completed stream.
local function refresh_due(sess)
  local front = redis.call('LINDEX', k_completed(sess), 0)
  if front then
    local at = redis.call('HGET', k_stream(front), 'at')
    if at then
      redis.call('ZADD', K_DUE, at, sess)
      return
    end
  end
  redis.call('ZREM', K_DUE, sess)
end

-- Removes the session's completed streams past retention at `now` (oldest completion first:
-- retention is the same for all).
local function expire(sess, now)
  local c = k_completed(sess)
  local removed = false
  while true do
    local front = redis.call('LINDEX', c, 0)
    if not front then break end
    local at = redis.call('HGET', k_stream(front), 'at')
    if at and now - tonumber(at) < RETENTION then break end
    redis.call('LPOP', c)
    remove_stream(front)
    removed = true
  end
  if removed then
    refresh_due(sess)
    compact(sess)
  end
end

-- Evicts the session's stream completed longest ago; false if none is complete.
local function evict_oldest_completed(sess)
  local s = redis.call('LPOP', k_completed(sess))
  if not s then return false end
  remove_stream(s)
  refresh_due(sess)
  return true
end

-- Streams whose oldest live events this script evicted, each with its first seq after that:
-- scripts that may evict (they call `evict_to_caps`) reply with `evicted_list()`, so the node
-- that ran them drops those events from its committed tail as well.
local EVICTED = {}
local function evicted_list()
  local list = {}
  for s, first in pairs(EVICTED) do
    list[#list + 1] = s
    list[#list + 1] = first
  end
  return list
end

-- Evicts the session's oldest stored event; false if there is none. Called only once no
-- completed stream is left. A chunk's entry goes with its last event; until then its log
-- entry goes back to the front, and readers skip its evicted head.
local function evict_oldest_live_event(sess)
  local a = k_appended(sess)
  while true do
    local entry = redis.call('LPOP', a)
    if not entry then return false end
    local s, first, last, lens = parse_appended(entry)
    local ks = k_stream(s)
    local h = redis.call('HMGET', ks, 'first', 'ev')
    -- Within a stream events leave from the front in seq order, so a valid entry holds the
    -- stream's first stored event; anything else was removed otherwise.
    local head = tonumber(h[1] or -1)
    if h[1] and tonumber(h[2]) > 0 and head >= first and head <= last then
      local len, seq = 0, first
      for l in string.gmatch(lens, '%d+') do
        if seq == head then len = tonumber(l) break end
        seq = seq + 1
      end
      if head == last then
        redis.call('XDEL', k_events(s), '1-' .. first)
      else
        redis.call('LPUSH', a, entry)
      end
      redis.call('HINCRBY', ks, 'first', 1)
      EVICTED[s] = head + 1
      redis.call('HINCRBY', ks, 'ev', -1)
      redis.call('HINCRBY', ks, 'by', -len)
      local u = k_usage(sess)
      redis.call('HINCRBY', u, 'events', -1)
      redis.call('HINCRBY', u, 'bytes', -len)
      return true
    end
  end
end

-- Evicts until the session is within its caps: whole completed streams first, oldest
-- completion first, then the oldest events of live streams.
local function evict_to_caps(sess)
  local u = k_usage(sess)
  local evicted = false
  while true do
    local h = redis.call('HMGET', u, 'events', 'bytes')
    if tonumber(h[1] or 0) <= MAX_EVENTS and tonumber(h[2] or 0) <= MAX_BYTES then break end
    if not evict_oldest_completed(sess) and not evict_oldest_live_event(sess) then break end
    evicted = true
  end
  if evicted then compact(sess) end
end
