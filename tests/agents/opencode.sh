#!/usr/bin/env bash
# Runs `opencode run` headless against BASE_URL, an OpenAI-compatible base
# URL such as loopguard's /v1 route.
#
#   tests/agents/opencode.sh http://127.0.0.1:8080/v1 ["prompt"]
#
# Everything OpenCode reads or writes lives in a throw-away directory
# ($AGENT_WORKDIR, else a new temporary one): HOME and the XDG directories,
# and the project it works in (opencode.json from this directory, which
# declares the provider `loopguard` through @ai-sdk/openai-compatible with
# options.baseURL = BASE_URL and a fake key, and one file, notes.txt).
# Auto-update, sharing, the models.dev download, LSP downloads and default
# plugins are off; npm runs offline, so OpenCode's background install of
# its plugin package fails at once instead of reaching the registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base_url="${1:?usage: opencode.sh BASE_URL [PROMPT]}"
prompt="${2:-Read notes.txt and tell me what it says.}"
bin="$here/node_modules/.bin/opencode"
if [ ! -x "$bin" ]; then
  echo "opencode.sh: $bin is missing: run \`make agents\` first" >&2
  exit 127
fi
work="${AGENT_WORKDIR:-$(mktemp -d)}"
mkdir -p "$work/home" "$work/project"
cp "$here/opencode/opencode.json" "$work/project/opencode.json"
printf 'The answer is 42.\n' >"$work/project/notes.txt"
cd "$work/project"

unset OPENAI_API_KEY OPENAI_BASE_URL ANTHROPIC_API_KEY OPENCODE_CONFIG \
  OPENCODE_CONFIG_CONTENT OPENCODE_CONFIG_DIR
export HOME="$work/home"
export XDG_CONFIG_HOME="$work/home/.config" XDG_DATA_HOME="$work/home/.local/share"
export XDG_CACHE_HOME="$work/home/.cache" XDG_STATE_HOME="$work/home/.local/state"
export LOOPGUARD_OPENAI_BASE_URL="$base_url"
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_SHARE=1 \
  OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
  OPENCODE_DISABLE_DEFAULT_PLUGINS=1
export npm_config_offline=true
export NO_COLOR=1
exec "$bin" run "$prompt"
