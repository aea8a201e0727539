"""Busy segments of a proxy's threads per request, from `perf script` output
of the raw_syscalls tracepoints (see benches/segments.sh).

A busy segment is a thread's time from one epoll_wait's return to its next
epoll_wait's entry: what the proxy computes between two waits. With one
request in flight at a time (oha -c 1) at a low rate, one request's
segments come in a cluster, apart from the next request's by the idle gap;
in each cluster the first segment that writes (writev) is the request path
(the client's request read, loopguard's parse and judgement, the upstream
request written), the last one that writes is the response path (the
upstream's answer read, judged and written to the client).

    python3 benches/segments.py perf-script.txt THREAD_PREFIX RATE
    -> "request_p50_us response_p50_us busy_p50_us requests"

Only threads whose name starts with THREAD_PREFIX count (a proxy's serving
threads: other threads of the process may wait elsewhere than in
epoll_wait). Clusters are told apart by an idle gap of 2 ms, or half the
interval between requests at RATE req/s when that is shorter.
"""

import re
import statistics
import sys

EPOLL_WAIT = {232, 281}  # epoll_wait, epoll_pwait
WRITEV = 20

LINE = re.compile(r"^\s*(.+?)\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):\s+NR (\d+)")


def segments(lines, prefix):
    """(start, end, writes) of every busy segment of the threads named
    `prefix`..., in time order."""
    open_at = {}
    writes = {}
    out = []
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        if not m.group(1).startswith(prefix):
            continue
        tid, t, kind, nr = m.group(2), float(m.group(3)), m.group(4), int(m.group(5))
        if nr in EPOLL_WAIT:
            if kind == "exit":
                open_at[tid] = t
                writes[tid] = False
            elif tid in open_at:
                out.append((open_at.pop(tid), t, writes.pop(tid)))
        elif nr == WRITEV and kind == "enter" and tid in open_at:
            writes[tid] = True
    out.sort()
    return out


def clusters(segs, gap):
    """Segments grouped per request: a new group after `gap` seconds idle."""
    group, end = [], None
    for seg in segs:
        if group and seg[0] - end > gap:
            yield group
            group = []
        group.append(seg)
        end = seg[1] if end is None else max(end, seg[1])
    if group:
        yield group


def main(path, prefix, rate):
    gap = min(0.002, 0.5 / rate)
    with open(path, encoding="utf-8", errors="replace") as f:
        segs = segments(f, prefix)
    request, response, busy = [], [], []
    for group in clusters(segs, gap):
        writing = [s for s in group if s[2]]
        if len(writing) < 2:
            continue  # a cluster cut by the trace's start or end
        request.append((writing[0][1] - writing[0][0]) * 1e6)
        response.append((writing[-1][1] - writing[-1][0]) * 1e6)
        busy.append(sum(s[1] - s[0] for s in group) * 1e6)
    if not request:
        print("nan nan nan 0")
        return
    print(
        f"{statistics.median(request):.1f} {statistics.median(response):.1f} "
        f"{statistics.median(busy):.1f} {len(request)}"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
