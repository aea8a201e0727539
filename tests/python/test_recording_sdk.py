"""Recording with the official `openai` SDK (issue #16 point 1): an agent
loop streams through `serve` with `[recording]` on; `loopguard replay` on the
file it wrote gives the verdicts `serve` logged live — the same request
index, time of judgement (request or stream), detector and level."""

import json
import pathlib
import subprocess
import tempfile
import time

import openai

from conftest import binary, log_events, start_loopguard

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
# The mock answers every turn with the same call: a model stuck on one read.
READ_LOOP = json.dumps({"turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "src/main.rs"}}]}]})


def run_turn(client, messages, script=READ_LOOP, session="sdk-recorded"):
    """One streamed turn; returns the assistant message the SDK assembled."""
    stream = client.chat.completions.create(
        model="gpt-test",
        messages=messages,
        tools=TOOLS,
        stream=True,
        extra_headers={
            "x-mock-script": script,
            "x-loopguard-session": session,
            "x-test-session": session,
        },
    )
    text, calls = [], {}
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                if call.function and call.function.name:
                    entry["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
    message = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    return message


# The same loop with an API key in the call's arguments: the mock streams the
# arguments in pieces, so the key is cut between two deltas.
KEY = "sk-abcdefghijklmnopqrstuvwxyz123456"
KEY_LOOP = json.dumps(
    {"turns": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "src/main.rs", "token": KEY}}]}]}
)


def test_replaying_an_sdk_recording_gives_the_verdicts_serve_gave_live(mock):
    live, replayed, _ = record_and_replay(mock, READ_LOOP, "sdk-recorded")
    assert replayed == live


def test_a_key_streamed_in_pieces_is_not_recorded_and_replays_the_same(mock):
    """A key cut between two argument deltas was kept in the recording (each
    piece alone matches no pattern), and the replay, whose request lines had
    it masked, judged the streamed call as another call (found by a new-user
    test)."""
    live, replayed, text = record_and_replay(mock, KEY_LOOP, "sdk-recorded-key")
    leaked = [KEY[i : i + 8] for i in range(3, len(KEY) - 7) if KEY[i : i + 8] in text]
    assert not leaked, leaked
    assert replayed == live


def record_and_replay(mock, script, session):
    """Runs the loop through `serve` with recording on; returns the verdicts
    it logged live, those `loopguard replay` gives on the file, and the file."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="loopguard-py-recording-"))
    proc = start_loopguard(mock, f'[recording]\nenabled = true\ndir = "{directory}"\n')
    try:
        client = openai.OpenAI(base_url=proc.url + "/v1", api_key="sk-test", max_retries=0)
        messages = [{"role": "user", "content": "Fix the parser."}]
        live = []
        for i in range(9):
            before = len(log_events(proc, "verdict"))
            message = run_turn(client, messages, script, session)
            time.sleep(0.2)  # the verdict log line is written as the stream ends
            live += [(i, v["at"], v["detector"], v["level"]) for v in log_events(proc, "verdict")[before:]]
            messages.append(message)
            if not message.get("tool_calls"):
                messages.append({"role": "user", "content": "go on"})
            for call in message.get("tool_calls", []):
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "fn main() {}"})
        assert any(v[1] == "stream" for v in live), live
        assert any(v[1] == "request" for v in live), live
        assert any(v[3] == "critical" for v in live), live
        time.sleep(0.3)  # the recording writer runs off the request path
        files = sorted(directory.glob("*.rec.jsonl"))
        assert len(files) == 1, files
        out = subprocess.run([binary(), "replay", str(files[0])], capture_output=True, text=True, check=True)
        replayed = []
        for line in out.stdout.splitlines():
            v = json.loads(line)
            replayed.append((v["request"], v["at"], v["detector"], v["level"]))
        return live, replayed, files[0].read_text()
    finally:
        proc.stop()
