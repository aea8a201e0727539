"""Per-event latency of a streamed answer: how long each SSE event takes from
the upstream's write to the client's read, directly and through each proxy
(see benches/events.sh).

    python3 benches/events.py upstream PORT_FILE EVENTS GAP_MS
        an upstream that answers every POST with an OpenAI chat stream of
        EVENTS text deltas, GAP_MS apart, each stamped with the monotonic
        clock (ns) at its write; writes its port to PORT_FILE
    python3 benches/events.py client URL REQUESTS SEED
        REQUESTS streamed chat completions to URL (after one unmeasured),
        one at a time on one keep-alive connection, each a new
        conversation; prints
        "first_p50_us later_p50_us later_p99_us events" where first is the
        first event's latency and later every other event's

Both run on one machine: the stamps and the reads use the same clock
(CLOCK_MONOTONIC). Only text deltas are sent, so a proxy that holds tool
calls holds nothing here.
"""

import http.client
import http.server
import json
import re
import statistics
import sys
import time
import urllib.parse

STAMP = re.compile(rb'"id":"chatcmpl-t(\d+)"')


def event(text, finish=None):
    """One SSE event; a text delta carries the time of its making in its id
    (the answer's last event, which ends it, carries none)."""
    chunk = {
        "id": "chatcmpl-end" if finish else f"chatcmpl-t{time.monotonic_ns()}",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


class Upstream(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the stamped stream; keep-alive (HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    events = 20
    gap = 0.02

    def do_POST(self):
        if self.headers.get("transfer-encoding"):
            self.send_error(411, "events.py upstream: send the body with a Content-Length")
            return
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n in range(self.events):
            self.chunk(event(f"w{n} "))
            time.sleep(self.gap)
        self.chunk(event("", "stop") + b"data: [DONE]\n\n")
        self.chunk(b"")

    def do_GET(self):
        """Ready checks (benches/nginx.sh asks through nginx)."""
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def chunk(self, data):
        """One chunk of the chunked body, sent at once (empty: the end)."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def log_message(self, format, *args):
        pass


def upstream(port_file, events, gap_ms):
    Upstream.events = int(events)
    Upstream.gap = float(gap_ms) / 1000
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream) as server:
        with open(port_file, "w") as f:
            f.write(str(server.server_address[1]))
        server.serve_forever()


def client(url, requests, seed):
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port)
    first, later = [], []
    # One answer unmeasured first: the connections open, lazy state built.
    for r in range(-1, int(requests)):
        latencies = answer(conn, parsed.path, f"{seed}-{r}")
        if r >= 0:
            first.append(latencies[0])
            later.extend(latencies[1:])
    if not later:
        sys.exit("events.py client: no event after the first (EVENTS must be 2 or more)")
    p99 = statistics.quantiles(later, n=100)[98] if len(later) >= 100 else max(later)
    print(f"{statistics.median(first):.1f} {statistics.median(later):.1f} {p99:.1f} {len(first) + len(later)}")


def answer(conn, path, conversation):
    """One streamed answer: each stamped event's latency (µs), in order."""
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": f"Conversation {conversation}: write a long answer."}],
        }
    )
    conn.request("POST", path, body, {"content-type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        sys.exit(f"{path}: HTTP {response.status}: {response.read()[:300]!r}")
    buffer = b""
    latencies = []
    ended = False
    while True:
        data = response.read1(65536)
        now = time.monotonic_ns()
        if not data:
            break
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for e in events:
            m = STAMP.search(e)
            if m:
                latencies.append((now - int(m.group(1))) / 1000)
            ended = ended or b'"chatcmpl-end"' in e
    if not ended or not latencies:
        sys.exit(f"{path}: the answer broke off after {len(latencies)} events")
    return latencies


if __name__ == "__main__":
    if sys.argv[1] == "upstream":
        upstream(*sys.argv[2:5])
    else:
        client(*sys.argv[2:5])
