#!/usr/bin/env python3
"""Soak load for benches/soak.sh: `streams` clients each looping over slow
streamed chat requests and `clients` looping over non-streaming ones, for
`seconds`, spread over `procs` client processes (one asyncio loop each, so
the client is not the bottleneck); every 10 s prints loopguard's RSS and
open fds with the running counts; at the end the request count, errors
(each with its reason and when it happened), and p50/p99 time to first
byte per kind.

A streamed answer counts as ok only when it is HTTP 200 and ends with
`data: [DONE]` (every openai-chat fixture of the mock does); a whole answer
only when it is HTTP 200 and parses as JSON.

    soak_client.py URL SECONDS STREAMS CLIENTS PID [PROCS]
"""

import asyncio
import collections
import json
import multiprocessing as mp
import os
import queue
import ssl
import sys
import time

try:  # the SDKs' pinned client (tests/python/requirements.lock)
    import httpx2 as httpx
except ImportError:
    import httpx

BODY = '{"model":"m","stream":%s,"messages":[{"role":"user","content":"hello %d"}]}'
KINDS = ("stream", "whole")


def cpu_seconds(pid):
    """The process's user + system CPU time, seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_fds(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(line for line in f if line.startswith("VmRSS")).split()[1]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return int(rss) // 1024, fds
    except (OSError, StopIteration):
        return -1, -1


def share(total, procs, index):
    """The workers of process `index` among `total`: (first id, count)."""
    base, extra = divmod(total, procs)
    start = index * base + min(index, extra)
    return start, base + (1 if index < extra else 0)


async def worker(client, url, kind, n, end, counts, first, reasons, t0):
    stream = "true" if kind == "stream" else "false"
    k = KINDS.index(kind)
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            async with client.stream("POST", f"{url}/v1/chat/completions", content=BODY % (stream, n),
                                     headers={"content-type": "application/json", "x-loopguard-session": f"{kind}-{n}"}) as r:
                got_first = False
                body = bytearray()
                async for chunk in r.aiter_raw():
                    if not got_first:
                        first[kind].append(time.monotonic() - started)
                        got_first = True
                    body += chunk
                if r.status_code != 200:
                    why = f"HTTP {r.status_code}: {bytes(body[:120])!r}"
                elif kind == "stream" and not body.rstrip().endswith(b"data: [DONE]"):
                    why = f"stream ended without [DONE] after {len(body)} bytes: ...{bytes(body[-80:])!r}"
                elif kind == "whole" and not _is_json(body):
                    why = f"answer is not JSON ({len(body)} bytes): {bytes(body[:80])!r}"
                else:
                    why = None
        except Exception as e:  # noqa: BLE001 - every failure counts as an error
            cause = f" (cause: {type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
            why = f"{type(e).__name__}: {str(e)[:120]}{cause}"
        with counts.get_lock():
            counts[2 * k + (1 if why else 0)] += 1
        if why:
            reasons.append((round(time.monotonic() - t0, 1), f"{kind}-{n}", why))
            await asyncio.sleep(0.1)


def _is_json(body):
    try:
        json.loads(body)
        return True
    except ValueError:
        return False


def run_share(url, seconds, streams, clients, procs, index, counts, out, t0):
    first = {"stream": [], "whole": []}
    reasons = []

    async def main():
        end = t0 + seconds
        s0, sn = share(streams, procs, index)
        c0, cn = share(clients, procs, index)
        # One client (a pool of one connection) per worker: httpcore's pool
        # scans every connection and waiting request on each checkout and
        # release, so one pool of 1,200 connections made the client spend
        # its core there, read answers tens of seconds after loopguard sent
        # them and leave connections idle past the servers' 30 s keep-alive
        # (see docs/benchmarks.md, "Soak"). One TLS context for all.
        tls = ssl.create_default_context()
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        jobs = [("stream", i) for i in range(s0, s0 + sn)] + [("whole", i) for i in range(c0, c0 + cn)]
        pools = [httpx.AsyncClient(timeout=120, limits=limits, verify=tls) for _ in jobs]
        try:
            await asyncio.gather(*(worker(c, url, kind, i, end, counts, first, reasons, t0)
                                   for c, (kind, i) in zip(pools, jobs)))
        finally:
            for c in pools:
                await c.aclose()

    asyncio.run(main())
    out.put((first, reasons))


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000


def main():
    url, seconds, streams, clients, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    procs = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    counts = mp.Array("q", 4)  # stream ok, stream errors, whole ok, whole errors
    out = mp.Queue()
    t0 = time.monotonic()
    workers = [mp.Process(target=run_share, args=(url, seconds, streams, clients, procs, i, counts, out, t0))
               for i in range(procs)]
    for w in workers:
        w.start()
    samples = []
    cpu, at = cpu_seconds(pid), time.monotonic()
    while time.monotonic() < t0 + seconds:
        rss, fds = rss_fds(pid)
        samples.append((rss, fds))
        c = list(counts)
        now_cpu, now = cpu_seconds(pid), time.monotonic()
        busy = 100 * (now_cpu - cpu) / max(now - at, 1e-9)
        cpu, at = now_cpu, now
        print(f"t={now - t0:5.0f}s rss={rss} MB fds={fds} loopguard_cpu={busy:3.0f}% "
              f"ok=stream {c[0]} whole {c[2]} errors=stream {c[1]} whole {c[3]}", flush=True)
        time.sleep(10)
    first = {"stream": [], "whole": []}
    reasons = []
    for _ in workers:  # read before joining: a child blocks until its result is taken
        try:
            f, r = out.get(timeout=300)
        except queue.Empty:
            sys.exit(f"a client process gave no result (exit codes {[w.exitcode for w in workers]})")
        for kind in KINDS:
            first[kind] += f[kind]
        reasons += r
    for w in workers:
        w.join()
    rss, fds = rss_fds(pid)
    c = list(counts)
    print(f"end    rss={rss} MB fds={fds}")
    for k, kind in enumerate(KINDS):
        print(f"{kind}: {c[2 * k]} ok, {c[2 * k + 1]} errors, first byte p50 {pct(first[kind], .5):.1f} ms, "
              f"p99 {pct(first[kind], .99):.1f} ms")
    for reason, count in collections.Counter(r[2] for r in reasons).most_common():
        print(f"  error x{count}: {reason}")
    for t, who, why in sorted(reasons)[:50]:
        print(f"  at {t:7.1f}s {who}: {why}")
    rss = [s[0] for s in samples if s[0] >= 0]
    if rss:
        print(f"rss min/max {min(rss)}/{max(rss)} MB; fds max {max(s[1] for s in samples)}")
    sys.exit(1 if c[1] or c[3] else 0)


if __name__ == "__main__":
    main()
