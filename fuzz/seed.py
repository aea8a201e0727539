#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from the
recorded fixtures (../shared/fixtures, or $LOOPGUARD_FIXTURES), the real
agent trajectories (../shared/trajectories) and config/. Nothing is copied
into the repository: the corpora are generated and git-ignored.

Each target's input layout (the leading bytes) is described in its source.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("LOOPGUARD_FIXTURES", ROOT.parent / "shared" / "fixtures"))
TRAJECTORIES = Path(os.environ.get("LOOPGUARD_TRAJECTORIES", ROOT.parent / "shared" / "trajectories"))
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus"
# Seeds stay small so the fuzzer's mutations stay fast.
MAX_SEED = 48 * 1024
DIALECTS = ["openai-chat", "openai-responses", "anthropic", "gemini"]


def put(target, data):
    if len(data) > MAX_SEED:
        return
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def eventstream_message(headers, payload):
    import struct
    import zlib
    block = b""
    for name, value in headers:
        n, v = name.encode(), value.encode()
        block += bytes([len(n)]) + n + b"\x07" + struct.pack(">H", len(v)) + v
    total = 16 + len(block) + len(payload)
    prelude = struct.pack(">II", total, len(block))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def bedrock_chunk(data):
    import base64
    payload = json.dumps({"bytes": base64.b64encode(data).decode()}).encode()
    return eventstream_message(
        [(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")], payload)


def sse_payloads(raw):
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(b"\n".join(data))
    return out


def responses_of_chat(body):
    items = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            if m.get("content"):
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": m["content"]}]})
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                items.append({"type": "function_call", "call_id": c.get("id"), "name": f.get("name"), "arguments": f.get("arguments")})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m.get("content")})
        elif role == "system":
            continue
        else:
            items.append({"type": "message", "role": role, "content": m.get("content")})
    tools = [{"type": "function", "name": t.get("function", {}).get("name")} for t in body.get("tools", [])]
    system = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), None)
    return {"model": body.get("model", "m"), "stream": True, "instructions": system, "input": items, "tools": tools}


def anthropic_of_chat(body):
    messages = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                try:
                    args = json.loads(f.get("arguments") or "{}")
                except ValueError:
                    args = {}
                blocks.append({"type": "tool_use", "id": c.get("id"), "name": f.get("name"), "input": args})
            messages.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": m.get("content")}]})
        elif role == "user":
            messages.append({"role": "user", "content": m.get("content")})
    system = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), None)
    tools = [{"name": t.get("function", {}).get("name"), "input_schema": {"type": "object"}} for t in body.get("tools", [])]
    return {"model": "claude", "max_tokens": 1024, "stream": True, "system": system, "messages": messages, "tools": tools}


def gemini_of_chat(body):
    contents = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            parts = [{"text": m["content"]}] if m.get("content") else []
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                try:
                    args = json.loads(f.get("arguments") or "{}")
                except ValueError:
                    args = {}
                parts.append({"functionCall": {"name": f.get("name"), "args": args}})
            contents.append({"role": "model", "parts": parts})
        elif role == "tool":
            contents.append({"role": "user", "parts": [{"functionResponse": {"name": "tool", "response": {"output": m.get("content")}}}]})
        elif role == "user":
            contents.append({"role": "user", "parts": [{"text": m.get("content")}]})
    system = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), None)
    decls = [{"name": t.get("function", {}).get("name")} for t in body.get("tools", [])]
    return {"systemInstruction": {"parts": [{"text": system or ""}]}, "contents": contents, "tools": [{"functionDeclarations": decls}]}


def converse_of_chat(body):
    """A chat request as Bedrock Converse's body (`toolUse` / `toolResult`
    blocks, `system` blocks, `toolConfig`)."""
    messages = []
    for m in body.get("messages", []):
        role = m.get("role")
        if role == "assistant":
            blocks = [{"text": m["content"]}] if isinstance(m.get("content"), str) and m["content"] else []
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                try:
                    args = json.loads(f.get("arguments") or "{}")
                except ValueError:
                    args = {}
                blocks.append({"toolUse": {"toolUseId": c.get("id"), "name": f.get("name"), "input": args}})
            messages.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            content = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            messages.append({"role": "user", "content": [{"toolResult": {"toolUseId": m.get("tool_call_id"),
                                                                         "content": [{"text": content}], "status": "success"}}]})
        elif role == "user":
            content = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            messages.append({"role": "user", "content": [{"text": content}]})
    system = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), None)
    tools = [{"toolSpec": {"name": t.get("function", {}).get("name"), "inputSchema": {"json": {"type": "object"}}}}
             for t in body.get("tools", [])]
    return {"messages": messages, "system": [{"text": system}] if isinstance(system, str) else [],
            "inferenceConfig": {"maxTokens": 1024}, "toolConfig": {"tools": tools}}


def converse_of_anthropic(events):
    """Anthropic stream events as ConverseStream events `(type, payload)`,
    as the mock translates them (src/tools/mock/converse.rs)."""
    out = []
    usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    for e in events:
        kind, i = e.get("type"), e.get("index", 0)
        if kind == "message_start":
            usage["inputTokens"] = (e.get("message") or {}).get("usage", {}).get("input_tokens", 0)
            out.append(("messageStart", {"role": "assistant"}))
        elif kind == "content_block_start" and (e.get("content_block") or {}).get("type") == "tool_use":
            b = e["content_block"]
            out.append(("contentBlockStart", {"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": b.get("id"), "name": b.get("name")}}}))
        elif kind == "content_block_delta":
            d = e.get("delta") or {}
            delta = {"text_delta": lambda: {"text": d.get("text")},
                     "thinking_delta": lambda: {"reasoningContent": {"text": d.get("thinking")}},
                     "signature_delta": lambda: {"reasoningContent": {"signature": d.get("signature")}},
                     "input_json_delta": lambda: {"toolUse": {"input": d.get("partial_json")}}}.get(d.get("type"))
            if delta:
                out.append(("contentBlockDelta", {"contentBlockIndex": i, "delta": delta()}))
        elif kind == "content_block_stop":
            out.append(("contentBlockStop", {"contentBlockIndex": i}))
        elif kind == "message_delta":
            usage["outputTokens"] = (e.get("usage") or {}).get("output_tokens", 0)
            out.append(("messageStop", {"stopReason": (e.get("delta") or {}).get("stop_reason") or "end_turn"}))
        elif kind == "message_stop":
            usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
            out.append(("metadata", {"usage": dict(usage), "metrics": {"latencyMs": 42}}))
    return out


def converse_event(kind, payload):
    return eventstream_message(
        [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        json.dumps(payload).encode())


# The dialect byte of the later dialects in the fuzz targets (fuzz_targets/common.rs).
CONVERSE_BYTE = 0xFB


def shrink(body, keep):
    """The request with its system text cut and only the first `keep` messages."""
    body = dict(body)
    msgs = []
    for m in body.get("messages", [])[:keep]:
        m = dict(m)
        if isinstance(m.get("content"), str):
            m["content"] = m["content"][:300]
        msgs.append(m)
    body["messages"] = msgs
    return body


def requests():
    """Small chat requests from the trajectories: a few steps of each."""
    out = []
    for path in sorted(TRAJECTORIES.glob("*.jsonl"))[:12]:
        with path.open("rb") as f:
            line = f.readline()
            for line in f:
                pass
        try:
            last = json.loads(line)
        except ValueError:
            continue
        for keep in (3, 6, 10):
            out.append(shrink(last, keep))
    return out


def main():
    if not FIXTURES.is_dir():
        sys.exit(f"no fixtures at {FIXTURES} (set LOOPGUARD_FIXTURES)")
    streams = {d: [p.read_bytes() for p in sorted((FIXTURES / d).glob("*.sse"))] for d in DIALECTS}
    for i, d in enumerate(DIALECTS):
        for raw in streams[d]:
            put("sse_decoder", bytes([i * 37 % 256, 0]) + raw)
            put("sse_decoder", bytes([i, 16]) + raw)
            payloads = sse_payloads(raw)
            put("stream_parser", bytes([i]) + b"\n".join(p.replace(b"\n", b" ") for p in payloads))
            for behaviour in (0, 1, 2, 0x11, 0x36, 0x80):
                put("writer", bytes([i, 0, behaviour, i * 11]) + raw)
            if d == "gemini":
                array = b"[" + b",\n".join(payloads) + b"]"
                put("json_array", bytes([i]) + array)
                for behaviour in (0, 1, 2):
                    put("writer", bytes([3, 2, behaviour, 5]) + array)
            else:
                # The last payload with the whole body shape is close to a non-streaming answer.
                for behaviour in (0, 1, 2):
                    put("writer", bytes([i, 1, behaviour, 9]) + (payloads[-1] if payloads else b"{}"))
    convert = [lambda b: b, responses_of_chat, anthropic_of_chat, gemini_of_chat]
    for body in requests():
        for i, to in enumerate(convert):
            full = json.dumps(to(body)).encode()
            put("request_parser", bytes([i]) + full)
            put("warning_injection", bytes([i]) + full)
            shorter = dict(body, messages=body["messages"][:-2])
            put("history_chain", bytes([i]) + json.dumps(to(shorter)).encode() + b"\xff" + full)
        put("request_parser", bytes([CONVERSE_BYTE]) + json.dumps(converse_of_chat(body)).encode())
    for path in sorted((ROOT / "config").glob("*.toml")):
        put("config", path.read_bytes())
    # Every ```toml block of the README and docs/: the shapes the docs show.
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in path.read_text().split("```toml\n")[1:]:
            put("config", block.split("```")[0].encode())
    put("config", b'[[routes]]\nprefix = "/v1"\nprovider = "openai"\nupstream = "http://127.0.0.1:1"\n')
    # Ollama: the hand-made NDJSON fixtures of tests/fixtures/ollama.
    for i, path in enumerate(sorted((ROOT / "tests" / "fixtures" / "ollama").glob("*.ndjson"))):
        put("ndjson", bytes([i * 29 % 256]) + path.read_bytes())
    # Bedrock: the anthropic fixtures framed as AWS event streams (as the
    # mock does), one chunk event per SSE event, and a trailing exception.
    for i, path in enumerate(sorted((FIXTURES / "anthropic").glob("*.sse"))):
        frames = b"".join(bedrock_chunk(p) for p in sse_payloads(path.read_bytes()))
        put("eventstream", bytes([i * 37 % 256]) + frames)
        put("eventstream", bytes([i]) + frames + eventstream_message(
            [(":exception-type", "validationException"), (":content-type", "application/json"),
             (":message-type", "exception")], b'{"message":"boom"}'))
    # Bedrock Converse: the same fixtures as ConverseStream events (each
    # message's type in `:event-type`, its payload the event's JSON), as
    # event streams and, for the stream parser, as `{"<type>": payload}`
    # lines; one whole Converse answer.
    for i, path in enumerate(sorted((FIXTURES / "anthropic").glob("*.sse"))):
        events = []
        for p in sse_payloads(path.read_bytes()):
            try:
                events.append(json.loads(p))
            except ValueError:
                pass
        converse = converse_of_anthropic(events)
        frames = b"".join(converse_event(k, v) for k, v in converse)
        put("eventstream", bytes([i * 41 % 256]) + frames + eventstream_message(
            [(":exception-type", "throttlingException"), (":content-type", "application/json"),
             (":message-type", "exception")], b'{"message":"slow down"}'))
        put("stream_parser", bytes([CONVERSE_BYTE]) + b"\n".join(json.dumps({k: v}).encode() for k, v in converse))
    put("stream_parser", bytes([CONVERSE_BYTE]) + json.dumps({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}, {"text": "Listing."},
            {"toolUse": {"toolUseId": "t1", "name": "ls", "input": {"path": "."}}}]}},
        "stopReason": "tool_use", "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
        "metrics": {"latencyMs": 12}}).encode())
    # Recordings (recording::format): a header, then each request as what it
    # adds to the lane's history (keep + items), a fixture's stream as its
    # response, and a stream-time verdict; one whole-body request too.
    sse = streams["openai-chat"]
    for n, body in enumerate(requests()):
        header = {"loopguard_recording": 1, "dialect": "openai-chat", "route": "/v1", "session": "s%d" % n,
                  "lane": "%016x" % n, "started_unix_ms": 1_700_000_000_000}
        lines = [header]
        msgs = body["messages"]
        head = {k: v for k, v in body.items() if k != "messages"}
        kept = 0
        for step, upto in enumerate(range(2, len(msgs) + 1, 2)):
            line = {"kind": "request", "t_us": 1000 * step, "keep": kept, "items": msgs[kept:upto], "summarizer": False, "verdicts": []}
            if step == 0:
                line["head"] = head
            lines.append(line)
            kept = upto
            raw = sse[(n + step) % len(sse)] if sse else b""
            lines.append({"kind": "response", "t_us": 1000 * step + 500, "mode": "sse", "body": raw.decode("utf-8", "replace"), "bytes": len(raw)})
        lines.append({"kind": "verdict", "t_us": 99, "at": "stream", "detector": "identical_call", "level": "warning"})
        lines.append({"kind": "request", "t_us": 100_000, "body": {"model": "m", "input": "hi"}, "verdicts": [{"detector": "x", "level": "block"}]})
        lines.append({"kind": "response", "t_us": 100_001, "mode": "whole", "truncated": True, "bytes": 1 << 30})
        put("recording", "\n".join(json.dumps(l) for l in lines).encode() + b"\n")
    # The Redis store's stored forms (fuzz/seeds/redis_record/, see its
    # README): byte 0 even, a response record; odd, a session blob.
    for path in sorted((ROOT / "fuzz" / "seeds" / "redis_record").glob("*.json")):
        raw = path.read_bytes().strip()
        put("redis_record", (b"\x00" if path.name.startswith("record") else b"\x01") + raw)
    for target in sorted(p.name for p in OUT.iterdir()):
        print(f"{target}: {len(list((OUT / target).iterdir()))} seeds")


if __name__ == "__main__":
    main()
