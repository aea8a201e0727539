#!/usr/bin/env bash
# Per-event latency of a streamed answer (issue #14: "per-event added
# latency ≤ 50 µs while no call is held"): an upstream writes an OpenAI chat
# stream of text deltas GAP_MS apart, each stamped with the time of its
# write, and a client reads it directly, through nginx (the plain reverse
# proxy of benches/e2e.sh), through loopguard's HTTP stack alone
# (examples/floor_proxy.rs) and through loopguard (every detector on),
# rounds in rotating order. For each path: the median time from an event's
# write to its read, for the first event of an answer and for every later
# one, and the later events' p99; then each proxy's added latency per later
# event (its median minus direct's). Both ends are Python on the same
# machine, the same for every path: compare paths, not absolute figures.
#
#   benches/events.sh
#   EVENTS=25 GAP_MS=20 REQUESTS=20 ROUNDS=3 BIN=path/to/loopguard benches/events.sh
#
# Needs python3 and nginx (see benches/nginx.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS="${EVENTS:-25}"
GAP_MS="${GAP_MS:-20}"
REQUESTS="${REQUESTS:-20}"
ROUNDS="${ROUNDS:-3}"

. benches/common.sh
. benches/nginx.sh
bench_setup ''
python3 benches/events.py upstream "$WORK/upstream.port" "$EVENTS" "$GAP_MS" &
for _ in $(seq 1 50); do [ -s "$WORK/upstream.port" ] && break; sleep 0.1; done
UPSTREAM="127.0.0.1:$(cat "$WORK/upstream.port")"
nginx_setup "$UPSTREAM"
sed -i "s#upstream = \"$MOCK\"#upstream = \"http://$UPSTREAM\"#" "$WORK/lg.toml"
start_loopguard_and_floor "http://$UPSTREAM"

PATHS=(
  "direct http://$UPSTREAM"
  "nginx $NGINX_PROXY"
  "floor $FLOOR_URL"
  "loopguard $LG"
)
RESULTS="$WORK/results.txt"
: >"$RESULTS"
read_path() { # round "name url"
  local r="$1"
  set -- $2
  read -r first later p99 count < <(python3 benches/events.py client "$2/v1/chat/completions" "$REQUESTS" "$r-$1")
  echo "$1 $first $later $p99 $count" >>"$RESULTS"
  echo "  round $r: $1 first event ${first} us, later events p50 ${later} us p99 ${p99} us ($count events)"
}
in_rotating_rounds read_path PATHS

python3 - "$RESULTS" <<'PY'
import collections, statistics as s, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, first, later, p99, count = line.split()
    rows[name].append((float(first), float(later), float(p99)))
med = {n: [s.median(x[i] for x in v) for i in range(3)] for n, v in rows.items()}
print()
print("| path | first event p50 | later events p50 | later events p99 | added per later event (p50) |")
print("|---|---|---|---|---|")
for name in ("direct", "nginx", "floor", "loopguard"):
    first, later, p99 = med[name]
    added = "" if name == "direct" else f"{later - med['direct'][1]:+.0f} µs"
    print(f"| {name} | {first:.0f} µs | {later:.0f} µs | {p99:.0f} µs | {added} |")
PY
