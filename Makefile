# loopguard: build and test entry points. `make test` is what CI runs.

VENV := .venv
PY := $(VENV)/bin/python
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

AGENTS := tests/agents

.PHONY: test lint run bench-e2e agents

# The whole suite: Rust unit and end-to-end tests (real agent CLIs included),
# then the official Python SDKs against the built binary. Installs the pinned
# Python packages and agent CLIs on first use.
test: $(VENV)/.installed agents
	cargo build --locked
	cargo test --locked
	LOOPGUARD_BIN=$(TARGET_DIR)/debug/loopguard $(PY) -m pytest tests/python -q -rs

lint:
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --lib

# The proxy on the default config (config/loopguard.toml).
run:
	cargo run --locked -- serve

bench-e2e:
	benches/e2e.sh

$(VENV)/.installed: tests/python/requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.lock
	touch $@

# The agent CLIs tests/real_agents.rs drives (Gemini CLI, OpenCode, Codex,
# Claude Code), exact versions from tests/agents/package.json +
# package-lock.json, into tests/agents/node_modules. `npm install --no-save`
# rather than `npm ci`: the lock file holds only the platform packages the
# registry served when it was written, and npm ci refuses a lock file without
# the other platforms'. Install scripts follow package.json's allowScripts
# (only opencode-ai's and @anthropic-ai/claude-code's, which put the platform
# binary from the optional dependency in place; Codex's launcher finds its
# platform package at run time and has no install script).
agents: $(AGENTS)/node_modules/.installed

$(AGENTS)/node_modules/.installed: $(AGENTS)/package.json $(AGENTS)/package-lock.json
	cd $(AGENTS) && npm install --no-save --no-audit --no-fund --loglevel=error
	$(AGENTS)/node_modules/.bin/gemini --version
	$(AGENTS)/node_modules/.bin/opencode --version
	$(AGENTS)/node_modules/.bin/codex --version
	$(AGENTS)/node_modules/.bin/claude --version
	touch $@
