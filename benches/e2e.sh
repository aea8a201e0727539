#!/usr/bin/env bash
# End-to-end latency added by loopguard, with nginx (a plain reverse proxy)
# beside it in the same interleaved run, against the same instant upstream
# (nginx serving a canned completion).
#
#   benches/e2e.sh                        # builds the release binary
#   BIN=path/to/loopguard benches/e2e.sh
#   RATES="100 1000" HISTORIES="0 500000 2000000" ROUNDS=3 DURATION=10 benches/e2e.sh
#   LG_EXTRA=$'[sessions]\nparse_cache_mib = 512' HISTORIES=2000000 benches/e2e.sh
#   BASE_BIN=path/to/older/loopguard benches/e2e.sh   # a 4th path: before/after in one run
#   FLOOR=1 benches/e2e.sh   # another path: examples/floor_proxy.rs, loopguard's HTTP stack alone
#
# Needs `oha` (cargo install oha --locked), curl, python3 and nginx (installed
# with apt-get when missing and run as root). For each load (one tool cycle
# per request, or a history of about HISTORY bytes) and rate, rounds of
# `oha` (latency correction on, one body per line from a file of distinct
# sessions, `-Z`) go to the upstream directly, through nginx and through
# loopguard (every detector on), in rotating order; the medians over the
# rounds give each path's p50/p99 and what each proxy adds over direct. Then
# streaming time to first byte the same way, and loopguard's RSS.
# Figures are differences and ratios within one run: the machine is shared
# and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES="${RATES:-100 1000}"
HISTORIES="${HISTORIES:-0 500000 2000000}"
HISTORY_RATE="${HISTORY_RATE:-200}"   # req/s for the history loads
DURATION="${DURATION:-10}"            # seconds per round
ROUNDS="${ROUNDS:-3}"
TTFB_N="${TTFB_N:-2000}"              # streaming requests per path and round
OHA="${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}"
[ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked" >&2; exit 1; }

. benches/common.sh # (the script runs from the repository root)
. benches/nginx.sh
bench_setup 'max_request_bytes = 67108864'
nginx_setup
# loopguard routes /v1 to the canned upstream, and /stream (not stripped)
# to its canned event stream.
cat >"$WORK/lg.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
max_request_bytes = 67108864
[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "$CANNED"
[[routes]]
prefix = "/stream"
provider = "openai"
upstream = "$CANNED"
# oha -Z cycles through its bodies, so each history body is resent every
# few seconds: the replay-storm breaker would answer in the upstream's place.
[loop_detection.replay_storm]
enabled = false
TOML
# Extra configuration for loopguard (and BASE_BIN), e.g.
# LG_EXTRA=$'[sessions]\nparse_cache_mib = 512'.
printf '%s\n' "${LG_EXTRA:-}" >>"$WORK/lg.toml"
LOOPGUARD_LOG=warn "$BIN" serve --config "$WORK/lg.toml" >"$WORK/lg.out" 2>"$WORK/lg.err" &
LG_PID=$!
sleep 0.5
LG="http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/lg.out")"
PATHS=("direct $CANNED" "nginx $NGINX_PROXY" "loopguard $LG")
if [ -n "${BASE_BIN:-}" ]; then
  LOOPGUARD_LOG=warn "$BASE_BIN" serve --config "$WORK/lg.toml" >"$WORK/base.out" 2>"$WORK/base.err" &
  sleep 0.5
  BASE="http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/base.out")"
  PATHS+=("base $BASE")
fi
if [ -n "${FLOOR:-}" ]; then
  # The same server and upstream client with no parse and no detection: what
  # the stack alone adds over nginx.
  cargo build --release --locked --quiet --example floor_proxy
  "${CARGO_TARGET_DIR:-target}/release/examples/floor_proxy" 127.0.0.1:0 "$CANNED" >"$WORK/floor.out" 2>"$WORK/floor.err" &
  sleep 0.5
  PATHS+=("floor http://$(sed -n 's/listening on //p' "$WORK/floor.out")")
fi
rss() { awk '/VmRSS/ {print $2}' "/proc/$LG_PID/status"; }
RSS_IDLE=$(rss)

# Bodies: one per line, each its own conversation (a distinct first user
# message, so a distinct fingerprinted session), ending in one tool result;
# with HISTORY > 0, about HISTORY bytes of distinct earlier tool cycles.
bodies() { # history_bytes count file
  python3 benches/bodies.py "$@"
}

run_oha() { # base_url path rate bodies_file -> "p50_ms p99_ms success"
  "$OHA" -z "${DURATION}s" -q "$3" --latency-correction --no-tui --output-format json -m POST \
    -H 'content-type: application/json' -Z "$4" "$1$2" >"$WORK/oha.json"
  python3 - "$WORK/oha.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["latencyPercentiles"]
print(f'{p["p50"]*1000:.3f} {p["p99"]*1000:.3f} {d["summary"]["successRate"]}')
PY
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
# Each history body twice through every path before its rounds: the first
# request of a conversation is parsed whole (tens of ms for 2 MB), which is
# the cost of a new conversation, not of the hop this run measures; after
# the one-cycle loads' 20,000 conversations, the parse cache keeps a history
# from its conversation's second request on (its admission test).
warm() { # bodies_file path
  local file="$1" path="$2"
  for entry in "${PATHS[@]}"; do
    set -- $entry
    "$OHA" -n "$((2 * $(wc -l <"$file")))" -c 1 --no-tui -m POST -H 'content-type: application/json' \
      -Z "$file" "$2$path" >/dev/null 2>&1 || true
  done
}
measure() { # label rate bodies_file path
  local label="$1" rate="$2" file="$3" path="$4"
  in_rotating_rounds measure_path PATHS
}
measure_path() { # round "name url" (measure's locals in scope)
  local r="$1"
  set -- $2
  read -r p50 p99 ok < <(run_oha "$2" "$path" "$rate" "$file")
  echo "$label $1 $p50 $p99 $ok" >>"$RESULTS"
  echo "  $label round $r: $1 p50 $p50 ms p99 $p99 ms (success $ok)"
}

for h in $HISTORIES; do
  if [ "$h" = 0 ]; then
    bodies 0 20000 "$WORK/bodies-0.txt"
    for rate in $RATES; do
      echo "one tool cycle, $rate req/s"
      measure "cycle@$rate" "$rate" "$WORK/bodies-0.txt" /v1/chat/completions
    done
  else
    bodies "$h" 40 "$WORK/bodies-$h.txt"
    echo "history ~$((h / 1000)) KB, $HISTORY_RATE req/s"
    warm "$WORK/bodies-$h.txt" /v1/chat/completions
    measure "history$((h / 1000))KB@$HISTORY_RATE" "$HISTORY_RATE" "$WORK/bodies-$h.txt" /v1/chat/completions
  fi
done

# Streaming: the canned event stream; oha's latency is the whole (instant)
# stream, so close to its time to first byte.
python3 -c 'import json
for n in range(20000):
    print(json.dumps({"model":"m","stream":True,"messages":[{"role":"user","content":f"stream {n}"}]}))' >"$WORK/stream.txt"
echo "streaming, 1000 req/s"
measure "stream@1000" 1000 "$WORK/stream.txt" /stream/v1/chat/completions
RSS_LOADED=$(rss)

python3 - "$RESULTS" "$RSS_IDLE" "$RSS_LOADED" <<'PY'
import collections, statistics as s, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    label, path, p50, p99, ok = line.split()
    rows[label][path].append((float(p50), float(p99), float(ok)))
print()
extras = [p for p in ("base", "floor") if any(p in paths for paths in rows.values())]
head = "".join(f" {p} added p50 / p99 | {p} ratio |" for p in extras)
print("| load | direct p50 / p99 | nginx added p50 / p99 | loopguard added p50 / p99 | ratio (p50 added) |" + head + " success |")
print("|---|---|---|---|---|" + "---|---|" * len(extras) + "---|")
for label, paths in rows.items():
    med = {p: (s.median(x[0] for x in v), s.median(x[1] for x in v), min(x[2] for x in v)) for p, v in paths.items()}
    d, n, l = med["direct"], med["nginx"], med["loopguard"]
    na, la = n[0] - d[0], l[0] - d[0]
    ratio = f"{la / na:.2f}x" if na > 0 else "n/a"
    cols = ""
    for p in extras:
        b = med[p]
        ba = b[0] - d[0]
        cols += f" {ba:+.3f} / {b[1]-d[1]:+.3f} ms | {ba / na:.2f}x |" if na > 0 else " n/a | n/a |"
    ok = min(x[2] for x in med.values())
    print(f"| {label} | {d[0]:.3f} / {d[1]:.3f} ms | {na:+.3f} / {n[1]-d[1]:+.3f} ms | {la:+.3f} / {l[1]-d[1]:+.3f} ms | {ratio} |{cols} {ok:.4f} |")
print(f"\nloopguard RSS: idle {int(sys.argv[2])/1024:.1f} MiB, after the load {int(sys.argv[3])/1024:.1f} MiB")
PY
