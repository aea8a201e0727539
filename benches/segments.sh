#!/usr/bin/env bash
# Where a small request's added latency goes: how long each proxy's thread
# is busy on a request's way in (client request read → upstream request
# written) and on its way out (upstream answer read → client answer
# written), timed from the kernel's syscall tracepoints (perf) as the wall
# time from an epoll_wait's return to the thread's next epoll_wait (the
# syscalls in between, e.g. the loopback writev, included), for
#
#   nginx       the plain reverse proxy of benches/e2e.sh
#   floor       examples/floor_proxy.rs: loopguard's HTTP stack, no parse
#   passthrough loopguard on a path of no dialect (/v1/other): forwarded
#               unparsed, no detection
#   loopguard   loopguard on /v1/chat/completions: the parse and the
#               request-time judgement run before the upstream request
#
# against the same instant upstream (nginx serving a canned completion),
# one request in flight (oha -c 1) at RATE req/s, each loopguard request a
# new conversation ending in one tool result (as benches/e2e.sh's
# one-tool-cycle load), rounds in rotating order, medians over the rounds.
# Beside the segments, each path's CPU time per request (user and kernel,
# its serving threads' schedstat over the round, perf's syscall tracing
# included). Then the same work in criterion's small_request bench: in a
# hot loop, after the caches were flushed (16 MiB and 96 MiB read), and
# after 10 ms idle, to compare the in-place figure with. The tracepoints
# slow every syscall a little, the same for every path: compare paths, not
# absolute figures.
#
#   benches/segments.sh
#   RATE=300 N=1500 ROUNDS=5 BIN=path/to/loopguard benches/segments.sh
#
# Needs perf (Debian: linux-perf; installed with apt-get when missing and
# run as root), `oha` (cargo install oha --locked), python3 and nginx (see
# benches/nginx.sh), and permission to trace (root, or
# kernel.perf_event_paranoid <= -1 and a readable tracefs).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${RATE:-100}"
N="${N:-1000}"          # requests per path and round
ROUNDS="${ROUNDS:-3}"
OHA="${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}"
[ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked" >&2; exit 1; }
if ! command -v perf >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing linux-perf (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q linux-perf >/dev/null
  else
    echo "perf not found: apt-get install linux-perf" >&2; exit 1
  fi
fi

. benches/common.sh
. benches/nginx.sh
bench_setup ''
nginx_setup
sed -i "s#upstream = \"$MOCK\"#upstream = \"$CANNED\"#" "$WORK/lg.toml"
printf '[loop_detection.replay_storm]\nenabled = false\n' >>"$WORK/lg.toml"
start_loopguard_and_floor "$CANNED"
NGINX_WORKERS="$(pgrep -d, -P "$(cat "$WORK/nginx/proxy.pid")" || true)"
[ -n "$NGINX_WORKERS" ] || { echo "nginx proxy workers not found" >&2; exit 1; }

# One body per request, each its own conversation (a distinct first user
# message) ending in one tool result; each round and path its own slice,
# so every loopguard request starts a conversation.
python3 benches/bodies.py 0 "$((ROUNDS * 4 * N + 300))" "$WORK/bodies.txt"
slice=0
next_bodies() { # sets BODIES: a file of the next N bodies
  BODIES="$WORK/slice-$slice.txt"
  sed -n "$((300 + slice * N + 1)),$((300 + (slice + 1) * N))p" "$WORK/bodies.txt" >"$BODIES"
  slice=$((slice + 1))
}
oha_run() { # url bodies_file n
  "$OHA" -n "$3" -c 1 -q "$RATE" --latency-correction --no-tui -m POST \
    -H 'content-type: application/json' -Z "$2" "$1" >/dev/null
}
# Warm-up: connections open, lazily built state built.
head -n 300 "$WORK/bodies.txt" >"$WORK/warm.txt"
for url in "$NGINX_PROXY/v1/chat/completions" "$FLOOR_URL/v1/chat/completions" "$LG/v1/other" "$LG/v1/chat/completions"; do
  oha_run "$url" "$WORK/warm.txt" 300
done

# name, pids to trace, URL, and the name prefix of the threads that serve
# the proxy (loopguard's admin and shared runtime run other threads).
PATHS=(
  "nginx $NGINX_WORKERS $NGINX_PROXY/v1/chat/completions nginx"
  "floor $FLOOR_PID $FLOOR_URL/v1/chat/completions tokio-rt-worker"
  "passthrough $LG_PID $LG/v1/other lg-worker-"
  "loopguard $LG_PID $LG/v1/chat/completions lg-worker-"
)
# CPU time (ns, user and kernel, from /proc's schedstat) of the threads of
# pids (comma-separated) whose name starts with the prefix; a thread that
# ended meanwhile no longer counts.
cpu_ns() {
  local total=0 pid task ns
  for pid in $(echo "$1" | tr , ' '); do
    for task in /proc/"$pid"/task/*; do
      case "$(cat "$task/comm" 2>/dev/null)" in
        "$2"*) read -r ns _ 2>/dev/null <"$task/schedstat" && total=$((total + ns)) ;;
      esac
    done
  done
  echo "$total"
}
RESULTS="$WORK/results.txt"
: >"$RESULTS"
trace_path() { # round "name pids url thread_prefix"
  local r="$1"
  set -- $2
  next_bodies
  perf record -q -e raw_syscalls:sys_enter --filter 'id == 20 || id == 232 || id == 281' \
    -e raw_syscalls:sys_exit --filter 'id == 20 || id == 232 || id == 281' -p "$2" -o "$WORK/trace.data" 2>"$WORK/perf.err" &
  perf_pid=$!
  sleep 0.5
  kill -0 "$perf_pid" 2>/dev/null || { echo "perf record failed: $(cat "$WORK/perf.err")" >&2; exit 1; }
  cpu_before=$(cpu_ns "$2" "$4")
  oha_run "$3" "$BODIES" "$N"
  cpu=$(( ($(cpu_ns "$2" "$4") - cpu_before + N * 500) / N / 1000 ))
  kill -INT "$perf_pid"; wait "$perf_pid" || true
  perf script -i "$WORK/trace.data" 2>/dev/null >"$WORK/trace.txt"
  read -r req resp busy count < <(python3 benches/segments.py "$WORK/trace.txt" "$4" "$RATE")
  echo "$1 $req $resp $busy $count $cpu" >>"$RESULTS"
  echo "  round $r: $1 request path $req us, response path $resp us, busy $busy us ($count requests), CPU $cpu us per request"
}
in_rotating_rounds trace_path PATHS

echo "criterion, the same parse, judgement and answer in a hot loop, after reading 16 MiB and 96 MiB, and after 10 ms idle:"
CRIT="$( (cargo bench --bench request --quiet -- small_request 2>/dev/null || true) | sed -n 's/.*time: *\[[^ ]* [^ ]* \([^ ]*\) \([^ ]*\) .*/\1 \2/p' | head -4 | tr '\n' ' ')"
echo "  $CRIT"

python3 - "$RESULTS" "$CRIT" <<'PY'
import collections, math, statistics as s, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, req, resp, busy, count, cpu = line.split()
    if int(count) > 0 and not math.isnan(float(req)):
        rows[name].append((float(req), float(resp), float(busy), float(cpu)))
med = {n: [s.median(x[i] for x in v) for i in range(4)] for n, v in rows.items()}
print()
print("| path | way in (request path) p50 | way out (response path) p50 | busy per request p50 | CPU per request |")
print("|---|---|---|---|---|")
for name in ("nginx", "floor", "passthrough", "loopguard"):
    if name in med:
        req, resp, busy, cpu = med[name]
        print(f"| {name} | {req:.0f} µs | {resp:.0f} µs | {busy:.0f} µs | {cpu:.0f} µs |")
def diff(a, b, label):
    if a in med and b in med:
        print(f"{label}: way in {med[a][0] - med[b][0]:+.0f} µs, way out {med[a][1] - med[b][1]:+.0f} µs")
print()
diff("loopguard", "passthrough", "detection (loopguard - passthrough)")
diff("passthrough", "floor", "loopguard's proxying without a dialect (passthrough - floor)")
diff("floor", "nginx", "the HTTP stack (floor - nginx)")
crit = sys.argv[2].split()
if len(crit) != 8:
    print("criterion's small_request figures are missing: run `cargo bench --bench request -- small_request` to see why")
else:
    print("the request's parse and judgement and the answer's judgement (criterion): "
          f"hot loop {crit[0]} {crit[1]}, after reading 16 MiB {crit[2]} {crit[3]}, "
          f"after reading 96 MiB {crit[4]} {crit[5]}, after 10 ms idle {crit[6]} {crit[7]} (means)")
PY
