#!/usr/bin/env bash
# Instructions a proxy executes per request in user space (loopguard by
# default; its HTTP stack alone, or nginx, for scale), counted by valgrind's
# callgrind: the same count for the same binary and inputs whatever else
# the machine is doing, so small changes to the hot path can be compared
# where the latency benches (benches/e2e.sh) are too noisy to tell.
#
#   benches/instructions.sh                      # builds the release binary
#   BIN=path/to/loopguard benches/instructions.sh
#   FLOOR=1 benches/instructions.sh              # examples/floor_proxy.rs: the HTTP stack alone
#   PLAIN_NGINX=1 benches/instructions.sh        # nginx, the plain reverse proxy of benches/e2e.sh (one worker)
#   URL_PATH=/v1/other benches/instructions.sh   # a path of no dialect: forwarded unparsed, no detection
#   N=5000 OUT=/tmp/lg.callgrind benches/instructions.sh   # then callgrind_annotate "$OUT".1
#   HISTORY=500000 N=300 benches/instructions.sh  # large histories (see below; WARMUP=300 requests first)
#   HISTORY=500000 SHAPE=text N=100 benches/instructions.sh  # the same, shaped as a text-protocol agent's
#   CYCLES=300 N=100 benches/instructions.sh     # a turn adding one tool cycle to conversations of 300 (issue #37's growth curve)
#   SHAPE=agent N=1000 benches/instructions.sh   # small requests of a real agent: 20 KB system prompt, 40 tools (63 KB bodies)
#   CYCLES=30 SHAPE=agent N=100 benches/instructions.sh  # that agent's turn in a conversation of 30 cycles
#
# Requests: N (default 2,000) one-tool-cycle chat completions, each a new
# conversation (a distinct first user message), 4 at a time, after a
# warm-up of 300, through loopguard (every detector on but the replay-storm
# breaker, which distinct bodies never trip anyway) to nginx serving a
# canned completion. With HISTORY (bytes), the bodies are instead 40
# histories of about that size, as in benches/e2e.sh's history loads, each
# resent in turn (40 conversations whose chains are kept: parse_cache_mib =
# 512, as there); with SHAPE=text, each tool cycle is shaped as a
# text-protocol agent's (Cline's): the call in the assistant's text, its
# result a user message in the agent's wrappers. With CYCLES, N conversations
# of CYCLES short tool cycles each are sent, each after its turn before (one
# cycle fewer: the warm-up), then each conversation's next turn, one tool
# cycle more, is counted, one request at
# a time in order (not oha, whose -Z picks lines at random) (parse_cache_mib
# = 512, so every conversation's chain is kept). Needs valgrind, `oha` (cargo install oha --locked),
# python3 and nginx (see benches/nginx.sh).
#
# valgrind's CPU has no SHA extensions: SHA-256 (session keys) runs in
# software there, about 24,000 instructions of a request that it costs far
# less on a CPU with them. Compare builds, not absolute figures.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-2000}"
OUT="${OUT:-$(mktemp -u /tmp/loopguard.callgrind.XXXXXX)}"
OHA="${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}"
[ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }

. benches/common.sh
. benches/nginx.sh
bench_setup "${HISTORY:+max_request_bytes = 67108864}${CYCLES:+max_request_bytes = 67108864}"
nginx_setup
# bench_setup's config, its route sent to nginx's canned answer instead.
sed -i "s#upstream = \"$MOCK\"#upstream = \"$CANNED\"#" "$WORK/lg.toml"
printf '[loop_detection.replay_storm]\nenabled = false\n' >>"$WORK/lg.toml"
if [ -n "${HISTORY:-}${CYCLES:-}" ]; then printf '[sessions]\nparse_cache_mib = 512\n' >>"$WORK/lg.toml"; fi

rm -f "$OUT" "$OUT".*
if [ -n "${PLAIN_NGINX:-}" ]; then
  # benches/nginx.sh's proxy, one worker in the foreground process, on a port of its own.
  px="$(free_port)"
  sed -e 's/^worker_processes auto;/worker_processes 1;\nmaster_process off;/' \
    -e "s#pid .*proxy.pid;#pid $WORK/nginx/counted.pid;#" \
    -e "s/listen 127.0.0.1:[0-9]*/listen 127.0.0.1:$px/" "$WORK/nginx/proxy.conf" >"$WORK/nginx/counted.conf"
  # Without these, nginx would count its master, not the worker that serves.
  grep -q '^master_process off;' "$WORK/nginx/counted.conf" && grep -q "listen 127.0.0.1:$px" "$WORK/nginx/counted.conf" \
    || { echo "benches/nginx.sh's proxy.conf changed: cannot run it as one foreground worker" >&2; exit 1; }
  valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/counted.conf" >"$WORK/lg.out" 2>"$WORK/lg.err" &
  PROXY_PID=$!
  address() { curl -sf -o /dev/null "http://127.0.0.1:$px/" && echo "127.0.0.1:$px"; }
elif [ -n "${FLOOR:-}" ]; then
  cargo build --release --locked --quiet --example floor_proxy
  valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    "${CARGO_TARGET_DIR:-target}/release/examples/floor_proxy" 127.0.0.1:0 "$CANNED" >"$WORK/lg.out" 2>"$WORK/lg.err" &
  PROXY_PID=$!
  address() { sed -n 's/listening on //p' "$WORK/lg.out"; }
else
  LOOPGUARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    "$BIN" serve --config "$WORK/lg.toml" >"$WORK/lg.out" 2>"$WORK/lg.err" &
  PROXY_PID=$!
  address() { sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/lg.out"; }
fi
for _ in $(seq 1 120); do [ -n "$(address)" ] && break; sleep 0.5; done
[ -n "$(address)" ] || { echo "the proxy did not start under valgrind:" >&2; cat "$WORK/lg.err" >&2; exit 1; }
URL="http://$(address)${URL_PATH:-/v1/chat/completions}"

# 3,000 distinct 63 KB bodies for SHAPE=agent (190 MB, which oha holds in memory).
if [ "${HISTORY:-0}" != 0 ]; then COUNT=40; elif [ "${SHAPE:-}" = agent ]; then COUNT=3000; else COUNT=20000; fi
BODIES="$WORK/bodies.txt"
if [ -n "${CYCLES:-}" ]; then
  python3 benches/bodies.py cycles "$CYCLES" "$N" "$WORK/before.txt" "$WORK/bodies.txt" "${SHAPE:-calls}"
  # The turn before, one cycle fewer, first: the warm-up's turn then
  # continues a kept chain as every turn of a running conversation does.
  if [ "$CYCLES" -gt 0 ]; then
    python3 benches/bodies.py cycles "$((CYCLES - 1))" "$N" "$WORK/prior.txt" "$WORK/prior_next.txt" "${SHAPE:-calls}"
    cmp -s "$WORK/prior_next.txt" "$WORK/before.txt" || { echo "bodies.py: the turns do not follow one another" >&2; exit 1; }
  fi
else
  python3 benches/bodies.py "${HISTORY:-0}" "$COUNT" "$WORK/bodies.txt" "${SHAPE:-calls}"
fi
load() { "$OHA" -n "$1" -c 4 --no-tui -m POST -H 'content-type: application/json' -Z "$BODIES" \
  --output-format json "$URL" >"$WORK/oha.json"; }
if [ -n "${CYCLES:-}" ]; then
  # oha's -Z picks a random line for each request: the turns must come in
  # order, each conversation once, so these go one at a time from Python.
  load() {
    python3 - "$BODIES" "$URL" "$WORK/oha.json" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlsplit(sys.argv[2])
conn = http.client.HTTPConnection(url.hostname, url.port)
ok = 0
for line in open(sys.argv[1], "rb"):
    conn.request("POST", url.path, body=line.rstrip(b"\n"), headers={"content-type": "application/json"})
    response = conn.getresponse()
    response.read()
    ok += response.status == 200
json.dump({"statusCodeDistribution": {"200": ok}}, open(sys.argv[3], "w"))
PY
  }
  if [ -f "$WORK/prior.txt" ]; then BODIES="$WORK/prior.txt" load; fi
  BODIES="$WORK/before.txt" load
else
  load "${WARMUP:-300}"
fi
callgrind_control -z "$PROXY_PID" >/dev/null
load "$N"
callgrind_control -d "$PROXY_PID" >/dev/null
sleep 1
ok=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['statusCodeDistribution'].get('200', 0))" "$WORK/oha.json")
kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT".1)
echo "requests: $N (HTTP 200: $ok)"
echo "instructions per request: $((total / N))"
echo "profile of the counted requests: callgrind_annotate --inclusive=yes $OUT.1"
