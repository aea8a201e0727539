#!/usr/bin/env python3
"""Parse-memory figures of issue #13 point 3: RSS of a loopguard binary
before / during (peak) / after large OpenAI chat request bodies, one at a
time and three at once, against its own mock upstream.

Bodies: `calls` (a 54 MB body of 10^6 parallel calls, 1,000 per assistant
turn) and `long` (a ~20 MB looping session: 5,000 calls with 2 KB results
and ten 1 MB base64 images, the last calls identical).

Usage: scripts/measure_parse_memory.py BINARY [config-extra-lines]
(MEASURE_LOG=path keeps loopguard's debug log there.)
Prints one line per run: body, concurrency, status(es), verdict header,
RSS before / peak / 2 s after / 10 s after (MiB)."""
import json, os, re, socket, subprocess, sys, tempfile, threading, time, http.client

BIN = sys.argv[1]
EXTRA = sys.argv[2] if len(sys.argv) > 2 else ""


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def calls_body():
    turns = []
    call = 0
    for _ in range(1000):
        calls = []
        for _ in range(1000):
            calls.append('{"id":"%x","function":{"name":"f","arguments":"{}"}}' % call)
            call += 1
        turns.append('{"role":"assistant","tool_calls":[' + ",".join(calls) + "]}")
    return ('{"model":"m","messages":[{"role":"user","content":"go"},' + ",".join(turns) + "]}").encode()


def long_body():
    import base64, random
    rnd = random.Random(7)
    msgs = [{"role": "system", "content": "You are a coding agent. " * 200},
            {"role": "user", "content": "Fix the build."}]
    image = base64.b64encode(rnd.randbytes(750_000)).decode()
    for i in range(5000):
        looping = i >= 4990
        args = json.dumps({"path": "src/lib.rs" if looping else f"src/f{i}.rs"})
        msgs.append({"role": "assistant", "content": f"Reading file {i}.", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": args}}]})
        text = "same contents\n" * 200 if looping else f"{i} " + "lorem ipsum dolor sit amet " * 70
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
        if i % 500 == 250:
            msgs.append({"role": "user", "content": [
                {"type": "text", "text": "screenshot"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]})
    return json.dumps({"model": "m", "stream": False, "messages": msgs}).encode()


def start(args, log=None):
    env = dict(os.environ, LOOPGUARD_LOG="info,loopguard=debug") if log else None
    err = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen([BIN, "--log-format", "json"] + args, stdout=subprocess.PIPE,
                         stderr=err, env=env)
    line = p.stdout.readline().decode()
    return p, line


def addr(line, key):
    return line.split(key, 1)[1].split()[0]


def post(host, port, body, session, out, i):
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", "/v1/chat/completions", body,
              {"content-type": "application/json", "x-loopguard-session": session})
    r = c.getresponse()
    r.read()
    out[i] = (r.status, r.getheader("x-loopguard-verdict") or "-")


def run(lg_addr, pid, body, n, name):
    host, port = lg_addr.rsplit(":", 1)
    before = rss_mib(pid)
    out = [None] * n
    ts = [threading.Thread(target=post, args=(host, int(port), body, f"{name}-{time.time()}-{i}", out, i))
          for i in range(n)]
    peak = before
    for t in ts:
        t.start()
    while any(t.is_alive() for t in ts):
        peak = max(peak, rss_mib(pid))
        time.sleep(0.02)
    time.sleep(2)
    after2 = rss_mib(pid)
    time.sleep(8)
    after10 = rss_mib(pid)
    print(f"{name:6} x{n}: {out} rss before {before:.0f} peak {peak:.0f} after2s {after2:.0f} after10s {after10:.0f} MiB",
          flush=True)


def main():
    fixtures = os.environ.get("LOOPGUARD_FIXTURES", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures"))
    mock, line = start(["mock-upstream", "--listen", "127.0.0.1:0", "--fixtures", fixtures])
    up = addr(line, "listening on ")
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(f'[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\n{EXTRA}\n\n'
              f'[[routes]]\nprefix = "/v1"\nprovider = "openai"\nupstream = "http://{up}"\n')
    cfg.close()
    lg, line = start(["serve", "--config", cfg.name], os.environ.get("MEASURE_LOG"))
    lg_addr = addr(line, "proxy=")
    time.sleep(0.5)
    bodies = {"long": long_body(), "calls": calls_body()}
    for name, body in bodies.items():
        print(f"{name}: {len(body) / 1e6:.1f} MB", flush=True)
    try:
        for name in ["long", "calls"]:
            for n in [1, 3]:
                run(lg_addr, lg.pid, bodies[name], n, name)
    finally:
        lg.kill(); mock.kill()


if __name__ == "__main__":
    main()
