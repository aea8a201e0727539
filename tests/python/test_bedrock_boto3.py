"""boto3 (PyPI) through loopguard's `bedrock` route against the mock, with
fake credentials and `endpoint_url`: `converse` and `converse_stream` (the
`bedrock-converse` dialect) and `invoke_model_with_response_stream` (the
`bedrock` dialect). botocore decodes loopguard's AWS event-stream frames
with its own decoder (CRCs checked), which the Rust tests cannot: a quiet
stream arrives as the upstream sent it, a loop is blocked with the
explanation visible to the client as the model's text, an abort is the
client's own error."""

import json
import uuid

import boto3
import botocore.config
import botocore.exceptions
import pytest

from conftest import start_loopguard

MODEL = "us.amazon.nova-pro-v1:0"
CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1:0"
LS = {"toolSpec": {"name": "ls", "description": "List a directory",
                   "inputSchema": {"json": {"type": "object", "properties": {"path": {"type": "string"}}}}}}
TEXT = json.dumps({"turns": [{"text": "Here is what I found in the directory listing."}]})
LOOP = json.dumps({"turns": [{"text": "Let me look again.", "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}]})


def route(mock):
    return f"""
[[routes]]
prefix = "/bedrock"
provider = "bedrock"
upstream = "{mock.url}"
strip_prefix = true
"""


@pytest.fixture(scope="module")
def lg(mock):
    proc = start_loopguard(mock, route(mock))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def lg_abort(mock):
    proc = start_loopguard(mock, route(mock) + '\n[loop_detection.actions]\ncritical = "abort"\n')
    yield proc
    proc.stop()


def client(endpoint, headers):
    """A bedrock-runtime client on `endpoint` with fake credentials (SigV4
    signed, never checked here); `headers` are added to every request."""
    c = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )

    def add(request, **_):
        for k, v in headers.items():
            request.headers[k] = v

    c.meta.events.register("before-sign.bedrock-runtime.*", add)
    return c


def history(task, cycles):
    messages = [{"role": "user", "content": [{"text": task}]}]
    for i in range(cycles):
        messages.append({"role": "assistant", "content": [
            {"toolUse": {"toolUseId": f"tooluse_{i}", "name": "ls", "input": {"path": "."}}}]})
        messages.append({"role": "user", "content": [
            {"toolResult": {"toolUseId": f"tooluse_{i}", "content": [{"text": "Cargo.toml src tests"}],
                            "status": "success"}}]})
    return messages


def headers(script=None):
    session = str(uuid.uuid4())
    out = {"x-loopguard-session": session, "x-test-session": session}
    if script:
        out["x-mock-script"] = script
    return out


def stream_events(c, messages):
    r = c.converse_stream(modelId=MODEL, messages=messages, system=[{"text": "You are a coding agent."}],
                          toolConfig={"tools": [LS]}, inferenceConfig={"maxTokens": 512})
    return list(r["stream"])


def masked(value):
    import re
    return re.sub(r"mock_[0-9]+", "mock_N", json.dumps(value, sort_keys=True))


def text_of(events):
    return "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)


def test_a_quiet_converse_stream_arrives_intact(mock, lg):
    """The events botocore decodes through loopguard are those it decodes
    from the mock directly, tool call included (a first call is quiet)."""
    h = headers(LOOP)
    messages = history(f"list the files {uuid.uuid4()}", 0)
    direct = stream_events(client(mock.url, h), messages)
    proxied = stream_events(client(lg.url + "/bedrock", h), messages)
    assert masked(proxied) == masked(direct)
    assert [next(iter(e)) for e in proxied][0] == "messageStart"
    assert text_of(proxied) == "Let me look again."
    starts = [e["contentBlockStart"]["start"]["toolUse"] for e in proxied if "contentBlockStart" in e]
    assert [s["name"] for s in starts] == ["ls"]
    args = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in proxied
                   if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {}))
    assert json.loads(args) == {"path": "."}
    assert proxied[-2]["messageStop"]["stopReason"] == "tool_use"
    assert proxied[-1]["metadata"]["usage"]["totalTokens"] > 0


def test_a_quiet_converse_answer_arrives_intact(mock, lg):
    h = headers(TEXT)
    messages = history(f"summarise {uuid.uuid4()}", 1)
    direct = client(mock.url, h).converse(modelId=MODEL, messages=messages, toolConfig={"tools": [LS]})
    proxied = client(lg.url + "/bedrock", h).converse(modelId=MODEL, messages=messages, toolConfig={"tools": [LS]})
    assert proxied["output"] == direct["output"]
    assert proxied["output"]["message"]["content"][0]["text"] == "Here is what I found in the directory listing."
    assert proxied["stopReason"] == "end_turn"
    assert proxied["usage"] == direct["usage"]


def test_a_looping_history_is_blocked_with_the_explanation_as_text(lg):
    """Five identical cycles: loopguard answers itself, a stream botocore
    reads as any other, the explanation as the model's text."""
    events = stream_events(client(lg.url + "/bedrock", headers()), history(f"fix it {uuid.uuid4()}", 5))
    kinds = [next(iter(e)) for e in events]
    assert kinds == ["messageStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]
    assert text_of(events).startswith("[loopguard] identical_call")
    assert events[3]["messageStop"]["stopReason"] == "end_turn"
    r = client(lg.url + "/bedrock", headers()).converse(modelId=MODEL, messages=history(f"fix {uuid.uuid4()}", 5),
                                                        toolConfig={"tools": [LS]})
    assert r["output"]["message"]["content"][0]["text"].startswith("[loopguard] identical_call")
    assert r["stopReason"] == "end_turn"


def test_a_looping_call_is_withheld_mid_stream(lg):
    """The model's fifth identical call: its text stays, the call is
    replaced by the explanation, the stream ends `end_turn`."""
    events = stream_events(client(lg.url + "/bedrock", headers(LOOP)), history(f"walk {uuid.uuid4()}", 4))
    assert not any("contentBlockStart" in e for e in events)
    text = text_of(events)
    assert text.startswith("Let me look again.")
    assert "[loopguard] identical_call" in text
    assert next(e for e in events if "messageStop" in e)["messageStop"]["stopReason"] == "end_turn"
    assert "metadata" in events[-1]


def test_an_abort_is_the_clients_error(lg_abort):
    """Before any text: HTTP 400, a ClientError; after text went out, an
    `exception` message botocore raises as the stream's error."""
    c = client(lg_abort.url + "/bedrock", headers())
    with pytest.raises(botocore.exceptions.ClientError) as e:
        c.converse(modelId=MODEL, messages=history(f"read {uuid.uuid4()}", 5), toolConfig={"tools": [LS]})
    assert "loop_detected" in str(e.value)
    c = client(lg_abort.url + "/bedrock", headers(LOOP))
    with pytest.raises(botocore.exceptions.EventStreamError) as e:
        stream_events(c, history(f"read more {uuid.uuid4()}", 4))
    assert e.value.response["Error"]["Code"] == "validationException"
    assert "loop_detected" in e.value.response["Error"]["Message"]


def claude_body(cycles):
    messages = [{"role": "user", "content": f"list {uuid.uuid4()}"}]
    for i in range(cycles):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "ls", "input": {"path": "."}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "Cargo.toml src tests"}]})
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 512, "messages": messages,
                       "tools": [{"name": "ls", "input_schema": {"type": "object"}}]})


def invoke_events(c, body):
    r = c.invoke_model_with_response_stream(modelId=CLAUDE, body=body, contentType="application/json")
    return [json.loads(e["chunk"]["bytes"]) for e in r["body"] if "chunk" in e]


def test_invoke_model_with_response_stream_through_botocore(mock, lg):
    """The `bedrock` dialect's `chunk` frames decode in botocore too: a
    quiet stream as from the mock, a looping history blocked as text."""
    h = headers(TEXT)
    body = claude_body(0)
    direct = invoke_events(client(mock.url, h), body)
    proxied = invoke_events(client(lg.url + "/bedrock", h), body)
    # The mock echoes the path's model: botocore writes `v1%3A0`, and
    # loopguard forwards a Bedrock path as sent (SigV4 signs its escapes).
    assert masked(proxied) == masked(direct)
    assert proxied[0]["type"] == "message_start" and proxied[-1]["type"] == "message_stop"
    blocked = invoke_events(client(lg.url + "/bedrock", headers()), claude_body(5))
    text = "".join(e["delta"].get("text", "") for e in blocked if e["type"] == "content_block_delta")
    assert text.startswith("[loopguard] identical_call")
    assert blocked[-1]["type"] == "message_stop"


def test_the_endpoint_variable_points_boto3_at_loopguard(lg, monkeypatch):
    """`AWS_ENDPOINT_URL_BEDROCK_RUNTIME` (boto3's per-service endpoint
    variable) is all a boto3-based agent needs to go through loopguard."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", lg.url + "/bedrock")
    c = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE",
                     aws_secret_access_key="secret")
    c.meta.events.register("before-sign.bedrock-runtime.*",
                           lambda request, **_: request.headers.__setitem__("x-mock-script", TEXT))
    r = c.converse(modelId=MODEL, messages=history(f"hello {uuid.uuid4()}", 0))
    assert r["output"]["message"]["content"][0]["text"] == "Here is what I found in the directory listing."


def test_keepalives_while_a_call_is_held_are_skipped_by_botocore(mock, tmp_path):
    """While loopguard holds a slowly streamed tool call (after text went
    out), it sends keep-alive messages of an event type botocore's model
    does not name: botocore skips them, and the client reads the events
    the upstream sent."""
    import urllib.request

    from botocore.eventstream import EventStreamBuffer
    from conftest import Proc

    config = tmp_path / "lg.toml"
    config.write_text(f"""
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
keepalive_secs = 1
header_hold_ms = 100
{route(mock)}
""")
    proc = Proc(["serve", "--config", str(config)], "loopguard")
    try:
        url = "http://" + proc.addr("proxy=") + "/bedrock"
        h = dict(headers(LOOP), **{"x-mock-pace-ms": "700"})
        messages = history(f"slowly {uuid.uuid4()}", 0)
        proxied = stream_events(client(url, h), messages)
        direct = stream_events(client(mock.url, h), messages)
        assert masked(proxied) == masked(direct)
        assert any("contentBlockStart" in e for e in proxied)
        body = json.dumps({"messages": messages, "toolConfig": {"tools": [LS]}}).encode()
        request = urllib.request.Request(f"{url}/model/m/converse-stream", data=body, method="POST",
                                         headers=dict(h, **{"content-type": "application/json"}))
        with urllib.request.urlopen(request, timeout=30) as r:
            raw = r.read()
        buffer = EventStreamBuffer()
        buffer.add_data(raw)
        kinds = [m.headers.get(":event-type") for m in buffer]
        assert "loopguardKeepalive" in kinds, kinds
        assert kinds[-1] == "metadata"
    finally:
        proc.stop()
