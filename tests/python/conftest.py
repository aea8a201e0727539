"""Fixtures for the SDK tests: the built loopguard binary, run as the mock
upstream and as the proxy in front of it, on 127.0.0.1 ephemeral ports."""

import json
import os
import pathlib
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary() -> str:
    explicit = os.environ.get("LOOPGUARD_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    path = pathlib.Path(target) / "debug" / "loopguard"
    if not path.exists():
        pytest.exit(f"loopguard binary not found at {path}: run `cargo build` first or set LOOPGUARD_BIN")
    return str(path)


def fixtures_dir() -> str:
    path = pathlib.Path(os.environ.get("LOOPGUARD_FIXTURES", ROOT.parent / "shared" / "fixtures"))
    if not (path / "SOURCES.md").exists():
        pytest.exit(f"recorded fixtures not found at {path}: set LOOPGUARD_FIXTURES")
    return str(path)


class Proc:
    def __init__(self, args, marker):
        self.log = tempfile.NamedTemporaryFile(prefix="loopguard-py-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [binary(), "--log-format", "json", *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{args[0]} did not start: {pathlib.Path(self.log.name).read_text()}")
        self.line = line
        self.marker = marker

    def addr(self, key):
        rest = self.line.split(key, 1)[1]
        return rest.split()[0]

    def logs(self):
        return pathlib.Path(self.log.name).read_text()

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def mock():
    proc = Proc(["mock-upstream", "--listen", "127.0.0.1:0", "--fixtures", fixtures_dir()], "mock")
    proc.url = "http://" + proc.addr("listening on ")
    yield proc
    proc.stop()


def start_loopguard(mock, extra=""):
    config = f"""
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "{mock.url}"

[[routes]]
prefix = "/v1beta"
provider = "gemini"
upstream = "{mock.url}"

[[routes]]
prefix = "/gemini"
provider = "gemini"
upstream = "{mock.url}"
strip_prefix = true

[[routes]]
prefix = "/anthropic"
provider = "anthropic"
upstream = "{mock.url}"
strip_prefix = true

[[routes]]
prefix = "/ollama"
provider = "ollama"
upstream = "{mock.url}"
strip_prefix = true

{extra}
"""
    path = tempfile.NamedTemporaryFile(prefix="loopguard-py-", suffix=".toml", delete=False)
    path.write(config.encode())
    path.close()
    proc = Proc(["serve", "--config", path.name], "loopguard")
    proc.url = "http://" + proc.addr("proxy=")
    proc.admin = "http://" + proc.addr("admin=")
    return proc


@pytest.fixture(scope="session")
def loopguard(mock):
    proc = start_loopguard(mock)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def loopguard_abort(mock):
    """loopguard with critical verdicts answered by abort (the CI setting)."""
    proc = start_loopguard(mock, '[loop_detection.actions]\ncritical = "abort"\n')
    yield proc
    proc.stop()


def mock_requests(mock, session):
    """The requests the mock received for one session, told by the
    `x-test-session` header the tests send beside `x-loopguard-session`
    (loopguard's own headers are not forwarded upstream)."""
    import urllib.request

    with urllib.request.urlopen(mock.url + "/_mock/requests") as r:
        every = json.load(r)
    return [x for x in every if x["headers"].get("x-test-session") == session]


def log_events(proc, message):
    """The JSON log lines of `proc` whose message is `message` (`request`,
    `verdict`, …), in order."""
    out = []
    for line in proc.logs().splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if value.get("message") == message:
            out.append(value)
    return out


def request_log_lines(proc):
    return log_events(proc, "request")
