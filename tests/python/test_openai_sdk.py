"""The official `openai` SDK gets the same results through loopguard as
talking to the upstream directly, streaming and not, tool calls included."""

import json

import openai
import pytest

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_directory",
            "description": "List a directory",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
MESSAGES = [{"role": "user", "content": "What files are here?"}]


def clients(mock, loopguard):
    direct = openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test", max_retries=0)
    proxied = openai.OpenAI(base_url=loopguard.url + "/v1", api_key="sk-test", max_retries=0)
    return direct, proxied


def summary_of_completion(completion):
    message = completion.choices[0].message
    return {
        "content": message.content,
        "finish": completion.choices[0].finish_reason,
        "calls": [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []],
        "usage": completion.usage.total_tokens if completion.usage else None,
    }


def summary_of_stream(stream):
    text, finish, usage = [], None, None
    calls = {}
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
                if call.function and call.function.name:
                    entry["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "content": "".join(text),
        "finish": finish,
        "calls": [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())],
        "usage": usage,
    }


def test_non_streaming_tool_call_is_identical(mock, loopguard):
    direct, proxied = clients(mock, loopguard)
    a = summary_of_completion(direct.chat.completions.create(model="gpt-test", messages=MESSAGES, tools=TOOLS))
    b = summary_of_completion(proxied.chat.completions.create(model="gpt-test", messages=MESSAGES, tools=TOOLS))
    assert a == b
    assert b["calls"] == [("list_directory", {"path": "."})]


def test_streaming_tool_call_with_usage_is_identical(mock, loopguard):
    direct, proxied = clients(mock, loopguard)
    kwargs = dict(model="gpt-test", messages=MESSAGES, tools=TOOLS, stream=True, stream_options={"include_usage": True})
    a = summary_of_stream(direct.chat.completions.create(**kwargs))
    b = summary_of_stream(proxied.chat.completions.create(**kwargs))
    assert a == b
    assert b["calls"] == [("list_directory", {"path": "."})]
    assert b["usage"] == 15
    assert b["finish"] == "tool_calls"


def test_stream_helper_accumulates_the_same_final_completion(mock, loopguard):
    direct, proxied = clients(mock, loopguard)
    results = []
    for client in (direct, proxied):
        with client.chat.completions.stream(model="gpt-test", messages=MESSAGES, tools=TOOLS) as stream:
            for _ in stream:
                pass
            results.append(summary_of_completion(stream.get_final_completion()))
    assert results[0] == results[1]


@pytest.mark.parametrize(
    "fixture",
    ["openai-chat/gpt4o-parallel-tool-calls.sse", "openai-chat/gpt4o-n3-choices-interleaved.sse", "openai-chat/deepseek-reasoner-tool-call.sse"],
)
def test_recorded_streams_read_the_same_through_loopguard(mock, loopguard, fixture):
    direct, proxied = clients(mock, loopguard)
    headers = {"x-mock-fixture": fixture}
    kwargs = dict(model="gpt-test", messages=MESSAGES, stream=True, extra_headers=headers)
    a = summary_of_stream(direct.chat.completions.create(**kwargs))
    b = summary_of_stream(proxied.chat.completions.create(**kwargs))
    assert a == b
    assert a["content"] or a["calls"]


def test_scripted_agent_loop_runs_through_loopguard(mock, loopguard):
    """Call the model, run the tool with a fixed result, send it back: the
    round trip works for several turns (detection is not part of this test)."""
    _, proxied = clients(mock, loopguard)
    messages = list(MESSAGES)
    for _ in range(3):
        completion = proxied.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"})
    assert len(messages) == 7
