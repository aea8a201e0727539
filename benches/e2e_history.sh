#!/usr/bin/env bash
# End-to-end cost of a large history that grows by one tool cycle per turn,
# the way agents resend their whole history: direct-to-mock vs through
# loopguard, measured in one run, interleaved turn by turn.
#
#   benches/e2e_history.sh                      # builds the release binary
#   BIN=path/to/loopguard benches/e2e_history.sh
#   BIN=new BIN_BEFORE=old benches/e2e_history.sh   # also an older binary
#
# Each turn appends an assistant tool call and its ~RESULT_LEN-byte result to
# a history that starts at CYCLES cycles (~1 MB by default) and posts the
# compact JSON body, non-streaming, to: the mock directly; loopguard on the
# chat path (parsed, detected); loopguard on a path it does not parse (the
# plain proxy hop, same body); and, with BIN_BEFORE, the older binary on the
# chat path. Each loopguard sees one conversation (fingerprinted session, no
# session header), warm after the first turn. Prints per path the median and
# p90 latency, what loopguard adds over the direct path, and loopguard's own
# time on the chat path as it logs it (`overhead_us`: decode, parse,
# detection, before the upstream send; binaries before the hash-chain change
# left the parse out of it). The mock logs
# and hashes every body it gets (the same work on every path); its log is
# cleared every turn.
set -euo pipefail
cd "$(dirname "$0")/.."

TURNS="${TURNS:-60}"
CYCLES="${CYCLES:-200}"
RESULT_LEN="${RESULT_LEN:-5000}"

. benches/common.sh # (the script runs from the repository root)
bench_setup 'max_request_bytes = 67108864'

start_lg() { # binary, name: started in this shell, so that the EXIT trap stops it
  LOOPGUARD_LOG=info "$1" serve --config "$WORK/lg.toml" >"$WORK/$2.out" 2>"$WORK/$2.err" &
}
url_of() { echo "http://$(sed -n 's/.*proxy=\([^ ]*\).*/\1/p' "$WORK/$1.out")"; }
start_lg "$BIN" after
if [ -n "${BIN_BEFORE:-}" ]; then start_lg "$BIN_BEFORE" before; fi
sleep 0.5
LG="$(url_of after)"
LG_BEFORE=""
if [ -n "${BIN_BEFORE:-}" ]; then LG_BEFORE="$(url_of before)"; fi

python3 - "$MOCK" "$LG" "$LG_BEFORE" "$TURNS" "$CYCLES" "$RESULT_LEN" <<'PY'
import glob, http.client, json, statistics, sys, time, urllib.parse

mock, lg, lg_before = sys.argv[1:4]
turns, cycles, result_len = (int(x) for x in sys.argv[4:7])

class Target:
    def __init__(self, name, base, path):
        self.name, self.path, self.times, self.verdicts = name, path, [], 0
        self.url = urllib.parse.urlparse(base)
        self.conn = http.client.HTTPConnection(self.url.hostname, self.url.port)
    def post(self, body):
        start = time.perf_counter()
        self.conn.request("POST", self.path, body, {"content-type": "application/json", "authorization": "Bearer k"})
        response = self.conn.getresponse()
        response.read()
        self.times.append((time.perf_counter() - start) * 1000)
        if response.status != 200:
            raise SystemExit(f"{self.name}: HTTP {response.status}")
        if response.getheader("x-loopguard-verdict"):
            self.verdicts += 1

targets = [Target("direct to mock", mock, "/v1/chat/completions"),
           Target("loopguard, unparsed path", lg, "/v1/embeddings"),
           Target("loopguard", lg, "/v1/chat/completions")]
if lg_before:
    targets.append(Target("loopguard (before)", lg_before, "/v1/chat/completions"))
clear = Target("clear", mock, "/_mock/requests")

# Tool results are slices of this crate's source: newlines, quotes and
# backslashes in realistic density (escapes are what slows a JSON scan).
text = "".join(open(p).read() for p in sorted(glob.glob("src/**/*.rs", recursive=True)))
messages = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Refactor the parser module."}]
def cycle(i):
    start = (i * 7919) % (len(text) - result_len)
    body = f"// file {i}\n" + text[start:start + result_len]
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/file_{i}.rs"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": body}]
for i in range(cycles):
    messages += cycle(i)

size = 0
for turn in range(turns + 1):
    messages += cycle(cycles + turn)
    body = json.dumps({"model": "m", "messages": messages}, separators=(",", ":")).encode()
    size = len(body)
    order = targets[turn % len(targets):] + targets[:turn % len(targets)]
    for t in order:
        t.post(body)
    clear.conn.request("DELETE", "/_mock/requests"); clear.conn.getresponse().read()
    if turn == 0:  # warm-up turn: first request of each conversation
        for t in targets:
            t.times.clear()

print(f"{turns} turns, history {size / 1e6:.2f} MB at the end, one tool cycle added per turn, interleaved")
base = statistics.median(targets[0].times)
for t in targets:
    med = statistics.median(t.times)
    p90 = statistics.quantiles(t.times, n=10)[-1]
    extra = "" if t is targets[0] else f", added {med - base:+.3f} ms (x{med / base:.2f})"
    verdicts = f", {t.verdicts} verdicts" if t.verdicts else ""
    print(f"  {t.name:26} p50 {med:7.3f} ms  p90 {p90:7.3f} ms{extra}{verdicts}")
PY

own() { # name -> median logged overhead_us of the chat-path requests after the warm-up turn, in ms
  sed 's/\x1b\[[0-9;]*m//g' "$WORK/$1.err" | grep 'dialect="openai-chat"' | grep -o 'overhead_us=[0-9]*' \
    | cut -d= -f2 | tail -n "$TURNS" | sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.3f ms\n", a[int(NR/2)+1]/1000}'
}
echo "loopguard's own time on the chat path (median logged overhead_us): $(own after)"
if [ -n "${BIN_BEFORE:-}" ]; then echo "  before: $(own before)"; fi
