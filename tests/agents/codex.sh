#!/usr/bin/env bash
# Runs `codex exec` headless (JSONL events on stdout, `--json`) against
# BASE_URL, an OpenAI base URL such as loopguard's /v1 route (Codex appends
# /responses).
#
#   tests/agents/codex.sh http://127.0.0.1:8080/v1 ["prompt"]
#
# Everything Codex reads or writes lives in a throw-away directory
# ($AGENT_WORKDIR, else a new temporary one): HOME, CODEX_HOME with
# config.toml from codex/ (provider `loopguard`, wire_api "responses",
# approval "never", no sandbox, no update check, analytics or feedback), and
# the project it works in (one file, hello.txt). The key is fake: point
# BASE_URL at loopguard in front of the mock upstream, never at OpenAI.
# stdin is /dev/null: `codex exec` appends piped stdin to the prompt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base_url="${1:?usage: codex.sh BASE_URL [PROMPT]}"
prompt="${2:-Show me what hello.txt says.}"
bin="$here/node_modules/.bin/codex"
if [ ! -x "$bin" ]; then
  echo "codex.sh: $bin is missing: run \`make agents\` first" >&2
  exit 127
fi
work="${AGENT_WORKDIR:-$(mktemp -d)}"
mkdir -p "$work/home/.codex" "$work/project"
cp "$here/codex/config.toml" "$work/home/.codex/config.toml"
printf 'hello\n' >"$work/project/hello.txt"
cd "$work/project"

# Only what this run needs: no credentials or Codex settings from the caller.
unset OPENAI_API_KEY OPENAI_BASE_URL CODEX_API_KEY CODEX_HOME CODEX_SANDBOX \
  CODEX_SANDBOX_NETWORK_DISABLED
export HOME="$work/home"
export CODEX_HOME="$work/home/.codex"
export LOOPGUARD_TEST_KEY="fake-key-for-loopguard-tests"
export NO_COLOR=1
exec "$bin" exec --skip-git-repo-check --strict-config --json --color never \
  -c "model_providers.loopguard.base_url=\"$base_url\"" \
  "$prompt" </dev/null
