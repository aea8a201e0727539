# Sourced by the end-to-end bench scripts: the binary under test, a work
# directory removed on exit (with every background job), the mock upstream,
# and a loopguard config routing /v1 to it.
#
#   . benches/common.sh; bench_setup 'extra [server] lines'
#
# Sets BIN (built in release unless given), WORK, MOCK (its URL) and writes
# "$WORK/lg.toml". Then `start_loopguard_and_floor URL` (below) starts
# loopguard on that config beside the HTTP stack alone.
bench_setup() {
  if [ -z "${BIN:-}" ]; then
    cargo build --release --locked --quiet
    BIN="${CARGO_TARGET_DIR:-target}/release/loopguard"
  fi
  WORK="$(mktemp -d)"
  trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
  "$BIN" mock-upstream --listen 127.0.0.1:0 >"$WORK/mock.out" 2>/dev/null &
  sleep 0.5
  MOCK="http://$(sed -n 's/.*listening on //p' "$WORK/mock.out")"
  cat >"$WORK/lg.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
${1:-}
[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "$MOCK"
TOML
}

# Starts loopguard on "$WORK/lg.toml" and examples/floor_proxy.rs (loopguard's
# HTTP stack alone) forwarding to the upstream URL $1, and waits for both.
# Sets LG and FLOOR_URL (their URLs), LG_PID and FLOOR_PID.
start_loopguard_and_floor() {
  LOOPGUARD_LOG=warn "$BIN" serve --config "$WORK/lg.toml" >"$WORK/lg.out" 2>"$WORK/lg.err" &
  LG_PID=$!
  cargo build --release --locked --quiet --example floor_proxy
  "${CARGO_TARGET_DIR:-target}/release/examples/floor_proxy" 127.0.0.1:0 "$1" >"$WORK/floor.out" 2>"$WORK/floor.err" &
  FLOOR_PID=$!
  for _ in $(seq 1 100); do
    grep -q 'proxy=' "$WORK/lg.out" && grep -q 'listening on' "$WORK/floor.out" && break
    sleep 0.1
  done
  LG="http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/lg.out")"
  FLOOR_URL="http://$(sed -n 's/listening on //p' "$WORK/floor.out")"
  [ "$LG" != "http://" ] && [ "$FLOOR_URL" != "http://" ] || { echo "loopguard or the floor proxy did not start" >&2; exit 1; }
}

# Calls `$1 ROUND ENTRY` for each of the ROUNDS rounds and each entry of the
# array named $2, the entries in an order that turns by one each round, so
# that no path always runs first or after the same other path.
in_rotating_rounds() {
  local -n entries="$2"
  local r k order entry
  for r in $(seq 1 "$ROUNDS"); do
    k=$(( (r - 1) % ${#entries[@]} ))
    order=("${entries[@]:$k}" "${entries[@]:0:$k}")
    for entry in "${order[@]}"; do
      "$1" "$r" "$entry"
    done
  done
}
