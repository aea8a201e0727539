"""Act in flight, through the official SDKs: an agent loop (call the model,
run the tool call with a fixed result, send it back) against a mock that
always answers the same call. loopguard warns from the request carrying the
3rd identical result, and the 5th identical call never reaches the client:
it gets loopguard's explanation as the answer (block) or HTTP 400 (abort)."""

import json
import uuid

import openai
import pytest
from google import genai
from google.genai import types

from conftest import mock_requests

TOOLS = [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
GEMINI_TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="list_directory", parameters=types.Schema(type="OBJECT", properties={"path": types.Schema(type="STRING")})
        )
    ]
)
GEMINI_CONFIG = types.GenerateContentConfig(
    tools=[GEMINI_TOOL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
)
_KEEP = []


def session_id():
    return "pytest-" + uuid.uuid4().hex


TOOL_ONLY = json.dumps({"turns": [{"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}]})


def openai_loop(base_url, session, stream, turns=10, script=None):
    """Runs the agent loop; returns (tool calls executed, last answer text, finish reason)."""
    headers = {"x-loopguard-session": session, "x-test-session": session}
    if script:
        headers["x-mock-script"] = script
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0, default_headers=headers)
    messages = [{"role": "user", "content": "List the files, please."}]
    executed = 0
    for _ in range(turns):
        if stream:
            with client.chat.completions.stream(model="gpt-test", messages=messages, tools=TOOLS) as s:
                for _ in s:
                    pass
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
        choice = completion.choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))
        if not choice.message.tool_calls:
            return executed, choice.message.content or "", choice.finish_reason
        for call in choice.message.tool_calls:
            executed += 1
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"})
    return executed, None, None


def gemini_loop(base_url, session, stream, turns=10, script=None):
    headers = {"x-loopguard-session": session, "x-test-session": session}
    if script:
        headers["x-mock-script"] = script
    client = genai.Client(api_key="AIza-test", http_options=types.HttpOptions(base_url=base_url + "/gemini", headers=headers))
    _KEEP.append(client)
    contents = [types.Content(role="user", parts=[types.Part(text="List the files, please.")])]
    executed = 0
    for _ in range(turns):
        if stream:
            parts, finish = [], None
            for chunk in client.models.generate_content_stream(model="gemini-test", contents=contents, config=GEMINI_CONFIG):
                for cand in chunk.candidates or []:
                    parts.extend(cand.content.parts or [] if cand.content else [])
                    finish = cand.finish_reason or finish
        else:
            response = client.models.generate_content(model="gemini-test", contents=contents, config=GEMINI_CONFIG)
            parts = response.candidates[0].content.parts or []
            finish = response.candidates[0].finish_reason
        contents.append(types.Content(role="model", parts=parts))
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return executed, "".join(p.text or "" for p in parts), str(finish)
        responses = []
        for call in calls:
            executed += 1
            responses.append(types.Part(function_response=types.FunctionResponse(name=call.name, response={"output": "a.txt\nb.txt"})))
        contents.append(types.Content(role="user", parts=responses))
    return executed, None, None


def warned_requests_openai(mock, session):
    out = []
    for r in mock_requests(mock, session):
        messages = json.loads(r["body"])["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        out.append((len(results), bool(results) and "[loopguard]" in results[-1]["content"]))
    return out


def warned_requests_gemini(mock, session):
    out = []
    for r in mock_requests(mock, session):
        contents = json.loads(r["body"])["contents"]
        responses = [p["functionResponse"] for c in contents for p in c.get("parts", []) if "functionResponse" in p]
        out.append((len(responses), bool(responses) and "loopguard_warning" in responses[-1]["response"]))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_loop_is_warned_then_blocked(mock, loopguard, stream):
    session = session_id()
    executed, text, finish = openai_loop(loopguard.url, session, stream)
    assert executed == 4, "the 5th identical call must never reach the client"
    assert "[loopguard]" in text and "identical_call" in text
    assert finish == "stop"
    seen = warned_requests_openai(mock, session)
    # Results carried → warned: nothing before the 3rd identical result, the warning from then on.
    assert seen == [(0, False), (1, False), (2, False), (3, True), (4, True)], seen


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_gemini_loop_is_warned_then_blocked(mock, loopguard, stream):
    session = session_id()
    executed, text, finish = gemini_loop(loopguard.url, session, stream)
    assert executed == 4
    assert "[loopguard]" in text and "identical_call" in text
    assert "STOP" in finish
    seen = warned_requests_gemini(mock, session)
    assert seen == [(0, False), (1, False), (2, False), (3, True), (4, True)], seen


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_loop_with_abort_gets_http_400(mock, loopguard_abort, stream):
    """The looping call opens the response (no text before it), so the
    verdict comes while the headers are still held: a real HTTP 400."""
    session = session_id()
    with pytest.raises(openai.BadRequestError) as err:
        openai_loop(loopguard_abort.url, session, stream, script=TOOL_ONLY)
    assert err.value.status_code == 400
    assert err.value.code == "loop_detected"
    assert "identical_call" in str(err.value)
    assert len(mock_requests(mock, session)) == 5


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_gemini_loop_with_abort_gets_http_400(mock, loopguard_abort, stream):
    session = session_id()
    with pytest.raises(genai.errors.ClientError) as err:
        gemini_loop(loopguard_abort.url, session, stream, script=TOOL_ONLY)
    assert err.value.code == 400
    assert err.value.status == "FAILED_PRECONDITION"
    assert "loop_detected" in str(err.value)


def test_abort_after_text_was_streamed_is_an_in_stream_error(mock, loopguard_abort):
    """When answer text already went out (so did the headers), abort falls
    back to the dialect's in-stream error event, which the SDK raises."""
    session = session_id()
    with pytest.raises(openai.APIError) as err:
        openai_loop(loopguard_abort.url, session, stream=True)
    assert not isinstance(err.value, openai.APIStatusError)
    assert "loop_detected" in str(err.value)


def test_request_time_block_answers_without_calling_upstream(mock, loopguard):
    """A history that already shows 5 identical calls with identical results
    is answered by loopguard itself, in the mode asked for, with every
    terminal piece the SDK expects."""
    session = session_id()
    client = openai.OpenAI(base_url=loopguard.url + "/v1", api_key="sk-test", max_retries=0, default_headers={"x-loopguard-session": session, "x-test-session": session})
    messages = [{"role": "user", "content": "List the files."}]
    for i in range(5):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "list_directory", "arguments": '{"path":"."}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "a.txt"})
    chunks = list(
        client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[loopguard]")
    assert chunks[-1].usage is not None and not chunks[-1].choices
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert mock_requests(mock, session) == []
