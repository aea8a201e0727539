# Sourced by the end-to-end bench scripts: the binary under test, a work
# directory removed on exit (with every background job), the mock upstream,
# and a loopguard config routing /v1 to it.
#
#   . benches/common.sh; bench_setup 'extra [server] lines'
#
# Sets BIN (built in release unless given), WORK, MOCK (its URL) and writes
# "$WORK/lg.toml".
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
