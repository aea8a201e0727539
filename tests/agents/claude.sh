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
#
# CLAUDE_WIRE=vertex runs it on Claude on Vertex AI instead: BASE_URL is then
# ANTHROPIC_VERTEX_BASE_URL (e.g. loopguard's /vertex-claude/v1; Claude Code
# appends /projects/p/locations/us-east5/publishers/anthropic/models/{m}:streamRawPredict),
# with Google auth skipped (no credential is sent). CLAUDE_WIRE=bedrock runs
# it on Amazon Bedrock: BASE_URL is ANTHROPIC_BEDROCK_BASE_URL (e.g.
# loopguard's /bedrock; Claude Code appends /model/{id}/invoke-with-response-stream),
# AWS auth skipped (no SigV4 signature is sent); CLAUDE_WIRE=bedrock-key the
# same with a (fake) Bedrock API key, sent as a bearer token.
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
  ANTHROPIC_BEDROCK_BASE_URL ANTHROPIC_VERTEX_BASE_URL AWS_PROFILE AWS_ACCESS_KEY_ID \
  AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_BEARER_TOKEN_BEDROCK \
  CLAUDE_CODE_OAUTH_TOKEN CLAUDE_CODE_ENTRYPOINT CLAUDECODE
export HOME="$work/home"
case "${CLAUDE_WIRE:-anthropic}" in
  anthropic)
    export ANTHROPIC_BASE_URL="$base_url"
    export ANTHROPIC_API_KEY="fake-key-for-loopguard-tests"
    ;;
  vertex)
    unset ANTHROPIC_BASE_URL ANTHROPIC_API_KEY
    export CLAUDE_CODE_USE_VERTEX=1 CLAUDE_CODE_SKIP_VERTEX_AUTH=1
    export ANTHROPIC_VERTEX_BASE_URL="$base_url"
    export ANTHROPIC_VERTEX_PROJECT_ID=p CLOUD_ML_REGION=us-east5
    ;;
  bedrock)
    unset ANTHROPIC_BASE_URL ANTHROPIC_API_KEY
    export CLAUDE_CODE_USE_BEDROCK=1 CLAUDE_CODE_SKIP_BEDROCK_AUTH=1
    export ANTHROPIC_BEDROCK_BASE_URL="$base_url" AWS_REGION=us-east-1
    ;;
  bedrock-key)
    # A Bedrock API key: sent as `Authorization: Bearer`, not SigV4.
    unset ANTHROPIC_BASE_URL ANTHROPIC_API_KEY
    export CLAUDE_CODE_USE_BEDROCK=1 AWS_BEARER_TOKEN_BEDROCK="ABSK-fake-key-for-loopguard-tests"
    export ANTHROPIC_BEDROCK_BASE_URL="$base_url" AWS_REGION=us-east-1
    ;;
  *)
    echo "claude.sh: unknown CLAUDE_WIRE=$CLAUDE_WIRE (anthropic, vertex, bedrock or bedrock-key)" >&2
    exit 2
    ;;
esac
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
if [ "$(id -u)" = 0 ]; then
  export IS_SANDBOX=1
fi
export NO_COLOR=1
exec "$bin" -p "$prompt" --dangerously-skip-permissions \
  --output-format stream-json --verbose </dev/null
