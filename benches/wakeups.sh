#!/usr/bin/env bash
# Wake-ups per request (issue #37, goal 5): the eventfd writes and
# `epoll_wait` returns of a proxy's serving thread per small request, counted
# with strace on loopguard (one worker) and on its HTTP stack alone
# (examples/floor_proxy.rs), N requests one after another on one keep-alive
# connection, to the mock upstream. A count, not a time: the same build gives
# the same figures on a busy machine.
#
#   benches/wakeups.sh                 # builds the release binary
#   BIN=path/to/loopguard N=500 benches/wakeups.sh
#
# An eventfd write is an 8-byte `write` of 1 (tokio's waker: mio's eventfd);
# each one makes the thread's next `epoll_wait` return at once.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-200}"
command -v strace >/dev/null || { echo "strace not found: apt-get install strace" >&2; exit 1; }

. benches/common.sh
bench_setup 'workers = 1'

# Sends N requests on one connection to $1 (host:port), each a new conversation.
drive() {
  python3 - "$1" "$2" <<'PY'
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port))
for i in range(int(sys.argv[2])):
    body = ('{"model":"m","messages":[{"role":"user","content":"wake-up count %d"}]}' % i).encode()
    conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    conn.getresponse().read()
PY
}

# Counts, per request, a trace's eventfd writes and epoll_waits on the thread
# that made the most epoll_waits (the serving worker).
count() {
  python3 - "$1" "$2" "$3" <<'PY'
import collections, re, sys
trace, n, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
waits, wakes = collections.Counter(), collections.Counter()
for line in open(trace):
    m = re.match(r"(\d+)\s+(\w+)\((.*)", line)
    if not m:
        continue
    pid, call, rest = m.groups()
    if call == "epoll_wait":
        waits[pid] += 1
    elif call == "write" and '"\\1\\0\\0\\0\\0\\0\\0\\0", 8)' in rest:
        wakes[pid] += 1
thread = max(waits, key=waits.get)
print(f"{name:10} eventfd writes {wakes[thread] / n:5.2f}  epoll_waits {waits[thread] / n:5.2f}  per request (N={n})")
PY
}

measure() { # name, command...
  local name="$1"; shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local pid=$!
  local addr=""
  for _ in $(seq 1 100); do
    addr="$(sed -n -e 's/.*proxy=\([^ ]*\).*/\1/p' -e 's/^listening on //p' "$WORK/$name.out")"
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "$name did not start" >&2; exit 1; }
  drive "$addr" 20 # warm-up (connections, pools), not counted
  # Every thread of the warm process, from here on.
  local tids=()
  for t in /proc/"$pid"/task/*; do tids+=(-p "${t##*/}"); done
  strace -e trace=write,epoll_wait -o "$WORK/$name.trace" "${tids[@]}" 2>/dev/null &
  local tracer=$!
  sleep 0.5
  drive "$addr" "$N"
  sleep 0.2
  kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  count "$WORK/$name.trace" "$N" "$name"
}

cargo build --release --locked --quiet --example floor_proxy
measure floor "${CARGO_TARGET_DIR:-target}/release/examples/floor_proxy" 127.0.0.1:0 "$MOCK"
export LOOPGUARD_LOG=warn
measure loopguard "$BIN" serve --config "$WORK/lg.toml"
