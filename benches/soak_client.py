#!/usr/bin/env python3
"""Soak load for benches/soak.sh: `streams` clients each looping over slow
streamed chat requests and `clients` looping over non-streaming ones, for
`seconds`; every 10 s prints loopguard's RSS and open fds; at the end the
request count, errors, and p50/p99 time to first byte per kind."""

import asyncio
import collections
import os
import sys
import time

try:  # the SDKs' pinned client (tests/python/requirements.lock)
    import httpx2 as httpx
except ImportError:
    import httpx

url, seconds, streams, clients, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
BODY = '{"model":"m","stream":%s,"messages":[{"role":"user","content":"hello %d"}]}'
first = {"stream": [], "whole": []}
errors = {"stream": 0, "whole": 0}
done = {"stream": 0, "whole": 0}
reasons = collections.Counter()
samples = []


def rss_fds():
    try:
        rss = next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")).split()[1]
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return int(rss) // 1024, fds
    except (OSError, StopIteration):
        return -1, -1


async def worker(client, kind, n, end):
    stream = "true" if kind == "stream" else "false"
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            async with client.stream("POST", f"{url}/v1/chat/completions", content=BODY % (stream, n),
                                     headers={"content-type": "application/json", "x-loopguard-session": f"{kind}-{n}"}) as r:
                got_first = False
                async for _ in r.aiter_raw():
                    if not got_first:
                        first[kind].append(time.monotonic() - started)
                        got_first = True
                if r.status_code != 200:
                    errors[kind] += 1
                    reasons[f"{kind}: HTTP {r.status_code}"] += 1
                else:
                    done[kind] += 1
        except Exception as e:  # noqa: BLE001 - every failure counts as an error
            errors[kind] += 1
            reasons[f"{kind}: {type(e).__name__}: {str(e)[:120]}"] += 1
            await asyncio.sleep(0.1)


async def monitor(end):
    start = time.monotonic()
    while time.monotonic() < end:
        rss, fds = rss_fds()
        samples.append((rss, fds))
        print(f"t={time.monotonic() - start:5.0f}s rss={rss} MB fds={fds} ok={done} errors={errors}", flush=True)
        await asyncio.sleep(10)


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000


async def main():
    end = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=streams + clients + 10, max_keepalive_connections=streams + clients + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        tasks = [worker(client, "stream", i, end) for i in range(streams)]
        tasks += [worker(client, "whole", i, end) for i in range(clients)]
        await asyncio.gather(monitor(end), *tasks)
    for kind in ("stream", "whole"):
        print(f"{kind}: {done[kind]} ok, {errors[kind]} errors, first byte p50 {pct(first[kind], .5):.1f} ms, p99 {pct(first[kind], .99):.1f} ms")
    for reason, count in reasons.most_common():
        print(f"  error x{count}: {reason}")
    rss = [s[0] for s in samples if s[0] >= 0]
    if rss:
        print(f"rss min/max {min(rss)}/{max(rss)} MB; fds max {max(s[1] for s in samples)}")


asyncio.run(main())
