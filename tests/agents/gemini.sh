#!/usr/bin/env bash
# Runs Gemini CLI headless (stream-json output on stdout) against BASE_URL,
# e.g. loopguard's root URL (Gemini CLI appends /v1beta/models/…).
#
#   tests/agents/gemini.sh http://127.0.0.1:8080 ["prompt"]
#
# Everything the CLI reads or writes lives in a throw-away directory
# ($AGENT_WORKDIR, else a new temporary one): HOME with .gemini/settings.json
# (API-key auth; telemetry, usage statistics and auto-update off) and the
# project it works in (one file, hello.txt). The key is fake: point BASE_URL
# at loopguard in front of the mock upstream, never at Google.
#
# GEMINI_WIRE=vertex runs it on Vertex AI instead (auth type `vertex-ai` with
# an express-mode API key): BASE_URL is then GOOGLE_VERTEX_BASE_URL (e.g.
# loopguard's /vertex route).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base_url="${1:?usage: gemini.sh BASE_URL [PROMPT]}"
prompt="${2:-List the files in this directory.}"
bin="$here/node_modules/.bin/gemini"
if [ ! -x "$bin" ]; then
  echo "gemini.sh: $bin is missing: run \`make agents\` first" >&2
  exit 127
fi
work="${AGENT_WORKDIR:-$(mktemp -d)}"
mkdir -p "$work/home/.gemini" "$work/project"
cp "$here/gemini/settings.json" "$work/home/.gemini/settings.json"
printf 'hello\n' >"$work/project/hello.txt"
cd "$work/project"

# Only what this run needs: no credentials or Google settings from the caller.
unset GOOGLE_API_KEY GOOGLE_APPLICATION_CREDENTIALS GOOGLE_CLOUD_PROJECT \
  GOOGLE_CLOUD_LOCATION GOOGLE_GENAI_USE_VERTEXAI GOOGLE_GENAI_USE_GCA \
  GEMINI_MODEL GEMINI_CLI_CUSTOM_HEADERS
export HOME="$work/home"
case "${GEMINI_WIRE:-gemini}" in
  gemini)
    export GEMINI_API_KEY="fake-key-for-loopguard-tests"
    export GOOGLE_GEMINI_BASE_URL="$base_url"
    ;;
  vertex)
    unset GEMINI_API_KEY GOOGLE_GEMINI_BASE_URL
    sed -i 's/"gemini-api-key"/"vertex-ai"/' "$work/home/.gemini/settings.json"
    export GOOGLE_GENAI_USE_VERTEXAI=true
    export GOOGLE_API_KEY="fake-key-for-loopguard-tests"
    export GOOGLE_VERTEX_BASE_URL="$base_url"
    ;;
  *)
    echo "gemini.sh: unknown GEMINI_WIRE=$GEMINI_WIRE (gemini or vertex)" >&2
    exit 2
    ;;
esac
export GEMINI_TELEMETRY_ENABLED=false
export NO_COLOR=1
exec "$bin" --prompt "$prompt" --yolo --skip-trust --output-format stream-json
