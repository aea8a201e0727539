#!/usr/bin/env bash
# End-to-end latency of loopguard against the mock upstream, measured in one
# run and interleaved: direct-to-mock vs through loopguard.
#
#   benches/e2e.sh            # needs `oha` (cargo install oha --locked) and curl
#
# Prints, for non-streaming requests at a fixed rate, the p50/p99 latency of
# both paths and the difference (what loopguard adds); the streaming
# time-to-first-byte of both; and loopguard's RSS idle and after the load.
# Figures are ratios/differences against the direct baseline of the same run,
# because this machine is shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-1000}"          # requests per second
DURATION="${DURATION:-10}"    # seconds per round
ROUNDS="${ROUNDS:-3}"         # interleaved rounds per path
TTFB_N="${TTFB_N:-200}"       # streaming requests per path for time-to-first-byte
OHA="${OHA:-$(command -v oha || echo /work/tools/bin/oha)}"
[ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked" >&2; exit 1; }

. benches/common.sh # (the script runs from the repository root)
bench_setup
LOOPGUARD_LOG=warn "$BIN" serve --config "$WORK/lg.toml" >"$WORK/lg.out" 2>"$WORK/lg.err" &
LG_PID=$!
sleep 0.5
LG="http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/lg.out")"
rss() { awk '/VmRSS/ {print $2}' "/proc/$LG_PID/status"; }
RSS_IDLE=$(rss)

BODY='{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"list_directory","arguments":"{\"path\":\".\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.txt\nb.txt"}]}'

run_oha() { # url -> "p50_ms p99_ms"
  "$OHA" -z "${DURATION}s" -q "$RATE" --no-tui --output-format json -m POST \
    -H 'content-type: application/json' -d "$BODY" "$1/v1/chat/completions" >"$WORK/oha.json"
  python3 - "$WORK/oha.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
ok = d["summary"]["successRate"]
print(f'{p["p50"]*1000:.3f} {p["p99"]*1000:.3f} {ok}')
PY
}

echo "non-streaming, ${RATE} req/s, ${DURATION}s x ${ROUNDS} rounds per path, interleaved"
declare -a D50 D99 L50 L99
for r in $(seq 1 "$ROUNDS"); do
  read -r d50 d99 dok < <(run_oha "$MOCK")
  read -r l50 l99 lok < <(run_oha "$LG")
  echo "  round $r: direct p50 ${d50} ms p99 ${d99} ms (ok ${dok}) | loopguard p50 ${l50} ms p99 ${l99} ms (ok ${lok})"
  D50+=("$d50"); D99+=("$d99"); L50+=("$l50"); L99+=("$l99")
done
RSS_LOADED=$(rss)

ttfb() { # url -> median time to first byte in ms over TTFB_N streaming requests
  for _ in $(seq 1 "$TTFB_N"); do
    curl -s -o /dev/null -w '%{time_starttransfer}\n' -H 'content-type: application/json' \
      -d '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}' "$1/v1/chat/completions"
  done | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int(NR/2)+1]*1000}'
}
T_D1=$(ttfb "$MOCK"); T_L1=$(ttfb "$LG"); T_D2=$(ttfb "$MOCK"); T_L2=$(ttfb "$LG")

python3 - "${D50[*]}" "${D99[*]}" "${L50[*]}" "${L99[*]}" "$T_D1 $T_D2" "$T_L1 $T_L2" "$RSS_IDLE" "$RSS_LOADED" <<'PY'
import statistics as s, sys
d50, d99, l50, l99, td, tl = ([float(x) for x in a.split()] for a in sys.argv[1:7])
idle, loaded = int(sys.argv[7]), int(sys.argv[8])
m = s.median
print(f"p50: direct {m(d50):.3f} ms, loopguard {m(l50):.3f} ms, added {m(l50)-m(d50):+.3f} ms (x{m(l50)/m(d50):.2f})")
print(f"p99: direct {m(d99):.3f} ms, loopguard {m(l99):.3f} ms, added {m(l99)-m(d99):+.3f} ms (x{m(l99)/m(d99):.2f})")
print(f"streaming TTFB (median of medians): direct {m(td):.3f} ms, loopguard {m(tl):.3f} ms, added {m(tl)-m(td):+.3f} ms")
print(f"loopguard RSS: idle {idle/1024:.1f} MiB, after load {loaded/1024:.1f} MiB")
PY
