#!/usr/bin/env bash
# Soak (not a timed test): 1,000 concurrent slow streams plus 200 concurrent
# non-streaming clients for a few minutes through the release binary against
# the mock upstream. Reports errors (goal 0), p50/p99 time to first byte,
# loopguard's RSS and open fds every 10 s (goal: flat).
#
#   benches/soak.sh [--seconds N] [--streams N] [--clients N]
#
# Needs python3 with httpx2 or httpx (PYTHON=path/to/python to pick one;
# .venv/bin/python after `make test` has httpx2) and a
# release build (built if missing). Raises the soft fd limit for itself.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=180 streams=1000 clients=200
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --streams) streams="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 || true
echo "fd limit: $(ulimit -n)"
[[ -x target/release/loopguard ]] || cargo build --release --locked
bin=target/release/loopguard
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
fixtures="${LOOPGUARD_FIXTURES:-$(cd .. && pwd)/shared/fixtures}"
# A paced mock: each stream trickles its events (slow streams).
"$bin" mock-upstream --listen 127.0.0.1:0 --fixtures "$fixtures" --pace-ms 200 >"$work/mock.out" 2>"$work/mock.log" &
for _ in $(seq 50); do grep -q "listening on" "$work/mock.out" 2>/dev/null && break; sleep 0.1; done
mock=$(grep -o 'listening on [0-9.:]*' "$work/mock.out" | awk '{print $3}')
cat >"$work/lg.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "http://$mock"
TOML
"$bin" serve --config "$work/lg.toml" >"$work/lg.out" 2>"$work/lg.log" &
lg_pid=$!
for _ in $(seq 50); do grep -q "proxy=" "$work/lg.out" 2>/dev/null && break; sleep 0.1; done
proxy=$(grep -o 'proxy=[0-9.:]*' "$work/lg.out" | cut -d= -f2)
echo "mock $mock, loopguard $proxy (pid $lg_pid), $streams streams + $clients clients for $seconds s"
"${PYTHON:-python3}" benches/soak_client.py "http://$proxy" "$seconds" "$streams" "$clients" "$lg_pid"
