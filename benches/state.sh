#!/usr/bin/env bash
# What the Redis state backend adds to a request, measured in one run and
# interleaved: the same load through loopguard with `[state] backend =
# "memory"` and with `"redis"` (a redis-server started here on loopback).
#
#   benches/state.sh     # needs oha, redis-server (Debian: redis-server)
#   BASE_BIN=path/to/older/loopguard benches/state.sh  # a 3rd instance: an older build, redis backend
#
# Load: SESSIONS distinct sessions (one request body per line, oha -Z, each a
# different conversation with a tool cycle), CONNECTIONS connections, RATE
# requests per second, DURATION seconds per round, ROUNDS rounds per instance.
# Prints each round's p50/p99, the CPU time per request of the instance
# and of redis-server (from /proc: steadier than latency on a shared
# machine) and the store calls' mean wall time as loopguard timed them
# (`loopguard_state_call_seconds`, this build only), then the medians and
# the p50 difference redis − memory.
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
REDIS_PID=$!
sleep 0.3

declare -A PID
start() { # bin name extra-config: started in this shell (not in a $(…) subshell), so that the EXIT trap stops it
  cp "$WORK/lg.toml" "$WORK/$2.toml"
  printf '%b\n' "$3" >>"$WORK/$2.toml"
  LOOPGUARD_LOG=warn "$1" serve --config "$WORK/$2.toml" >"$WORK/$2.out" 2>"$WORK/$2.err" &
  PID[$2]=$!
}
url_of() { # name -> URL
  echo "http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/$1.out")"
}
store_calls() { # name -> "load_count load_seconds save_count save_seconds" from its /metrics (0s for memory)
  curl -sf "http://$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' "$WORK/$1.out")/metrics" | python3 -c '
import sys
v = {}
for line in sys.stdin:
    for op in ("load", "save"):
        for part in ("count", "sum"):
            if line.startswith(f"loopguard_state_call_seconds_{part}{{op=\"{op}\"}}"):
                v[op, part] = float(line.rsplit(" ", 1)[1])
print(*(v.get((op, part), 0.0) for op in ("load", "save") for part in ("count", "sum")))'
}
start "$BIN" memory '[state]\nbackend = "memory"'
start "$BIN" redis "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:$PORT/0\""
NAMES=(memory redis)
if [ -n "${BASE_BIN:-}" ]; then
  start "$BASE_BIN" base "[state]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:$PORT/0\"\nkey_prefix = \"base:\""
  NAMES+=(base)
fi
sleep 0.7

python3 - "$SESSIONS" >"$WORK/bodies" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"model": "m", "messages": [
        {"role": "user", "content": f"task {i}: list the files"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "a.txt\nb.txt"}]}))
PY

ticks() { # pid -> CPU ticks (user + system) so far
  local f; read -r -a f <"/proc/$1/stat"; echo $((f[13] + f[14]))
}
run_oha() { # name -> "p50_ms p99_ms success loopguard_cpu_us_per_request redis_cpu_us_per_request load_ms save_ms calls_per_request"
  local l0 r0 l1 r1 s0 s1
  s0=$(store_calls "$1")
  l0=$(ticks "${PID[$1]}"); r0=$(ticks "$REDIS_PID")
  "$OHA" -z "${DURATION}s" -q "$RATE" -c "$CONNECTIONS" --no-tui --output-format json -m POST \
    -H 'content-type: application/json' -Z "$WORK/bodies" "$(url_of "$1")/v1/chat/completions" >"$WORK/oha.json"
  l1=$(ticks "${PID[$1]}"); r1=$(ticks "$REDIS_PID")
  s1=$(store_calls "$1")
  python3 - "$WORK/oha.json" "$((l1 - l0))" "$((r1 - r0))" "$(getconf CLK_TCK)" "$s0" "$s1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
n = max(1, sum(d["statusCodeDistribution"].values()))
us = 1e6 / int(sys.argv[4]) / n
# Mean wall time of a load and of a save in this round, as loopguard saw them.
a, b = [float(x) for x in sys.argv[5].split()], [float(x) for x in sys.argv[6].split()]
mean = lambda i: (b[i + 1] - a[i + 1]) * 1000 / (b[i] - a[i]) if b[i] > a[i] else 0.0
calls = (b[0] - a[0] + b[2] - a[2]) / n
print(f'{p["p50"]*1000:.3f} {p["p99"]*1000:.3f} {d["summary"]["successRate"]} {int(sys.argv[2])*us:.0f} {int(sys.argv[3])*us:.0f} {mean(0):.3f} {mean(2):.3f} {calls:.2f}')
PY
}

echo "${SESSIONS} sessions, ${CONNECTIONS} connections, ${RATE} req/s, ${DURATION}s x ${ROUNDS} rounds per instance, interleaved (${NAMES[*]})"
: >"$WORK/rounds"
for r in $(seq 1 "$ROUNDS"); do
  # Rotating which instance goes first, so none always runs on a machine another just warmed.
  k=$(( (r - 1) % ${#NAMES[@]} ))
  line="  round $r:"; sep=" "
  for name in "${NAMES[@]:$k}" "${NAMES[@]:0:$k}"; do
    read -r p50 p99 ok lcpu rcpu load save calls < <(run_oha "$name")
    echo "$name $p50 $p99 $ok $lcpu $rcpu $load $save $calls" >>"$WORK/rounds"
    line="$line$sep$name p50 $p50 ms p99 $p99 ms (ok $ok; CPU/request: loopguard $lcpu us, redis-server $rcpu us; store calls: $calls per request, load $load ms, save $save ms)"; sep=" | "
  done
  echo "$line"
done
KEYS=$(redis-cli -p "$PORT" --scan --pattern 'loopguard:s:*' | wc -l)
ERRORS=$(grep -c 'state store' "$WORK/redis.err" || true)
python3 - "$WORK/rounds" "$KEYS" "$ERRORS" <<'PY'
import collections, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, *v = line.split()
    rows[name].append([float(x) for x in v])
med = {n: [st.median(r[i] for r in v) for i in range(8)] for n, v in rows.items()}
def diff(a, b):  # median over rounds of b - a (same round)
    return st.median(y[0] - x[0] for x, y in zip(rows[a], rows[b]))
for n, m in med.items():
    print(f"{n}: median p50 {m[0]:.3f} ms, p99 {m[1]:.3f} ms; CPU per request: loopguard {m[3]:.0f} us, redis-server {m[4]:.0f} us")
print(f"redis - memory, p50: {med['redis'][0] - med['memory'][0]:+.3f} ms (median of the rounds' differences {diff('memory', 'redis'):+.3f} ms)")
print(f"redis: store calls as loopguard timed them (loopguard_state_call_seconds, medians of the rounds): {med['redis'][7]:.2f} per request, a load {med['redis'][5]:.3f} ms and a save {med['redis'][6]:.3f} ms on average")
if "base" in med:
    print(f"base (redis) - memory, p50: {med['base'][0] - med['memory'][0]:+.3f} ms (median of the rounds' differences {diff('memory', 'base'):+.3f} ms)")
print(f"sessions stored in redis: {sys.argv[2]}; state store warnings logged: {sys.argv[3]}")
PY
