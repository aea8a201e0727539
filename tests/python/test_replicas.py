"""Several replicas, one memory (issue #15): three loopguard replicas with
`[state] backend = "redis"` behind nginx round-robin (both from the Debian
packages, started here on loopback ephemeral ports), so every request of an
agent loop lands on a different replica. The official SDK loops of the four
dialects are warned at the 3rd identical call and blocked at the 5th exactly
as through one instance; a replica killed mid-session, Redis killed
mid-session and two replicas racing on one session lose nothing.

Skipped, with the reason printed, when redis-server or nginx is missing
(`.ci/run` installs both)."""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import mock_requests, request_log_lines, start_loopguard
from test_loops import gemini_loop, openai_loop, warned_requests_gemini, warned_requests_openai
from test_responses_anthropic import anthropic_loop, responses_loop, warned_anthropic, warned_responses

REDIS = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

pytestmark = pytest.mark.skipif(
    not (REDIS and REDIS_CLI and NGINX),
    reason=f"needs redis-server, redis-cli and nginx (apt-get install redis-server nginx-light); found redis-server={REDIS} redis-cli={REDIS_CLI} nginx={NGINX}",
)

WARNED = [(0, False), (1, False), (2, False), (3, True), (4, True)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="loopguard-redis-")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def cli(self, *args):
        out = subprocess.run([REDIS_CLI, "-p", str(self.port), *args], capture_output=True, text=True)
        return out.stdout

    def keys(self, pattern):
        return [k for k in self.cli("--scan", "--pattern", pattern).split() if k]

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"


class Nginx:
    def __init__(self, backends):
        self.port = free_port()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="loopguard-nginx-"))
        servers = "\n".join(f"    server {b.removeprefix('http://')} max_fails=0;" for b in backends)
        conf = f"""
daemon off;
master_process off;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {self.dir}/access.log;
  client_body_temp_path {self.dir}/body;
  proxy_temp_path {self.dir}/proxy;
  fastcgi_temp_path {self.dir}/fastcgi;
  uwsgi_temp_path {self.dir}/uwsgi;
  scgi_temp_path {self.dir}/scgi;
  upstream replicas {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{self.port};
    client_max_body_size 64m;
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_next_upstream error;
    }}
  }}
}}
"""
        (self.dir / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen([NGINX, "-c", str(self.dir / "nginx.conf"), "-p", str(self.dir)], stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"nginx did not start: {(self.dir / 'error.log').read_text()}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def state_config(redis, prefix, timeout_ms=50):
    return f'[state]\nbackend = "redis"\nurl = "{redis.url}"\nkey_prefix = "{prefix}"\ntimeout_ms = {timeout_ms}\n'


class Cluster:
    """Redis, three replicas and nginx in front of them."""

    def __init__(self, mock, prefix, timeout_ms=50):
        self.redis = Redis()
        self.prefix = prefix
        self.replicas = [start_loopguard(mock, state_config(self.redis, prefix, timeout_ms)) for _ in range(3)]
        for r in self.replicas:
            wait_connected(r)
        self.nginx = Nginx([r.url for r in self.replicas])

    def served(self, since):
        """(time, replica index) of every request line logged after `since` line counts."""
        out = []
        for i, r in enumerate(self.replicas):
            lines = request_log_lines(r)[since[i]:]
            out.extend((line["timestamp"], i) for line in lines)
        return [i for _, i in sorted(out)]

    def marks(self):
        return [len(request_log_lines(r)) for r in self.replicas]

    def stop(self):
        self.nginx.stop()
        for r in self.replicas:
            r.stop()
        self.redis.kill()


def wait_connected(replica):
    for _ in range(300):
        if "state store connected" in replica.logs():
            return
        time.sleep(0.02)
    raise RuntimeError("replica never connected to redis: " + replica.logs()[-2000:])


@contextlib.contextmanager
def one_replica(mock, prefix, extra=""):
    """redis-server and one replica keeping its sessions there under
    `prefix` (connected), both stopped afterwards."""
    redis = Redis()
    replica = start_loopguard(mock, state_config(redis, prefix) + extra)
    try:
        wait_connected(replica)
        yield redis, replica
    finally:
        replica.stop()
        redis.kill()


def metric(replica, name):
    with urllib.request.urlopen(replica.admin + "/metrics") as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def cluster(mock):
    c = Cluster(mock, "lgtest:")
    yield c
    c.stop()


def session_id():
    import uuid

    return "replicas-" + uuid.uuid4().hex


def writes(redis, key):
    """How many times a stored session was written: its version counts up
    by one from the version its history started at (`b`, drawn at random)."""
    version, base = redis.cli("HMGET", key, "v", "b").split()[:2] if redis.cli("EXISTS", key).strip() == "1" else ("0", "1")
    return int(version) - int(base) + 1


def assert_rotated(cluster, marks, n):
    """The loop's n requests went round the three replicas, and each one
    wrote the shared session (its version counts the writes)."""
    served = cluster.served(marks)
    assert len(served) == n, served
    assert all(a != b for a, b in zip(served, served[1:])), f"two requests in a row on one replica: {served}"
    assert set(served) == {0, 1, 2}, served
    sessions = {line["session"] for r in cluster.replicas for line in request_log_lines(r)[-n:] if line.get("session")}
    written = [writes(cluster.redis, cluster.prefix + "s:" + key) for key in sessions]
    # One write per request, plus one per stream-time verdict the responses added.
    assert written and max(written) >= n, f"the shared session was not written by every request: versions {written}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_chat_loop_through_three_replicas(mock, cluster, stream):
    session = session_id()
    marks = cluster.marks()
    executed, text, finish = openai_loop(cluster.nginx.url, session, stream)
    assert executed == 4, "the 5th identical call must never reach the client"
    assert "[loopguard]" in text and "identical_call" in text
    assert finish == "stop"
    assert warned_requests_openai(mock, session) == WARNED
    assert_rotated(cluster, marks, 5)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_gemini_loop_through_three_replicas(mock, cluster, stream):
    session = session_id()
    marks = cluster.marks()
    executed, text, finish = gemini_loop(cluster.nginx.url, session, stream)
    assert executed == 4
    assert "[loopguard]" in text and "identical_call" in text
    assert "STOP" in finish
    assert warned_requests_gemini(mock, session) == WARNED
    assert_rotated(cluster, marks, 5)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_responses_loop_through_three_replicas(mock, cluster, stream):
    session = session_id()
    marks = cluster.marks()
    executed, text = responses_loop(cluster.nginx.url, session, stream)
    assert executed == 4
    assert text.startswith("[loopguard]") and "identical_call" in text, text
    assert warned_responses(mock, session) == WARNED
    assert_rotated(cluster, marks, 5)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_loop_through_three_replicas(mock, cluster, stream):
    session = session_id()
    marks = cluster.marks()
    executed, text, stop = anthropic_loop(cluster.nginx.url, session, stream)
    assert executed == 4
    assert text.startswith("[loopguard]") and "identical_call" in text, text
    assert stop == "end_turn"
    assert warned_anthropic(mock, session) == WARNED
    assert_rotated(cluster, marks, 5)


TOOLS = [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


class ChatLoop:
    """An OpenAI chat agent loop driven one turn at a time."""

    def __init__(self, base_url, session):
        self.client = openai.OpenAI(
            base_url=base_url + "/v1", api_key="sk-test", max_retries=0, default_headers={"x-loopguard-session": session}
        )
        self.messages = [{"role": "user", "content": "List the files, please."}]
        self.executed = 0

    def turn(self):
        """One request; True while the model keeps calling the tool."""
        completion = self.client.chat.completions.create(model="gpt-test", messages=self.messages, tools=TOOLS)
        message = completion.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            self.text = message.content or ""
            return False
        for call in message.tool_calls:
            self.executed += 1
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"})
        return True


TOOL_ONLY = json.dumps({"turns": [{"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}]})
RESPONSES_TOOLS = [
    {"type": "function", "name": "list_directory", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
]


class ChainLoop:
    """A stateful Responses loop: every request chains to the previous
    response with `previous_response_id` and carries only the new call
    output, so nothing in it shows the streak: only shared state does."""

    def __init__(self, base_url):
        self.client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0, default_headers={"x-mock-script": TOOL_ONLY})
        self.response = None
        self.executed = 0

    def turn(self):
        if self.response is None:
            self.response = self.client.responses.create(model="gpt-test", input="List the files, please.", tools=RESPONSES_TOOLS)
            return
        call = [o for o in self.response.output if o.type == "function_call"][0]
        self.executed += 1
        self.response = self.client.responses.create(
            model="gpt-test",
            previous_response_id=self.response.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"}],
            tools=RESPONSES_TOOLS,
        )


def test_stateful_responses_chain_through_three_replicas(mock, cluster):
    """The response id → session index is shared: a chain whose every link
    lands on another replica is aborted at the 5th identical call, as
    through one instance (test_stateful_responses_chain_is_aborted_not_blocked)."""
    loop = ChainLoop(cluster.nginx.url)
    marks = cluster.marks()
    with pytest.raises(openai.BadRequestError) as err:
        for _ in range(8):
            loop.turn()
    assert err.value.code == "loop_detected"
    assert loop.executed == 4, "the response carrying the 5th identical call becomes HTTP 400"
    served = cluster.served(marks)
    assert all(a != b for a, b in zip(served, served[1:])), served


def redis_clients(redis):
    """(id, last command) of each connection to `redis` but redis-cli's own."""
    out = []
    for line in redis.cli("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") != "client|list":
            out.append((int(fields["id"]), fields.get("cmd", "")))
    return sorted(out)


def test_each_proxy_worker_has_its_own_connection(mock):
    """A request's round trips go over the connection of the worker serving
    it (made on that worker's runtime), not over the first connection, which
    lives on another thread: one connection per worker besides the first,
    and the loop's scripts ran on worker connections only."""
    redis = Redis()
    replica = start_loopguard(mock, state_config(redis, "lgworkers:"))
    try:
        wait_connected(replica)
        workers = os.cpu_count() or 1
        for _ in range(200):
            if len(redis_clients(redis)) >= workers + 1:
                break
            time.sleep(0.02)
        clients = redis_clients(redis)
        assert len(clients) == workers + 1, clients
        openai_loop(replica.url, session_id(), stream=False)
        clients = redis_clients(redis)
        first, rest = clients[0], clients[1:]
        assert first[1] not in ("evalsha", "eval"), clients
        assert any(cmd in ("evalsha", "eval") for _, cmd in rest), clients
    finally:
        replica.stop()
        redis.kill()


def test_sigkill_of_the_serving_replica_does_not_break_the_streak(mock):
    cluster = Cluster(mock, "lgkill:")
    try:
        loop = ChainLoop(cluster.nginx.url)
        marks = cluster.marks()
        for _ in range(3):
            loop.turn()
        last = cluster.served(marks)[-1]
        cluster.replicas[last].proc.send_signal(signal.SIGKILL)
        cluster.replicas[last].proc.wait()
        with pytest.raises(openai.BadRequestError) as err:
            for _ in range(8):
                loop.turn()
        assert err.value.code == "loop_detected"
        assert loop.executed == 4, "the streak went on across the killed replica"
        served = cluster.served(marks)
        assert served[3] != last and last not in served[3:], served
    finally:
        cluster.stop()


def test_redis_down_then_back(mock, monkeypatch):
    monkeypatch.setenv("LOOPGUARD_ADMIN_TOKEN", "t0ken")
    cluster = Cluster(mock, "lgdown:")
    try:
        before = sum(metric(r, "loopguard_state_errors_total") for r in cluster.replicas)
        session = session_id()
        loop = ChatLoop(cluster.nginx.url, session)
        assert loop.turn()
        assert cluster.redis.keys("lgdown:s:*"), "state is written while Redis is up"
        # A second session, served by replica 0 only.
        assert ChatLoop(cluster.replicas[0].url, session_id()).turn()
        only_on_0 = request_log_lines(cluster.replicas[0])[-1]["session"]
        cluster.redis.kill()
        # Every request still succeeds, judged on each replica's own state.
        for _ in range(3):
            assert loop.turn()
        after = sum(metric(r, "loopguard_state_errors_total") for r in cluster.replicas)
        assert after >= before + 3, (before, after)
        for r in cluster.replicas:
            with urllib.request.urlopen(r.admin + "/readyz") as resp:
                assert resp.status == 200
        # The session list says when it is only this replica's (it looked
        # like every replica's: a new-user test).
        with urllib.request.urlopen(cluster.replicas[0].admin + "/admin/sessions") as resp:
            listed = json.load(resp)
        assert "did not answer" in listed.get("warning", ""), listed
        # A session's detail says so too (it looked current: a new-user
        # test); a replica with no copy says it cannot tell (it said 404).
        with urllib.request.urlopen(cluster.replicas[0].admin + "/admin/sessions/" + only_on_0) as resp:
            detail = json.load(resp)
        assert detail["key"] == only_on_0 and "did not answer" in detail.get("warning", ""), detail
        with pytest.raises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(cluster.replicas[1].admin + "/admin/sessions/" + only_on_0)
        assert unknown.value.code == 503, unknown.value.read()
        # A session that starts while Redis is down lives on its replica only.
        assert ChatLoop(cluster.replicas[2].url, session_id()).turn()
        outage_only = request_log_lines(cluster.replicas[2])[-1]["session"]
        cluster.redis.start()
        assert cluster.redis.keys("lgdown:s:*") == []
        deadline = time.time() + 10
        other = ChatLoop(cluster.nginx.url, session_id())
        while not cluster.redis.keys("lgdown:s:*"):
            assert time.time() < deadline, "state is never written again after Redis came back"
            other.turn()
            time.sleep(0.1)
        # Deleting it once Redis is back (this replica's calls may still be
        # paused: the admin API's are made anyway): Redis never held it, so
        # this replica's copy decides (it said 404: a review).
        req = urllib.request.Request(
            cluster.replicas[2].admin + "/admin/sessions/" + outage_only, method="DELETE", headers={"authorization": "Bearer t0ken"}
        )
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 204
    finally:
        cluster.stop()


def test_a_store_that_stops_answering_is_not_waited_for(mock):
    """Redis killed: after three failed calls in a row the replica stops
    calling it for a pause (then tries one call again), so requests are not
    each held for `timeout_ms`; every request still succeeds, and the calls
    not made are counted."""
    redis = Redis()
    replica = start_loopguard(mock, state_config(redis, "lgpause:", timeout_ms=200))
    try:
        wait_connected(replica)
        loop = ChatLoop(replica.url, session_id())
        assert loop.turn()
        redis.kill()
        for _ in range(20):
            assert loop.turn() or loop.text
            if metric(replica, "loopguard_state_skipped_total") > 0:
                break
        assert metric(replica, "loopguard_state_skipped_total") > 0, "every request waited for the store"
        assert "state store failing" in replica.logs()
        # The log says when sharing resumes (an operator could not tell: a
        # new-user test).
        redis.start()
        deadline = time.time() + 10
        while "state store answering again" not in replica.logs():
            assert time.time() < deadline, "no log line says the store answers again"
            assert loop.turn() or loop.text
            time.sleep(0.1)
    finally:
        replica.stop()
        redis.kill()


def test_writes_that_land_after_a_hang_lose_no_request(mock):
    """Redis hangs (SIGSTOP) while a replica writes first: its writes time
    out but stay queued in Redis, and land when it resumes. The replica
    judged those requests on its copy meanwhile; finding its own late write
    stored, it writes its copy over it instead of taking it, so every
    request judged during the hang still counts. With replay_storm's
    breaker at 5, the 5th resend is refused, as through one instance (the
    build before took the stored state and refused only the 6th)."""
    with one_replica(mock, "lghang:", extra="[loop_detection.replay_storm]\nbreaker = 5\n") as (redis, replica):
        loop = ChatLoop(replica.url, session_id())
        assert loop.turn() and loop.turn()
        resend = lambda: loop.client.chat.completions.create(model="gpt-test", messages=loop.messages, tools=TOOLS)
        resend()
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            resend()
            resend()
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        time.sleep(0.7)  # past a pause, should the failures have started one
        resend()
        with pytest.raises(openai.BadRequestError) as err:
            resend()
        assert err.value.code == "loop_detected" and "replay_storm" in str(err.value), err.value


def test_a_chain_whose_store_was_flushed_counts_each_call_once(mock):
    """A stateful Responses chain (each request carries only the new call
    output) whose session Redis loses (FLUSHALL) mid-chain: the replica's
    copy stands and is written as the first version, and the request is
    not judged a second time on it (the build before re-ran detection on
    the copy that already held the request, counted its call twice and
    aborted the chain one call early)."""
    with one_replica(mock, "lgchainflush:") as (redis, replica):
        loop = ChainLoop(replica.url)
        for _ in range(3):
            loop.turn()
        redis.cli("FLUSHALL")
        with pytest.raises(openai.BadRequestError) as err:
            for _ in range(8):
                loop.turn()
        assert err.value.code == "loop_detected"
        assert loop.executed == 4, f"aborted after {loop.executed} executed calls, one instance after 4"


def test_a_redis_restart_costs_no_request_its_shared_state(mock):
    """Redis restarted between two requests: each connection the replica
    held is dead (and the reconnection it tried while Redis was down
    failed). The first call on each is made again on a new connection
    within `timeout_ms`, so no request after the restart is judged on this
    replica's state alone, and the admin list is every replica's again at
    once (both failed once per connection: a new-user test)."""
    redis = Redis()
    replica = start_loopguard(mock, state_config(redis, "lgrestart:", timeout_ms=200))
    try:
        wait_connected(replica)
        loop = ChatLoop(replica.url, session_id())
        for _ in range(2):
            assert loop.turn()
        assert redis.keys("lgrestart:s:*")
        redis.kill()
        time.sleep(0.5)
        redis.start()
        time.sleep(1.0)
        before = metric(replica, "loopguard_state_errors_total")
        for _ in range(2):  # the 3rd and 4th identical calls: warned, not blocked
            assert loop.turn()
        with urllib.request.urlopen(replica.admin + "/admin/sessions") as resp:
            listed = json.load(resp)
        after = metric(replica, "loopguard_state_errors_total")
        assert after == before, f"{after - before:.0f} store calls failed after Redis was back: " + replica.logs()[-1500:]
        assert "warning" not in listed, listed
        assert redis.keys("lgrestart:s:*"), "the session is written again"
    finally:
        replica.stop()
        redis.kill()


def test_store_call_times_are_in_the_metrics(mock):
    """Each store call that answers records its wall time under its op, so an
    operator sees what Redis adds to a request; a call that fails (Redis
    killed) is counted as an error, not timed."""
    redis = Redis()
    replica = start_loopguard(mock, state_config(redis, "lgtimed:", timeout_ms=200))
    try:
        wait_connected(replica)
        # The counters an alert watches are there at 0 before any failure.
        with urllib.request.urlopen(replica.admin + "/metrics") as r:
            text = r.read().decode()
        for series in ('loopguard_state_errors_total{op="save"} 0', "loopguard_state_conflicts_total 0", "loopguard_state_skipped_total 0"):
            assert series in text.splitlines(), series
        loop = ChatLoop(replica.url, session_id())
        assert loop.turn()
        assert loop.turn()
        count = lambda op: metric(replica, f'loopguard_state_call_seconds_count{{op="{op}"}}')
        loads, saves = count("load"), count("save")
        assert loads >= 2 and saves >= 2, (loads, saves)
        spent = metric(replica, 'loopguard_state_call_seconds_sum{op="load"}')
        assert 0 < spent < loads * 0.2, spent
        redis.kill()
        assert loop.turn() or loop.text
        assert (count("load"), count("save")) == (loads, saves)
        assert metric(replica, "loopguard_state_errors_total") > 0
    finally:
        replica.stop()


def command_calls(redis):
    """Calls per command since the last CONFIG RESETSTAT."""
    calls = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls[name] = int(rest.split("calls=", 1)[1].split(",", 1)[0])
    return calls


def test_a_conversation_on_one_replica_makes_no_read(mock):
    """Once the store has confirmed a replica's copy of a session (a read
    found it current), that replica's next requests make no read: the
    request's one round trip is the compare-and-set write of the state its
    detection left, made before the verdict goes out. Every script call is
    then a write that lands (no HMGET, no load script, no conflict): one
    per request, and one per stream-time verdict the responses add. The
    loop is still blocked at the 5th identical call, as through one
    instance with the memory backend."""
    with one_replica(mock, "lgone:") as (redis, replica):
        loop = ChatLoop(replica.url, session_id())
        assert loop.turn() and loop.turn()
        redis.cli("CONFIG", "RESETSTAT")
        while loop.turn():
            pass
        assert loop.executed == 4, "the 5th identical call must never reach the client"
        assert "[loopguard]" in loop.text and "identical_call" in loop.text
        calls = command_calls(redis)
        assert "hmget" not in calls, f"a read was made: {calls}"
        assert calls.get("evalsha") == calls.get("hset"), f"every script call a write that landed: {calls}"
        # Turns 3, 4 and 5: one write each before the verdict, and at most one
        # more each for what its answer adds (stream-time verdicts).
        assert 3 <= calls["evalsha"] <= 6, f"not one write per request: {calls}"
        assert metric(replica, "loopguard_state_conflicts_total") == 0


def test_a_session_gone_from_the_store_costs_one_trip(mock):
    """The request's one trip is its write (see above). When the store has
    lost the session (flushed, expired), that write finds nothing stored:
    the copy stands, as after a read that finds nothing, and is written
    back as the first version beside the upstream request, with no read at
    all. The request is counted once, and the loop is still blocked at the
    5th identical call."""
    with one_replica(mock, "lgflush:") as (redis, replica):
        loop = ChatLoop(replica.url, session_id())
        assert loop.turn() and loop.turn()
        redis.cli("FLUSHALL")
        redis.cli("CONFIG", "RESETSTAT")
        assert loop.turn()
        calls = command_calls(redis)
        # Commands a script runs count too: the load script reads with HMGET,
        # the save script with HGET and writes with HSET.
        assert "hmget" not in calls, f"no read, no load script: {calls}"
        assert calls.get("evalsha") == calls.get("hset", 0) + 1, f"one write that found nothing, then writes that landed: {calls}"
        keys = redis.keys("lgflush:s:*")
        # Written again from the first version on (a stream-time verdict may add a write).
        assert len(keys) == 1 and writes(redis, keys[0]) == calls["hset"], (keys, calls)
        # The duplicate-request counter (replay storms) saw this request once:
        # the run that found nothing stored was not repeated.
        stored = json.loads(redis.cli("HGET", keys[0], "d"))
        times = [len(lane["state"]["repeats"]["times"]) for lane in stored["lanes"]]
        assert times == [1], f"the request was counted as a resend of itself: {times}"
        while loop.turn():
            pass
        assert loop.executed == 4, "the 5th identical call must never reach the client"


def test_a_write_first_that_finds_another_replicas_state_tells_once(mock):
    """Replica A's copy is confirmed after two requests; replica B then
    serves the third. A's fourth request writes first, finds B's version,
    and is judged again on it: the loop is blocked at the 5th call, and the
    verdicts logged and counted over both replicas are exactly those of one
    instance serving the same loop (the run on A's stale copy, which saw
    three identical calls and warned, told nothing)."""
    cluster = Cluster(mock, "lgspec:")
    try:
        a, b, c = cluster.replicas
        alone = ChatLoop(c.url, session_id())
        while alone.turn():
            pass
        assert alone.executed == 4
        once = metric(c, "loopguard_verdicts_total")
        assert once >= 2, f"the loop gave too few verdicts to compare: {once}"
        session = session_id()
        loop = ChatLoop(a.url, session)
        other = ChatLoop(b.url, session)
        assert loop.turn() and loop.turn()
        other.messages = loop.messages
        assert other.turn()
        before = conflicts_of(a)
        while loop.turn():
            pass
        assert loop.executed + other.executed == 4, "the 5th identical call must never reach the client"
        assert conflicts_of(a) > before, "A's write did not meet B's version: the test proved nothing"
        told = metric(a, "loopguard_verdicts_total") + metric(b, "loopguard_verdicts_total")
        assert told == once, f"replicas counted {told} verdicts, one instance {once}"
    finally:
        cluster.stop()


RACE_TOOLS = {
    "x": [{"type": "function", "function": {"name": "read_x", "parameters": {"type": "object"}}}],
    "y": [{"type": "function", "function": {"name": "read_y", "parameters": {"type": "object"}}}],
}


def race(replicas, session, rounds, looping):
    """Two sub-agents of one session (lanes x and y: different tool sets),
    round by round; lane x's request goes to replicas[0] and lane y's to
    replicas[-1] at the same instant (one replica given: one after the
    other). `looping`: every round repeats the same call and result."""
    histories = {"x": [{"role": "user", "content": "Sub-agent x."}], "y": [{"role": "user", "content": "Sub-agent y."}]}
    errors = []

    def send(replica, lane, barrier):
        body = {"model": "gpt-test", "messages": histories[lane], "tools": RACE_TOOLS[lane]}
        req = urllib.request.Request(
            replica.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": "Bearer sk-test", "x-loopguard-session": session,
                     "x-mock-script": json.dumps({"turns": [{"text": "ok"}]})},
        )
        if barrier is not None:
            barrier.wait()
        try:
            with urllib.request.urlopen(req) as r:
                r.read()
        except urllib.error.HTTPError as e:
            if not e.headers.get("x-loopguard-verdict"):  # an abort of loopguard's own is an answer, not an error
                errors.append(repr(e))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    for i in range(rounds):
        n = 0 if looping else i
        for lane in ("x", "y"):
            name = RACE_TOOLS[lane][0]["function"]["name"]
            histories[lane].append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{lane}{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"n": n})}}]})
            histories[lane].append({"role": "tool", "tool_call_id": f"{lane}{i}", "content": f"result {n}"})
        if len(replicas) == 1:
            for lane in ("x", "y"):
                send(replicas[0], lane, None)
            continue
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=send, args=(replicas[0], "x", barrier)),
                   threading.Thread(target=send, args=(replicas[-1], "y", barrier))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


def test_a_history_written_again_after_a_flush_keeps_what_it_holds(mock):
    """Redis loses a session (flushed, restarted empty) while replica A
    holds a copy at its second version; replica B then writes the session
    afresh, twice, for another sub-agent (lane y). A's next request must
    take B's history, not its copy of the lost one: versions start at a
    number drawn per history, so B's second version is not A's. (With
    versions counting from 1 on every history, A took B's version 2 for its
    own, kept its copy and wrote it over B's: lane y was lost.)"""
    cluster = Cluster(mock, "lgflush2:")
    try:
        a, b = cluster.replicas[0], cluster.replicas[1]
        session = session_id()
        histories = {lane: [{"role": "user", "content": f"Sub-agent {lane}."}] for lane in ("x", "y")}

        def turn(replica, lane, i):
            name = RACE_TOOLS[lane][0]["function"]["name"]
            history = histories[lane]
            history.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{lane}{i}", "type": "function", "function": {"name": name, "arguments": json.dumps({"n": i})}}]})
            history.append({"role": "tool", "tool_call_id": f"{lane}{i}", "content": f"result {i}"})
            body = {"model": "gpt-test", "messages": history, "tools": RACE_TOOLS[lane]}
            req = urllib.request.Request(
                replica.url + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"content-type": "application/json", "authorization": "Bearer sk-test", "x-loopguard-session": session,
                         "x-mock-script": json.dumps({"turns": [{"text": "ok"}]})},
            )
            with urllib.request.urlopen(req) as r:
                r.read()

        turn(a, "x", 0)
        turn(a, "x", 1)
        cluster.redis.cli("FLUSHALL")
        turn(b, "y", 0)
        turn(b, "y", 1)
        turn(a, "x", 2)
        keys = cluster.redis.keys("lgflush2:s:*")
        assert len(keys) == 1, keys
        stored = json.loads(cluster.redis.cli("HGET", keys[0], "d"))
        cycles = sorted(sum(1 for s in lane["state"]["steps"] if "Cycle" in s["kind"]) for lane in stored["lanes"])
        assert cycles == [2, 3], f"lane y's history was replaced by a copy of the lost one: {cycles}"
    finally:
        cluster.stop()


def conflicts_of(*replicas):
    return sum(metric(r, "loopguard_state_conflicts_total") for r in replicas)


def test_two_replicas_racing_on_one_session_lose_no_update(mock):
    """Parallel sub-agents: two lanes of one session, each request sent to
    its own replica at the same instant, 25 rounds. Compare-and-set makes
    the loser of each race re-run detection on the winner's state: the
    stored session ends with both lanes' every call."""
    cluster = Cluster(mock, "lgrace:")
    try:
        a, b = cluster.replicas[0], cluster.replicas[1]
        rounds = 25
        assert race([a, b], session_id(), rounds, looping=False) == []
        conflicts = conflicts_of(a, b)
        keys = cluster.redis.keys("lgrace:s:*")
        assert len(keys) == 1, keys
        stored = json.loads(cluster.redis.cli("HGET", keys[0], "d"))
        version = writes(cluster.redis, keys[0])
        cycles = sorted(sum(1 for s in lane["state"]["steps"] if "Cycle" in s["kind"]) for lane in stored["lanes"])
        print(f"race evidence: {rounds} rounds x 2 replicas, {int(conflicts)} version conflicts retried, "
              f"stored version {version}, cycles per lane {cycles}")
        assert cycles == [rounds, rounds], f"an update was lost: {cycles}"
        assert version == 2 * rounds, f"every request wrote once: {version}"
        assert conflicts >= 1, "the requests never raced (no version conflict): the test proved nothing"
    finally:
        cluster.stop()


def test_concurrent_requests_on_one_replica_keep_its_own_writes(mock):
    """Two sub-agents of one session at the same instant on the SAME
    replica: the second request's load may answer the version this replica
    held before the first one wrote. The first one's write is this
    replica's own, so the second is judged on it: no version conflict, and
    the stored session holds every call of both lanes. (The build before
    took that older answer for a deletion, judged the second request on an
    empty session, and relied on the conflict to repair the state.)"""
    cluster = Cluster(mock, "lgsame:")
    try:
        a = cluster.replicas[0]
        rounds = 25
        assert race([a, a], session_id(), rounds, looping=False) == []
        keys = cluster.redis.keys("lgsame:s:*")
        assert len(keys) == 1, keys
        stored = json.loads(cluster.redis.cli("HGET", keys[0], "d"))
        cycles = sorted(sum(1 for s in lane["state"]["steps"] if "Cycle" in s["kind"]) for lane in stored["lanes"])
        assert cycles == [rounds, rounds], f"an update was lost: {cycles}"
        assert conflicts_of(a) == 0, f"{int(conflicts_of(a))} conflicts with this replica's own writes"
    finally:
        cluster.stop()


def test_a_race_counts_each_verdict_once(mock):
    """Both sub-agents loop (the same call and result every round). The
    loser of a race runs detection again on the winner's state for its state
    changes only: the replicas together log and count exactly the verdicts
    one instance gives for the same requests one after another (the lanes
    are independent, so racing changes no verdict)."""
    cluster = Cluster(mock, "lgrace2:")
    try:
        a, b, c = cluster.replicas
        rounds = 12
        assert race([c], session_id(), rounds, looping=True) == []
        alone = metric(c, "loopguard_verdicts_total")
        assert alone >= 4, f"the loop gave too few verdicts to compare: {alone}"
        for _ in range(4):  # until the requests raced at least once
            before = metric(a, "loopguard_verdicts_total") + metric(b, "loopguard_verdicts_total")
            conflicts = conflicts_of(a, b)
            assert race([a, b], session_id(), rounds, looping=True) == []
            raced = metric(a, "loopguard_verdicts_total") + metric(b, "loopguard_verdicts_total") - before
            assert raced == alone, f"racing replicas counted {raced} verdicts, one instance {alone}"
            if conflicts_of(a, b) > conflicts:
                return
        pytest.fail("the requests never raced (no version conflict): the test proved nothing")
    finally:
        cluster.stop()


def admin_keys(replica):
    with urllib.request.urlopen(replica.admin + "/admin/sessions") as r:
        return {s["key"] for s in json.load(r)["sessions"]}


def test_admin_lists_and_deletes_across_replicas(mock, monkeypatch):
    monkeypatch.setenv("LOOPGUARD_ADMIN_TOKEN", "t0ken")
    cluster = Cluster(mock, "lgadmin:")
    try:
        marks = cluster.marks()
        assert ChatLoop(cluster.nginx.url, session_id()).turn()
        served = cluster.served(marks)
        assert len(served) == 1
        key = request_log_lines(cluster.replicas[served[0]])[-1]["session"]
        for r in cluster.replicas:
            assert key in admin_keys(r), "every replica lists the session one of them served"
        other = cluster.replicas[(served[0] + 1) % 3]
        # A replica that never served it shows the session as stored.
        with urllib.request.urlopen(other.admin + "/admin/sessions/" + key) as r:
            detail = json.load(r)
        assert detail["key"] == key and len(detail["lanes_detail"]) == 1, detail
        with urllib.request.urlopen(other.admin + "/admin/sessions/" + key + "/timeline") as r:
            assert r.status == 200
        req = urllib.request.Request(other.admin + "/admin/sessions/" + key, method="DELETE", headers={"authorization": "Bearer t0ken"})
        # A delete the store refuses is not reported done: the session is
        # still there for the other replicas (it answered 204: a new-user test).
        cluster.redis.cli("CONFIG", "SET", "min-replicas-to-write", "1")
        try:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req)
            assert refused.value.code == 503
            assert "did not take the delete" in refused.value.read().decode()
        finally:
            cluster.redis.cli("CONFIG", "SET", "min-replicas-to-write", "0")
        assert key in admin_keys(cluster.replicas[served[0]]), "kept for the replica that served it"
        with urllib.request.urlopen(req) as r:
            assert r.status == 204
        assert cluster.redis.cli("HGET", "lgadmin:s:" + key, "d").strip() == "", "a tombstone every replica sees"
        for r in cluster.replicas:
            assert key not in admin_keys(r), "deleted for every replica"
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(cluster.replicas[served[0]].admin + "/admin/sessions/" + key)
        assert gone.value.code == 404, "the replica that served it no longer shows it either"
        # Deleting it again through the replica that served it (which may
        # still hold a copy) finds nothing to delete (it answered 204: a
        # new-user test).
        again = urllib.request.Request(
            cluster.replicas[served[0]].admin + "/admin/sessions/" + key, method="DELETE", headers={"authorization": "Bearer t0ken"}
        )
        with pytest.raises(urllib.error.HTTPError) as twice:
            urllib.request.urlopen(again)
        assert twice.value.code == 404
    finally:
        cluster.stop()


def test_a_redis_user_with_the_commands_readme_lists_is_enough(mock, monkeypatch):
    """README lists the commands a Redis user restricted by an ACL needs:
    with exactly those (and the keys under the prefix), a loop, a stateful
    Responses chain and the admin list, detail and delete cost no store
    error (the scripts named an empty key for a key they were not to
    touch, which such a user may not name: every load failed with NOPERM).
    The password is percent-encoded (it holds `#` and `/`)."""
    monkeypatch.setenv("LOOPGUARD_ADMIN_TOKEN", "t0ken")
    redis = Redis()
    commands = "+evalsha +script|load +hmget +hget +hset +hmset +expire +get +set +multi +exec +scan"
    assert redis.cli("ACL", "SETUSER", "lg", "on", ">p#ss/w0rd", "~lgacl:*", *commands.split()).strip() == "OK"
    url = f"redis://lg:p%23ss%2Fw0rd@127.0.0.1:{redis.port}/0"
    replica = start_loopguard(mock, f'[state]\nbackend = "redis"\nurl = "{url}"\nkey_prefix = "lgacl:"\ntimeout_ms = 200\n')
    try:
        wait_connected(replica)
        loop = ChatLoop(replica.url, session_id())
        for _ in range(3):
            assert loop.turn()
        chain = ChainLoop(replica.url)
        for _ in range(3):
            chain.turn()
        assert chain.executed == 2
        key = request_log_lines(replica)[0]["session"]
        assert key in admin_keys(replica)
        with urllib.request.urlopen(replica.admin + "/admin/sessions/" + key) as r:
            assert r.status == 200
        req = urllib.request.Request(replica.admin + "/admin/sessions/" + key, method="DELETE", headers={"authorization": "Bearer t0ken"})
        try:
            urllib.request.urlopen(req).close()
        except urllib.error.HTTPError as e:
            pytest.fail(f"DELETE: {e.code} {e.read()!r}")
        errors = [line for line in replica.logs().splitlines() if "state store" in line and "WARN" in line]
        assert metric(replica, "loopguard_state_errors_total") == 0, errors[:3]
        assert redis.keys("lgacl:r:*"), "the Responses ids were written"
        assert "w0rd" not in replica.logs(), "the password never shows"
    finally:
        replica.stop()
        redis.kill()


TRAJECTORIES = pathlib.Path(os.environ.get("LOOPGUARD_TRAJECTORIES", pathlib.Path(__file__).resolve().parents[3] / "shared" / "trajectories"))


def replay_trajectory(base_url, path, run):
    """Sends every recorded request body of a trajectory as live traffic;
    returns [(request index, status, x-loopguard-verdict)] for the requests
    that got a verdict."""
    out = []
    session = f"{run}-{path.stem}"
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        req = urllib.request.Request(
            base_url + "/v1/chat/completions",
            data=line.encode(),
            headers={"content-type": "application/json", "authorization": "Bearer sk-test", "x-loopguard-session": session},
        )
        try:
            with urllib.request.urlopen(req) as r:
                status, verdict = r.status, r.headers.get("x-loopguard-verdict")
                r.read()
        except urllib.error.HTTPError as e:
            status, verdict = e.code, e.headers.get("x-loopguard-verdict")
        if verdict or status != 200:
            out.append((i, status, verdict))
    return out


def verdict_counts(procs):
    counts = {}
    for p in procs:
        for line in p.logs().splitlines():
            try:
                v = json.loads(line)
            except ValueError:
                continue
            if v.get("message") == "verdict" or v.get("fields", {}).get("message") == "verdict":
                key = (v.get("detector") or v.get("fields", {}).get("detector"), v.get("level") or v.get("fields", {}).get("level"))
                counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"no trajectories at {TRAJECTORIES} (set LOOPGUARD_TRAJECTORIES)")
def test_trajectories_give_the_same_verdicts_through_three_replicas(mock):
    """Every recorded trajectory of ../shared/trajectories replayed as live
    traffic, once through one instance, once through three replicas behind
    nginx: the same requests get the same verdicts (request index, status,
    action, detector, count), and the replicas log the same verdicts
    (detector, level) as the one instance."""
    from concurrent.futures import ThreadPoolExecutor

    files = sorted(TRAJECTORIES.glob("*.jsonl"))
    assert files
    single = start_loopguard(mock)
    # A generous timeout: this compares verdicts with the store answering
    # (a debug build on a loaded machine can take longer than 50 ms).
    cluster = Cluster(mock, "lgtraj:", timeout_ms=5000)
    try:
        with ThreadPoolExecutor(4) as pool:
            one = dict(zip(files, pool.map(lambda f: replay_trajectory(single.url, f, "one"), files)))
        with ThreadPoolExecutor(4) as pool:
            three = dict(zip(files, pool.map(lambda f: replay_trajectory(cluster.nginx.url, f, "three"), files)))
        differ = {f.name: (one[f], three[f]) for f in files if one[f] != three[f]}
        errors = sum(metric(r, "loopguard_state_errors_total") for r in cluster.replicas)
        print(f"state errors: {errors}")
        for name, (a, b) in differ.items():
            print(f"{name}:\n  one   {a}\n  three {b}")
        assert not differ, list(differ)
        assert sum(len(v) for v in one.values()) > 0, "no trajectory got a verdict: the comparison shows nothing"
        assert verdict_counts([single]) == verdict_counts(cluster.replicas)
        print(f"trajectories: {len(files)} files, {sum(1 for f in files for l in f.read_text().splitlines() if l.strip())} requests each way, "
              f"{sum(len(v) for v in one.values())} requests with a verdict, identical")
    finally:
        single.stop()
        cluster.stop()
