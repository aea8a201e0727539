#!/usr/bin/env bash
# Runs Claude Code headless (`claude -p`, stream-json events on stdout)
# against BASE_URL, an Anthropic base URL such as loopguard's /anthropic route
# (Claude Code appends /v1/messages?beta=true).
#
#   tests/agents/claude.sh http://127.0.0.1:8080/anthropic ["prompt"]
#
# Everything Claude Code reads or writes lives in a throw-away directory
# ($AGENT_WORKDIR, else a new temporary one): HOME (its ~/.claude and
# ~/.claude.json) and the project it works in (one file, hello.txt). Tools run
# without asking (--dangerously-skip-permissions; as root that also needs
# IS_SANDBOX=1). Non-essential traffic (the HEAD /api/hello preflight,
# telemetry, error reports, update checks) is off. The key is fake: point
# BASE_URL at loopguard in front of the mock upstream, never at Anthropic.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base_url="${1:?usage: claude.sh BASE_URL [PROMPT]}"
prompt="${2:-Show me what hello.txt says.}"
bin="$here/node_modules/.bin/claude"
if [ ! -x "$bin" ]; then
  echo "claude.sh: $bin is missing: run \`make agents\` first" >&2
  exit 127
fi
work="${AGENT_WORKDIR:-$(mktemp -d)}"
mkdir -p "$work/home" "$work/project"
printf 'hello\n' >"$work/project/hello.txt"
cd "$work/project"

# Only what this run needs: no credentials or Claude settings from the caller.
unset ANTHROPIC_AUTH_TOKEN ANTHROPIC_MODEL ANTHROPIC_SMALL_FAST_MODEL \
  ANTHROPIC_CUSTOM_HEADERS ANTHROPIC_BETAS CLAUDE_CONFIG_DIR \
  CLAUDE_CODE_USE_BEDROCK CLAUDE_CODE_USE_VERTEX CLAUDE_CODE_USE_FOUNDRY \
  CLAUDE_CODE_OAUTH_TOKEN CLAUDE_CODE_ENTRYPOINT CLAUDECODE
export HOME="$work/home"
export ANTHROPIC_BASE_URL="$base_url"
export ANTHROPIC_API_KEY="fake-key-for-loopguard-tests"
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
if [ "$(id -u)" = 0 ]; then
  export IS_SANDBOX=1
fi
export NO_COLOR=1
exec "$bin" -p "$prompt" --dangerously-skip-permissions \
  --output-format stream-json --verbose </dev/null
