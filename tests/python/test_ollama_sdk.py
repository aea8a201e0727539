"""The official `ollama` Python client (PyPI) through loopguard's `ollama`
route: the same answers as from the upstream directly, streaming and not,
tool calls included; an agent loop that repeats a call is stopped by a
block it reads as a normal answer; an abort is the client's ResponseError."""

import json
import uuid

import ollama
import pytest

TOOLS = [{"type": "function", "function": {"name": "ls", "description": "List a directory",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
LOOP = json.dumps({"turns": [{"text": "Looking.", "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}]})


def client(host, headers=None):
    return ollama.Client(host=host, headers=headers or {})


def answer(c, stream, **kw):
    """The chat answer as one message: content joined, tool calls, last line."""
    if not stream:
        r = c.chat(stream=False, **kw)
        return r.message.content, r.message.tool_calls or [], r
    content, calls, last = "", [], None
    for part in c.chat(stream=True, **kw):
        content += part.message.content or ""
        calls += part.message.tool_calls or []
        last = part
    return content, calls, last


@pytest.mark.parametrize("stream", [True, False])
def test_the_client_gets_the_upstreams_answer(mock, loopguard, stream):
    headers = {"x-mock-script": LOOP}
    messages = [{"role": "user", "content": f"list the files {uuid.uuid4()}"}]
    direct = answer(client(mock.url, headers), stream, model="llama3.2", messages=messages, tools=TOOLS)
    proxied = answer(client(loopguard.url + "/ollama", headers), stream, model="llama3.2",
                     messages=messages, tools=TOOLS)
    assert proxied[0] == direct[0] == "Looking."
    assert [c.function.name for c in proxied[1]] == ["ls"]
    assert proxied[1][0].function.arguments == {"path": "."}
    assert proxied[2].done and proxied[2].done_reason == "stop"
    assert proxied[2].model_dump() == direct[2].model_dump()


@pytest.mark.parametrize("stream", [True, False])
def test_generate_passes_through(mock, loopguard, stream):
    c = client(loopguard.url + "/ollama", {"x-mock-script": json.dumps({"turns": [{"text": "Because of Rayleigh scattering."}]})})
    if stream:
        text = "".join(p.response for p in c.generate(model="llama3.2", prompt="Why is the sky blue?", stream=True))
    else:
        text = c.generate(model="llama3.2", prompt="Why is the sky blue?", stream=False).response
    assert text == "Because of Rayleigh scattering."


@pytest.mark.parametrize("stream", [True, False])
def test_a_looping_agent_is_blocked_with_a_normal_answer(loopguard, stream):
    """An agent loop on the client: run every call, send the results back,
    stop when an answer has no call. The model repeats `ls` forever; loopguard
    ends the loop at the fifth identical call with a text answer."""
    c = client(loopguard.url + "/ollama", {"x-mock-script": LOOP})
    messages = [{"role": "user", "content": f"what is in this project? {uuid.uuid4()}"}]
    for turn in range(10):
        content, calls, last = answer(c, stream, model="llama3.2", messages=messages, tools=TOOLS)
        if not calls:
            break
        messages.append({"role": "assistant", "content": content,
                         "tool_calls": [{"function": {"name": x.function.name, "arguments": x.function.arguments}}
                                        for x in calls]})
        for x in calls:
            messages.append({"role": "tool", "tool_name": x.function.name, "content": "Cargo.toml src tests"})
    else:
        pytest.fail("the loop was never stopped")
    assert turn == 4, f"stopped at turn {turn}"
    assert "[loopguard]" in content and "ls" in content
    assert last.done and last.done_reason == "stop"


@pytest.mark.parametrize("stream", [True, False])
def test_an_abort_is_the_clients_response_error(loopguard_abort, stream):
    c = client(loopguard_abort.url + "/ollama", {"x-mock-script": LOOP})
    messages = [{"role": "user", "content": f"read it {uuid.uuid4()}"}]
    for _ in range(5):
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}]})
        messages.append({"role": "tool", "tool_name": "ls", "content": "Cargo.toml src tests"})
    with pytest.raises(ollama.ResponseError) as raised:
        answer(c, stream, model="llama3.2", messages=messages, tools=TOOLS)
    assert raised.value.status_code == 400
    assert raised.value.error.startswith("loop_detected")
