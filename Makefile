# loopguard: build and test entry points. `make test` is what CI runs.

VENV := .venv
PY := $(VENV)/bin/python
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: test lint run bench-e2e

# The whole suite: Rust unit and end-to-end tests, then the official Python
# SDKs against the built binary. Installs the pinned Python packages on first use.
test: $(VENV)/.installed
	cargo build --locked
	cargo test --locked
	LOOPGUARD_BIN=$(TARGET_DIR)/debug/loopguard $(PY) -m pytest tests/python -q

lint:
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings

# The proxy on the default config (config/loopguard.toml).
run:
	cargo run --locked -- serve

bench-e2e:
	benches/e2e.sh

$(VENV)/.installed: tests/python/requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.lock
	touch $@
