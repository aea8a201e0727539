//! The Lua scripts of the store's round trips (KEYS and ARGV as
//! [`super::Shared::load`], [`super::Shared::save`] and
//! [`super::Shared::delete`] pass them).

/// The load: a chained response's record (`KEYS[2]`, same tenant only),
/// the session (`KEYS[1]`, or the record's; its blob left out when its
/// version is `ARGV[3]`), and with no session the fingerprinted lane's
/// latest one (`KEYS[3]`). `ARGV[4]` names an unused key.
pub(super) const LOAD: &str = r"
local out = {false, false, false, false, false, false, false}
local skey = KEYS[1]
if KEYS[2] ~= ARGV[4] then
  local r = redis.call('HMGET', KEYS[2], 't', 's', 'c')
  if r[1] == ARGV[2] and r[2] then
    out[1] = r[2]
    out[2] = r[3]
    skey = ARGV[1] .. r[2]
  end
end
local s = redis.call('HMGET', skey, 'v', 'd')
out[3] = s[1]
if skey == KEYS[1] and s[1] and s[1] == ARGV[3] then
  out[4] = ''
else
  out[4] = s[2]
end
if KEYS[3] ~= ARGV[4] and not s[1] then
  local lk = redis.call('GET', KEYS[3])
  if lk then
    local l = redis.call('HMGET', ARGV[1] .. lk, 'v', 'd')
    if l[1] then
      out[5] = lk
      out[6] = l[1]
      out[7] = l[2]
    end
  end
end
return out
";

/// Compare-and-set: `ARGV[2]` written to `KEYS[1]` when its version is
/// still `ARGV[1]` (a new history starts at `ARGV[5]`), the lane index
/// `KEYS[2]` pointed at `ARGV[4]`; else the stored version and blob.
pub(super) const SAVE: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then
  return {0, v, redis.call('HGET', KEYS[1], 'd')}
end
local nv = v + 1
if v == 0 then
  nv = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'v', ARGV[5], 'd', ARGV[2], 'b', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'v', string.format('%d', nv), 'd', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if KEYS[2] ~= ARGV[6] then
  redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[3])
end
return {1, nv}
";

/// The admin API's delete: a tombstone (empty `d`, token `ARGV[2]`); 1
/// when there was a session (or this token's tombstone already).
pub(super) const DELETE: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local d = redis.call('HGET', KEYS[1], 'd')
if v == 0 or d == '' then
  if d == '' and redis.call('HGET', KEYS[1], 't') == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[1], 'v', string.format('%d', v + 1), 'd', '', 't', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
";
