#!/usr/bin/env python3
"""The figures of issue #13 under "Cost and memory" and "Reading clients",
re-measured in one run on a release binary, against loopguard's own mock
upstream or, where the mock cannot misbehave enough, a raw-socket upstream
of this script's own (loopback only):

1. request time for an OpenAI chat body of one assistant message with N
   parallel calls and their N tool results (1k, 10k, 100k and 400k calls;
   "mock alone" is the same request sent straight to the mock), and the
   worst `/healthz` latency while two 100k-call requests are in flight;
2. time to pass an upstream answer of 80k parallel calls, JSON and SSE;
3. time of a ~1.3 MB gzip request body that decodes to a large history;
4. loopguard's RSS before / peak / after (VmRSS, sampled every 50 ms) for a
   400 MB SSE event without its blank line, a 300 MB element of a Gemini
   streamed array, and a 56 MB body of 10^6 calls (the body of
   scripts/measure_parse_memory.py), one and three at once;
5. slow uploads: ten clients declaring 50 MB and sending 1 byte/s, beside
   ten that send all but the last 4 KiB and then 1 byte/s: when loopguard
   closes them (HTTP 503 at once for those past
   `max_request_bytes_in_flight`), its RSS meanwhile; the time to the answer
   for a declared `Content-Length` over `max_request_bytes`;
6. a burst of 1,000 connects, each one streamed request (a Gemini SSE text
   answer paced over a second, so every stream is open at once; the same
   burst straight to the mock for reference): errors, p50/p99 time to first
   byte, loopguard's open fds. loopguard starts with a soft fd limit of
   1,024 (the usual default, which it should raise itself).

Prints a Markdown table (what, figure, the issue's "before") on stdout and
progress on stderr. `[…]` after a figure lists loopguard's counters that
moved (`offloaded`, `parse_lean`, `fail_open{reason}`): whether a body was
judged in full, lean, or passed unjudged.

    benches/hardening.py [--bin target/release/loopguard] [--quick] [--only 1,4]

`--quick` shrinks every size 10-100x (under a minute); the full run takes
about 5 minutes on 2 cores. Every size has its own flag (`--help`).
Python 3 standard library only; every process it starts is killed on exit.
"""

import argparse
import asyncio
import atexit
import collections
import contextlib
import gzip
import http.client
import itertools
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

MB = 1_000_000
MIB = 1 << 20

# flag: (full run, --quick, help)
SIZES = {
    "calls": ("1000,10000,100000", "100,1000,10000", "figure 1: request sizes, in tool calls"),
    "big_calls": (400_000, 40_000, "figure 1: the largest request (400k: ~56 MB)"),
    "probe_calls": (100_000, 10_000, "figure 1: calls in each of the two requests /healthz is probed beside"),
    "answer_calls": (80_000, 8_000, "figure 2: parallel calls in the upstream's answer"),
    "gzip_calls": (125_000, 12_500, "figure 3: calls in the gzip body (125k: ~1.3 MB gzipped)"),
    "sse_event_mb": (400, 40, "figure 4: size of the unterminated SSE event"),
    "gemini_element_mb": (300, 30, "figure 4: size of the Gemini array element"),
    "budget_calls": (1_000_000, 100_000, "figure 4: calls in the parse-memory body (10^6: ~56 MB)"),
    "uploads": (10, 10, "figure 5: slow uploads of each kind"),
    "upload_mb": (50, 5, "figure 5: declared size of each slow upload"),
    "body_timeout_secs": (0, 3, "figure 5: client_body_timeout_secs (0: loopguard's default)"),
    "burst": (1000, 200, "figure 6: concurrent connects"),
    "settle_secs": (5, 1, "figure 4: wait before the 'after' RSS (sampled for the peak too)"),
}

BEFORE = {
    "growth": "— (issue asks for figures at 1k / 10k / 100k showing the growth)",
    "100k": "100k calls (13 MB): 2.8 s",
    "400k": "400k (54 MB, under the 64 MiB cap): 38 s",
    "healthz": "two such requests at once froze the whole proxy, `/healthz` included, for 18.9 s",
    "answer": "an upstream answer with 80k parallel calls: 37 s",
    "gzip": "a 1.3 MB gzip body: 15 s",
    "sse": "400 MB event → 511 MB RSS",
    "gemini": "300 MB array element → 1.33 GB",
    "budget1": "one 54 MB body with 10⁶ calls took RSS from 12 MB to 1.45 GB (1.06 GB still held afterwards)",
    "budget3": "three at once peaked at 2.97 GB",
    "trickle": "1 byte/s uploads stay open indefinitely",
    "stalled": "ten stalled 50 MB uploads pinned 530 MB",
    "413": "413 only after 64 MiB arrived",
    "burst_ttfb": "backlog 128 gives 1.3 s first bytes in a burst of 1,000 connects",
    "burst_errors": "at the default 1,024 fds, 33 of 1,000 streams got 502 \"Too many open files\", "
                    "and failed accepts log nothing",
}

STARTED = []
WORK = ""  # the temporary directory of configs and logs, made by main()
NAMES = itertools.count()


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- processes ---------------------------------------------------------------

def stop_all():
    for proc in STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    shutil.rmtree(WORK, ignore_errors=True)


def spawn(argv, log_path, nofile=None):
    """Starts a process whose first stdout line names its addresses; returns (proc, line)."""
    def limit_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    with open(log_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, preexec_fn=limit_fds if nofile else None)
    STARTED.append(proc)
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline().decode() if ready else ""
    if not line:
        sys.exit(f"{argv[0]} {argv[1:3]} did not start: see {log_path}")
    return proc, line


def stop(proc):
    proc.kill()
    proc.wait(timeout=10)
    STARTED.remove(proc)


def host_port(text):
    host, port = text.strip().rsplit(":", 1)
    return host, int(port)


class Loopguard:
    """A running `loopguard serve` routing /v1 (OpenAI) and /v1beta (Gemini) to `upstream`."""

    def __init__(self, binary, upstream, extra="", nofile=None):
        self.config = os.path.join(WORK, f"lg-{next(NAMES)}.toml")
        with open(self.config, "w") as f:
            f.write(f'[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n{extra}\n\n'
                    f'[[routes]]\nprefix = "/v1"\nprovider = "openai"\nupstream = "http://{upstream}"\n\n'
                    f'[[routes]]\nprefix = "/v1beta"\nprovider = "gemini"\nupstream = "http://{upstream}"\n')
        self.log_path = self.config.replace(".toml", ".log")
        self.proc, line = spawn([binary, "--log-format", "json", "serve", "--config", self.config],
                                self.log_path, nofile)
        self.pid = self.proc.pid
        self.proxy = host_port(line.split("proxy=")[1].split()[0])
        self.admin = host_port(line.split("admin=")[1].split()[0])

    def log_events(self, message):
        with open(self.log_path) as f:
            return [e for e in map(json.loads, filter(str.strip, f)) if e.get("message") == message]


def start_mock(args, script=None):
    argv = [args.bin, "mock-upstream", "--listen", "127.0.0.1:0", "--fixtures", args.fixtures]
    if script is not None:
        path = os.path.join(WORK, f"script-{next(NAMES)}.json")
        with open(path, "w") as f:
            json.dump(script, f)
        argv += ["--script", path]
    proc, line = spawn(argv, os.path.join(WORK, f"mock-{next(NAMES)}.log"))
    return proc, line.split("listening on ")[1].strip()


@contextlib.contextmanager
def stack(args, extra="", script=None, upstream=None, nofile=None):
    """A loopguard in front of `upstream` ("host:port"), else in front of a fresh mock; yields (lg, mock addr)."""
    mock = None
    if upstream is None:
        mock, upstream = start_mock(args, script)
    lg = Loopguard(args.bin, upstream, extra, nofile)
    try:
        yield lg, host_port(upstream)
    finally:
        stop(lg.proc)
        if mock:
            stop(mock)


# --- process figures ---------------------------------------------------------

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def cpu_secs(pid):
    """User + system CPU seconds `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler:
    """Samples a process's RSS (MiB) and open fds every 50 ms in a thread, for at most `limit` seconds."""

    def __init__(self, pid, limit=900):
        self.pid, self.limit = pid, limit
        self.before = rss_mib(pid)
        self.peak_rss, self.peak_fds = self.before, open_fds(pid)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        end = time.monotonic() + self.limit
        while not self.done.wait(0.05) and time.monotonic() < end:
            with contextlib.suppress(OSError, StopIteration):
                self.peak_rss = max(self.peak_rss, rss_mib(self.pid))
                self.peak_fds = max(self.peak_fds, open_fds(self.pid))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.done.set()
        self.thread.join()


def metrics(lg):
    """loopguard's counters that say how a body was judged: parse lean, fail-open by reason, offloaded."""
    _, _, text, _ = request(lg.admin, "GET", "/metrics", keep=True)
    wanted = ("loopguard_parse_lean_total", "loopguard_fail_open_total", "loopguard_offloaded_total")
    out = {}
    for line in text.decode().splitlines():
        if line.startswith(wanted):
            name, value = line.rsplit(" ", 1)
            out[name.replace("loopguard_", "").replace("_total", "")] = float(value)
    return out


def judged_note(before, after):
    changed = [f"{k} +{after[k] - before.get(k, 0):g}" for k in sorted(after) if after[k] != before.get(k, 0)]
    return f" [{', '.join(changed)}]" if changed else ""


# --- HTTP ---------------------------------------------------------------------

def request(addr, method, path, body=None, headers=None, keep=False, timeout=600):
    """One request on a fresh connection; the answer is read to its end (kept only when `keep`).
    Returns (status or error text, verdict header, body or its length, seconds)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection(*addr, timeout=timeout)
    try:
        conn.request(method, path, body, {"content-type": "application/json", **(headers or {})})
        r = conn.getresponse()
        verdict = r.getheader("x-loopguard-verdict")
        if keep:
            got = r.read()
        else:
            got = 0
            while chunk := r.read(MIB):
                got += len(chunk)
        return r.status, verdict, got, time.monotonic() - started
    except (OSError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {e}", None, 0, time.monotonic() - started
    finally:
        conn.close()


def post_chat(addr, body, session, headers=None):
    return request(addr, "POST", "/v1/chat/completions", body, {"x-loopguard-session": session, **(headers or {})})


def post_all(addr, bodies, session):
    """Posts each body on a thread of its own (session `session-i`); returns the threads and
    the list their (status, verdict, length, seconds) land in, in the order of `bodies`."""
    out = [None] * len(bodies)

    def post(i):
        out[i] = post_chat(addr, bodies[i], f"{session}-{i}")

    threads = [threading.Thread(target=post, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    return threads, out


def healthz_ms(lg):
    status, _, _, took = request(lg.admin, "GET", "/healthz", timeout=60)
    return took * 1000 if status == 200 else float("inf")


def status_note(status, verdict):
    note = "" if status == 200 else f" (HTTP {status})"
    return note + (f" (verdict {verdict})" if verdict else "")


# --- bodies ---------------------------------------------------------------------

CALL = '{"id":"c%d","function":{"name":"read","arguments":"{\\"path\\":\\"f%d\\"}"}}'
RESULT = '{"role":"tool","tool_call_id":"c%d","content":"%d"}'


def tool_history(calls, tag):
    """An OpenAI chat body: one assistant message with `calls` distinct calls, then each call's result.
    `tag` goes into the first message, so no two bodies share a history prefix (loopguard's parse cache)."""
    turn = '{"role":"assistant","content":null,"tool_calls":[' + ",".join(CALL % (i, i) for i in range(calls)) + "]}"
    results = ",".join(RESULT % (i, i) for i in range(calls))
    return ('{"model":"m","stream":false,"messages":[{"role":"user","content":"Read every file (%s)."},' % tag
            + turn + "," + results + "]}").encode()


def parallel_calls_body(calls, tag, per_turn=1000):
    """The parse-memory body of scripts/measure_parse_memory.py: turns of `per_turn` calls, no results."""
    call = '{"id":"%x","function":{"name":"f","arguments":"{}"}}'
    turns = ('{"role":"assistant","tool_calls":[' + ",".join(map(call.__mod__, range(t, min(t + per_turn, calls))))
             + "]}" for t in range(0, calls, per_turn))
    return ('{"model":"m","messages":[{"role":"user","content":"go (%s)"},' % tag + ",".join(turns) + "]}").encode()


def mb(data):
    return f"{len(data) / MB:.1f} MB"


# --- figure 1: request cost -------------------------------------------------------

def request_times(args, rows):
    with stack(args, "max_request_bytes = 67108864") as (lg, mock):
        for calls in [int(c) for c in args.calls.split(",")] + [args.big_calls]:
            body = tool_history(calls, calls)
            direct = post_chat(mock, body, f"direct-{calls}")
            before = metrics(lg)
            status, verdict, _, took = post_chat(lg.proxy, body, f"calls-{calls}")
            note = status_note(status, verdict) + judged_note(before, metrics(lg))
            log(f"{calls} calls: {took:.2f} s{note}, mock alone {direct[3]:.2f} s")
            key = {100_000: "100k", 400_000: "400k"}.get(calls, "growth")
            rows.append((f"request, {calls:,} calls + results ({mb(body)})",
                         f"{took:.2f} s (mock alone {direct[3]:.2f} s){note}", BEFORE[key]))
        rows.append(healthz_during(lg, [tool_history(args.probe_calls, f"probe {i}") for i in range(2)]))


def healthz_during(lg, bodies):
    """The worst /healthz latency while two requests of these `bodies` are in flight."""
    threads, out = post_all(lg.proxy, bodies, "probe")
    worst, probes, end = 0.0, 0, time.monotonic() + 600
    while any(t.is_alive() for t in threads) and time.monotonic() < end:
        worst = max(worst, healthz_ms(lg))
        probes += 1
        time.sleep(0.02)
    for t in threads:
        t.join()
    took = ", ".join(f"{r[3]:.2f} s{status_note(r[0], r[1])}" for r in out)
    log(f"/healthz worst {worst:.1f} ms over {probes} probes; requests {took}")
    calls = bodies[0].count(b'"tool_call_id"')
    return (f"`/healthz` while two {calls:,}-call requests ({mb(bodies[0])} each) are in flight",
            f"worst {worst:.1f} ms over {probes} probes (the requests took {took})", BEFORE["healthz"])


# --- figure 2: a huge upstream answer ------------------------------------------------

def answer_times(args, rows):
    calls = [{"name": "read_file", "arguments": {"path": f"src/f{i}.rs"}} for i in range(args.answer_calls)]
    with stack(args, script={"turns": [{"tool_calls": calls}]}) as (lg, mock):
        for stream in (False, True):
            body = json.dumps({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "read all"}],
                               "tools": [{"type": "function", "function": {"name": "read_file"}}]})
            headers = {"x-mock-chunk": "whole"}
            direct = post_chat(mock, body, "direct", headers)
            status, verdict, got, took = post_chat(lg.proxy, body, f"answer-{stream}", headers)
            kind = "SSE" if stream else "JSON"
            log(f"{kind} answer of {args.answer_calls} calls: {took:.2f} s, mock alone {direct[3]:.2f} s")
            rows.append((f"upstream answer of {args.answer_calls:,} parallel calls, {kind} ({got / MB:.1f} MB)",
                         f"{took:.2f} s (mock alone {direct[3]:.2f} s){status_note(status, verdict)}",
                         BEFORE["answer"]))


# --- figure 3: a gzip body ---------------------------------------------------------------

def gzip_time(args, rows):
    plain = tool_history(args.gzip_calls, "gzip")
    body = gzip.compress(plain, 6)
    with stack(args) as (lg, _):
        before = metrics(lg)
        status, verdict, _, took = post_chat(lg.proxy, body, "gzip", {"content-encoding": "gzip"})
        note = status_note(status, verdict) + judged_note(before, metrics(lg))
    log(f"gzip body: {took:.2f} s{note}")
    rows.append((f"gzip request body, {mb(body)} → {mb(plain)} ({args.gzip_calls:,} calls + results)",
                 f"{took:.2f} s{note}", BEFORE["gzip"]))


# --- figure 4: memory ----------------------------------------------------------------------

class RawUpstream:
    """A misbehaving upstream on a loopback port, while in a `with` block (at most `limit`
    seconds): answers each request (read whole) with `head`, `prefix`, `size` bytes of `x`
    and `tail`, then closes."""

    def __init__(self, head, prefix, size, tail, limit=600):
        self.parts, self.size, self.limit = (head + prefix, tail), size, limit
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.end = time.monotonic() + limit
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.end = 0
        self.thread.join()

    def serve(self):
        with self.listener:
            while time.monotonic() < self.end:
                with contextlib.suppress(socket.timeout):
                    conn, _ = self.listener.accept()
                    threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        conn.settimeout(self.limit)
        with conn, contextlib.suppress(OSError):
            read_request(conn)
            conn.sendall(self.parts[0])
            piece = b"x" * MIB
            for left in range(self.size, 0, -MIB):
                conn.sendall(piece[:left])
            conn.sendall(self.parts[1])


def read_request(conn):
    """Reads one request: its head and its `content-length` body."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MIB:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(l.split(b":")[1]) for l in head.lower().split(b"\r\n") if l.startswith(b"content-length:")), 0)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        rest += chunk


def rss_row(what, before_key, sampler, after, note):
    log(f"{what}: RSS {sampler.before:.0f} → peak {sampler.peak_rss:.0f} → {after:.0f} MiB{note}")
    return (what, f"RSS {sampler.before:.0f} → peak {sampler.peak_rss:.0f} → after {after:.0f} MiB{note}",
            BEFORE[before_key])


def big_frame(args, upstream, path, body, what, before_key):
    """RSS while `upstream`'s one huge frame passes through loopguard to a client that reads it all."""
    with stack(args, upstream=upstream.addr) as (lg, _):
        before = metrics(lg)
        with Sampler(lg.pid) as sampler:
            status, _, got, took = request(lg.proxy, "POST", path, body)
            time.sleep(args.settle_secs)
        note = f"; {got / MB:.0f} MB passed in {took:.1f} s" + status_note(status, None) + judged_note(
            before, metrics(lg))
        return rss_row(what, before_key, sampler, rss_mib(lg.pid), note)


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
TEXT_EVENT = (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
              b'"choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":null}]}\n\n')


def memory(args, rows):
    size = args.sse_event_mb * MB
    chat = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    with RawUpstream(SSE_HEAD, TEXT_EVENT + b'data: {"junk":"', size, b'"}\n\ndata: [DONE]\n\n') as sse:
        rows.append(big_frame(args, sse, "/v1/chat/completions", chat,
                              f"one {args.sse_event_mb} MB SSE event without its blank line", "sse"))
    size = args.gemini_element_mb * MB
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    with RawUpstream(JSON_HEAD, b'[{"candidates":[{"content":{"parts":[{"text":"', size,
                     b'"}]},"finishReason":"STOP"}]}]') as gemini:
        rows.append(big_frame(args, gemini, "/v1beta/models/g:streamGenerateContent", body,
                              f"one {args.gemini_element_mb} MB Gemini array element (streamed array)", "gemini"))
    with stack(args) as (lg, _):
        for n, key in ((1, "budget1"), (3, "budget3")):
            bodies = [parallel_calls_body(args.budget_calls, f"{n}-{i}") for i in range(n)]
            rows.append(parse_memory(args, lg, bodies, key))


def parse_memory(args, lg, bodies, before_key):
    """RSS while these `bodies` are posted at once."""
    n = len(bodies)
    before = metrics(lg)
    with Sampler(lg.pid) as sampler:
        threads, out = post_all(lg.proxy, bodies, f"mem-{n}")
        for t in threads:
            t.join()
        time.sleep(args.settle_secs)
    statuses = sorted({r[0] for r in out}, key=str)
    note = f"; HTTP {statuses}" + judged_note(before, metrics(lg))
    what = f"one {mb(bodies[0])} body of {args.budget_calls:,} calls"
    if n > 1:
        what = f"{n} {mb(bodies[0])} bodies of {args.budget_calls:,} calls at once"
    return rss_row(what, before_key, sampler, rss_mib(lg.pid), note)


# --- figure 5: slow clients ------------------------------------------------------------------

def upload_head(size):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % size)


class SlowUpload:
    """A client that declares `size` bytes, sends `first` of them at once, then one byte a second
    (`tick`); `first` leaves more bytes than the run has seconds, so the body never completes."""

    def __init__(self, addr, size, first):
        self.sock = socket.create_connection(addr, timeout=60)
        self.started = time.monotonic()
        self.closed_after, self.answer = None, b""
        try:
            self.sock.sendall(upload_head(size) + b" " * first)
        except OSError:
            # Answered while sending (503 past max_request_bytes_in_flight) and closed.
            with contextlib.suppress(OSError):
                self.answer = self.sock.recv(200)
            self.close()

    def tick(self):
        """Sends a byte, or notes that loopguard answered or closed."""
        if select.select([self.sock], [], [], 0)[0]:
            with contextlib.suppress(OSError):
                self.answer = self.sock.recv(200)
            self.close()
            return
        try:
            self.sock.send(b" ")
        except OSError:
            self.close()

    def close(self):
        self.closed_after = time.monotonic() - self.started
        self.sock.close()

    def outcome(self):
        line = self.answer.split(b"\r\n")[0].decode(errors="replace") or "closed without an answer"
        return line.replace("HTTP/1.1 ", "HTTP ")


STALLED_LEFT = 4096


def slow_uploads(args, rows):
    extra = f"client_body_timeout_secs = {args.body_timeout_secs}" if args.body_timeout_secs else ""
    timeout = args.body_timeout_secs or 120
    size = args.upload_mb * MB
    with stack(args, extra) as (lg, _):
        with Sampler(lg.pid, limit=timeout + 90) as sampler:
            trickle = [SlowUpload(lg.proxy, size, 0) for _ in range(args.uploads)]
            stalled = [SlowUpload(lg.proxy, size, size - STALLED_LEFT) for _ in range(args.uploads)]
            pinned = rss_mib(lg.pid)
            wait_closed(trickle + stalled, timeout + 60)
        rows.append(upload_row(f"{args.uploads} uploads declaring {args.upload_mb} MB, sending 1 byte/s",
                               trickle, "trickle", ""))
        rss = (f"; RSS (with the trickling ones) {sampler.before:.0f} → {pinned:.0f} once sent → "
                  f"peak {sampler.peak_rss:.0f} MiB")
        rows.append(upload_row(f"{args.uploads} uploads of {args.upload_mb} MB, all but the last "
                               f"{STALLED_LEFT // 1024} KiB sent, then 1 byte/s", stalled, "stalled", rss))
        rows.append(declared_too_large(lg))


def wait_closed(uploads, limit):
    """Ticks every open upload once a second until loopguard closed them all (at most `limit` seconds)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        open_ = [u for u in uploads if u.closed_after is None]
        if not open_:
            return
        for u in open_:
            u.tick()
        time.sleep(1)
    for u in uploads:
        if u.closed_after is None:
            u.sock.close()


def upload_row(what, uploads, before_key, rss):
    closed = [u.closed_after for u in uploads if u.closed_after is not None]
    outcomes = sorted({u.outcome() for u in uploads if u.closed_after is not None})
    figure = "none closed within the run"
    if closed:
        figure = (f"{len(closed)}/{len(uploads)} closed, after {min(closed):.1f}–{max(closed):.1f} s "
                  f"({'; '.join(outcomes)})")
    figure += rss
    log(f"{what}: {figure}")
    return what, figure, BEFORE[before_key]


def declared_too_large(lg):
    """Time to the answer for a declared `Content-Length` over the default 64 MiB limit."""
    with socket.create_connection(lg.proxy, timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(upload_head(100 * MB) + b"{")
        try:
            answer = sock.recv(200)
        except OSError as e:
            answer = str(e).encode()
        took = time.monotonic() - started
    line = answer.split(b"\r\n")[0].decode(errors="replace")
    log(f"declared 100 MB: {line} after {took * 1000:.1f} ms")
    return ("declared `Content-Length` of 100 MB (over `max_request_bytes` = 64 MiB), 1 byte of body sent",
            f"{line or 'no answer'} after {took * 1000:.1f} ms", BEFORE["413"])


# --- figure 6: a burst of streams ----------------------------------------------------------------

# A Gemini SSE answer of five text events 200 ms apart: every stream of the
# burst is open at once for about a second, and its first event carries text,
# so loopguard holds no response headers (an OpenAI chat stream opens with an
# empty role event, and loopguard holds the headers until the first content).
STREAM_PATH = "/v1beta/models/m:streamGenerateContent?alt=sse"
STREAM_BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
TEXT_SCRIPT = json.dumps({"turns": [{"text": "A streamed answer of a few deltas, three words each."}]})


async def one_stream(addr, i):
    """One streamed request on a fresh connection: (time to first byte, error or None)."""
    started = time.monotonic()
    head = (f"POST {STREAM_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            f"content-type: application/json\r\nx-loopguard-session: burst-{i}\r\n"
            f"x-mock-script: {TEXT_SCRIPT}\r\nx-mock-pace-ms: 200\r\ncontent-length: {len(STREAM_BODY)}\r\n\r\n")
    try:
        reader, writer = await asyncio.open_connection(*addr)
        writer.write(head.encode() + STREAM_BODY)
        first = await reader.read(1)
        ttfb = time.monotonic() - started
        rest = await reader.read()
        writer.close()
    except OSError as e:
        return None, f"{type(e).__name__}: {e}"
    answer = first + rest
    if not answer.startswith(b"HTTP/1.1 200"):
        return ttfb, answer.split(b"\r\n")[0].decode(errors="replace") or "closed without an answer"
    return ttfb, None if b'"finishReason"' in answer else "stream without its finish reason"


async def burst(addr, n):
    async def bounded(i):
        try:
            return await asyncio.wait_for(one_stream(addr, i), 120)
        except asyncio.TimeoutError:
            return None, "no answer within 120 s"

    return await asyncio.gather(*(bounded(i) for i in range(n)))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000 if values else float("nan")


def burst_summary(results):
    """(p50 ms, p99 ms of the first bytes of the good streams, error count, the commonest errors)."""
    errors = collections.Counter(error for _, error in results if error)
    ttfb = [t for t, e in results if t is not None and e is None]
    listed = "; ".join(f"{n}× {e}" for e, n in errors.most_common(3))
    return percentile(ttfb, 0.5), percentile(ttfb, 0.99), sum(errors.values()), listed


def burst_of_streams(args, rows):
    with stack(args, nofile=1024) as (lg, mock):
        fd_limit = next((e.get("fd_limit") for e in lg.log_events("file-descriptor limit")), "not logged")
        lg_cpu, client_cpu = cpu_secs(lg.pid), time.process_time()
        with Sampler(lg.pid) as sampler:
            p50, p99, errors, listed = burst_summary(asyncio.run(burst(lg.proxy, args.burst)))
        lg_cpu, client_cpu = cpu_secs(lg.pid) - lg_cpu, time.process_time() - client_cpu
        accept_failures = len(lg.log_events("accept failed"))
        time.sleep(1)
        direct = burst_summary(asyncio.run(burst(mock, args.burst)))
    log(f"burst of {args.burst}: errors {errors} {listed}; p50 {p50:.0f} ms p99 {p99:.0f} ms "
        f"(mock alone {direct[0]:.0f} / {direct[1]:.0f} ms); fds peak {sampler.peak_fds}; fd limit {fd_limit}")
    what = f"burst of {args.burst:,} connects, one streamed request each (a Gemini SSE answer of 1 s)"
    # On a machine of few cores the burst is CPU-bound: the first bytes wait
    # for the CPU loopguard, the mock and this client spend on the streams before them.
    cpu = (f"; CPU during the burst: loopguard {lg_cpu:.2f} s ({lg_cpu / args.burst * 1000:.2f} ms a stream), "
           f"this client {client_cpu:.2f} s, on {os.cpu_count()} cores")
    rows.append((f"{what}: time to first byte",
                 f"p50 {p50:.0f} ms, p99 {p99:.0f} ms (mock alone: p50 {direct[0]:.0f} ms, p99 {direct[1]:.0f} ms){cpu}",
                 BEFORE["burst_ttfb"]))
    rows.append((f"{what}: errors, fds (loopguard started with soft fd limit 1,024)",
                 f"{errors} errors{' (' + listed + ')' if listed else ''}; peak {sampler.peak_fds} open fds; "
                 f"fd limit raised to {fd_limit}; {accept_failures} accept failures logged", BEFORE["burst_errors"]))


# --- main -----------------------------------------------------------------------------------------

FIGURES = {1: request_times, 2: answer_times, 3: gzip_time, 4: memory, 5: slow_uploads, 6: burst_of_streams}


def parse_args():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", default=os.path.join(root, "target", "release", "loopguard"),
                   help="the loopguard binary (default target/release/loopguard)")
    p.add_argument("--fixtures", default=os.environ.get("LOOPGUARD_FIXTURES",
                                                        os.path.join(root, "..", "shared", "fixtures")),
                   help="the mock's fixtures (default $LOOPGUARD_FIXTURES, else ../shared/fixtures)")
    p.add_argument("--quick", action="store_true", help="every size 10-100x smaller (under a minute)")
    p.add_argument("--only", default=",".join(map(str, FIGURES)), help="figures to measure, e.g. 1,4")
    for name, (full, quick, text) in SIZES.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(full), help=f"{text} (default {full}, quick {quick})")
    args = p.parse_args()
    for name, (full, quick, _) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def table(rows):
    cell = lambda text: str(text).replace("|", "\\|")
    lines = ["| what | figure | before (issue #13) |", "|---|---|---|"]
    return "\n".join(lines + [f"| {cell(w)} | {cell(f)} | {cell(b)} |" for w, f, b in rows])


def main():
    global WORK
    args = parse_args()
    WORK = tempfile.mkdtemp(prefix="lg-hardening-")
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    rows = []
    for figure in map(int, args.only.split(",")):
        log(f"figure {figure}")
        try:
            FIGURES[figure](args, rows)
        except Exception as e:  # noqa: BLE001 - a failed figure is reported, the others still run
            traceback.print_exc()
            rows.append((f"figure {figure}", f"failed: {type(e).__name__}: {e}", ""))
    print(f"loopguard hardening figures ({'quick' if args.quick else 'full'} run, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.path.realpath(args.bin)}, "
          f"{time.monotonic() - started:.0f} s)\n")
    print(table(rows))


if __name__ == "__main__":
    main()
