#!/usr/bin/env bash
# Soak (not a timed test): 1,000 concurrent slow streams plus 200 concurrent
# non-streaming clients for a few minutes through the release binary against
# the mock upstream. Reports errors (goal 0; each with its reason and time),
# p50/p99 time to first byte, loopguard's RSS and open fds every 10 s (goal:
# flat). Exits 1 on any error.
#
#   benches/soak.sh [--seconds N] [--streams N] [--clients N] [--procs N]
#
# --procs: client processes (default 2), the load split between them. On a
# machine of 2+ cores loopguard is pinned to core 0 and the mock and the
# clients to the others (taskset), so the client never starves the proxy
# (LG_CPUS / LOAD_CPUS override). PYTHON=path/to/python picks an
# interpreter with httpx2 or httpx; without it a venv in target/soak-venv
# gets the exact pins of benches/soak-requirements.txt (from PyPI, once).
# Needs a release build (built if missing). Raises the soft fd limit for
# itself.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=180 streams=1000 clients=200 procs=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --streams) streams="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --procs) procs="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 || true
echo "fd limit: $(ulimit -n)"
[[ -x target/release/loopguard ]] || cargo build --release --locked
bin=target/release/loopguard
if [[ -z "${PYTHON:-}" ]]; then
    if [[ ! -x target/soak-venv/bin/python ]]; then
        python3 -m venv target/soak-venv
        target/soak-venv/bin/pip install -q --no-deps -r benches/soak-requirements.txt
    fi
    PYTHON=target/soak-venv/bin/python
fi
# Pinning: loopguard alone on core 0, the mock and the clients elsewhere.
lg_pin=() load_pin=()
if command -v taskset >/dev/null && [[ $(nproc) -ge 2 ]]; then
    lg_pin=(taskset -c "${LG_CPUS:-0}")
    load_pin=(taskset -c "${LOAD_CPUS:-1-$(( $(nproc) - 1 ))}")
fi
echo "pinning: loopguard ${lg_pin[*]:-none}, mock and clients ${load_pin[*]:-none}"
work=$(mktemp -d)
# SOAK_LOGS=dir keeps loopguard's and the mock's logs there.
trap 'kill $(jobs -p) 2>/dev/null || true; [[ -n "${SOAK_LOGS:-}" ]] && mkdir -p "$SOAK_LOGS" && cp "$work"/*.log "$work"/*.out "$SOAK_LOGS"/; rm -rf "$work"' EXIT
fixtures="${LOOPGUARD_FIXTURES:-$(cd .. && pwd)/shared/fixtures}"
# A paced mock: each stream trickles its events (slow streams).
"${load_pin[@]}" "$bin" mock-upstream --listen 127.0.0.1:0 --fixtures "$fixtures" --pace-ms 200 >"$work/mock.out" 2>"$work/mock.log" &
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
"${lg_pin[@]}" "$bin" serve --config "$work/lg.toml" >"$work/lg.out" 2>"$work/lg.log" &
lg_pid=$!
for _ in $(seq 50); do grep -q "proxy=" "$work/lg.out" 2>/dev/null && break; sleep 0.1; done
proxy=$(grep -o 'proxy=[0-9.:]*' "$work/lg.out" | cut -d= -f2)
echo "mock $mock, loopguard $proxy (pid $lg_pid), $streams streams + $clients clients for $seconds s"
"${load_pin[@]}" "$PYTHON" benches/soak_client.py "http://$proxy" "$seconds" "$streams" "$clients" "$lg_pid" "$procs"
