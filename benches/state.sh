#!/usr/bin/env bash
# What the Redis state backend adds to a request, measured in one run and
# interleaved: the same load through loopguard with `[state] backend =
# "memory"` and with `"redis"` (a redis-server started here on loopback).
#
#   benches/state.sh     # needs oha, redis-server (Debian: redis-server)
#
# Load: SESSIONS distinct sessions (one request body per line, oha -Z, each a
# different conversation with a tool cycle), CONNECTIONS connections, RATE
# requests per second, DURATION seconds per round, ROUNDS rounds per backend.
# Prints each round's p50/p99 and the median p50 difference redis − memory.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-1000}"
DURATION="${DURATION:-10}"
ROUNDS="${ROUNDS:-3}"
SESSIONS="${SESSIONS:-200}"
CONNECTIONS="${CONNECTIONS:-100}"
OHA="${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}"
[ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server not found (apt-get install redis-server)" >&2; exit 1; }

. benches/common.sh
bench_setup
# oha -Z resends each session's body several times a second: past 30 resends
# the replay-storm breaker would answer in the upstream's place (and a block
# writes the state before answering), so the runs would measure that path,
# not forwarding. Switched off, as in benches/e2e.sh.
printf '[loop_detection.replay_storm]\nenabled = false\n' >>"$WORK/lg.toml"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >/dev/null &
sleep 0.3

start() { # name, extra config: started in this shell (not in a $(…) subshell), so that the EXIT trap stops it
  cp "$WORK/lg.toml" "$WORK/$1.toml"
  printf '%b\n' "$2" >>"$WORK/$1.toml"
  LOOPGUARD_LOG=warn "$BIN" serve --config "$WORK/$1.toml" >"$WORK/$1.out" 2>"$WORK/$1.err" &
}
url_of() { # name -> URL
  echo "http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/$1.out")"
}
start memory '[state]\nbackend = "memory"'
start redis "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:$PORT/0\""
sleep 0.7
MEM=$(url_of memory)
RED=$(url_of redis)

python3 - "$SESSIONS" >"$WORK/bodies" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"model": "m", "messages": [
        {"role": "user", "content": f"task {i}: list the files"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "a.txt\nb.txt"}]}))
PY

run_oha() { # url -> "p50_ms p99_ms success"
  "$OHA" -z "${DURATION}s" -q "$RATE" -c "$CONNECTIONS" --no-tui --output-format json -m POST \
    -H 'content-type: application/json' -Z "$WORK/bodies" "$1/v1/chat/completions" >"$WORK/oha.json"
  python3 - "$WORK/oha.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(f'{p["p50"]*1000:.3f} {p["p99"]*1000:.3f} {d["summary"]["successRate"]}')
PY
}

echo "${SESSIONS} sessions, ${CONNECTIONS} connections, ${RATE} req/s, ${DURATION}s x ${ROUNDS} rounds per backend, interleaved"
declare -a M R
for r in $(seq 1 "$ROUNDS"); do
  # Alternating which backend goes first, so neither always runs on a machine the other just warmed.
  if (( r % 2 )); then
    read -r m50 m99 mok < <(run_oha "$MEM")
    read -r r50 r99 rok < <(run_oha "$RED")
  else
    read -r r50 r99 rok < <(run_oha "$RED")
    read -r m50 m99 mok < <(run_oha "$MEM")
  fi
  echo "  round $r: memory p50 ${m50} ms p99 ${m99} ms (ok ${mok}) | redis p50 ${r50} ms p99 ${r99} ms (ok ${rok})"
  M+=("$m50"); R+=("$r50")
done
KEYS=$(redis-cli -p "$PORT" --scan --pattern 'loopguard:s:*' | wc -l)
ERRORS=$(grep -c 'state store' "$WORK/redis.err" || true)
python3 - "${M[*]}" "${R[*]}" "$KEYS" "$ERRORS" <<'PY'
import statistics, sys
m = [float(x) for x in sys.argv[1].split()]
r = [float(x) for x in sys.argv[2].split()]
print(f"median p50: memory {statistics.median(m):.3f} ms, redis {statistics.median(r):.3f} ms, "
      f"difference {statistics.median(r) - statistics.median(m):+.3f} ms "
      f"(median of the rounds' differences {statistics.median(b - a for a, b in zip(m, r)):+.3f} ms); "
      f"sessions stored in redis: {sys.argv[3]}; state store warnings logged: {sys.argv[4]}")
PY
