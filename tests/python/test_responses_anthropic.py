"""The OpenAI Responses and Anthropic Messages dialects through their
official SDKs (`client.responses`, `anthropic.Anthropic().messages`), the
same agent loop as test_loops.py: warn from the request carrying the 3rd
identical result, the 5th identical call never reaches the client (block),
HTTP 400 instead with `critical = "abort"`. The SDKs' own stream
accumulators (`responses.stream()`, `messages.stream()`) consume the
blocked streams and end with loopguard's explanation as the final text."""

import json
import uuid

import anthropic
import openai
import pytest

from conftest import mock_requests

RESPONSES_TOOLS = [
    {"type": "function", "name": "list_directory", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
]
ANTHROPIC_TOOLS = [
    {"name": "list_directory", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
]
TOOL_ONLY = json.dumps({"turns": [{"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]}]})


def session_id():
    return "pytest-" + uuid.uuid4().hex


def responses_client(base_url, session, script=None):
    headers = {"x-loopguard-session": session, "x-test-session": session} if session else {}
    if script:
        headers["x-mock-script"] = script
    return openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0, default_headers=headers)


def responses_loop(base_url, session, stream, turns=10, script=None):
    """Runs the agent loop on client.responses; returns (calls executed, final text)."""
    client = responses_client(base_url, session, script)
    items = [{"role": "user", "content": "List the files, please."}]
    executed = 0
    for _ in range(turns):
        if stream:
            with client.responses.stream(model="gpt-test", input=items, tools=RESPONSES_TOOLS, store=False) as s:
                for _ in s:
                    pass
                response = s.get_final_response()
        else:
            response = client.responses.create(model="gpt-test", input=items, tools=RESPONSES_TOOLS, store=False)
        calls = [o for o in response.output if o.type == "function_call"]
        items.extend(o.model_dump(exclude_none=True) for o in response.output)
        if not calls:
            # The explanation is an assistant message item of its own, the last one.
            messages = [o for o in response.output if o.type == "message"]
            return executed, messages[-1].content[-1].text
        for call in calls:
            executed += 1
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt\nb.txt"})
    return executed, None


def anthropic_client(base_url, session, script=None):
    headers = {"x-loopguard-session": session, "x-test-session": session}
    if script:
        headers["x-mock-script"] = script
    return anthropic.Anthropic(base_url=base_url + "/anthropic", api_key="sk-ant-test", max_retries=0, default_headers=headers)


def anthropic_loop(base_url, session, stream, turns=10, script=None):
    """Runs the agent loop on client.messages; returns (calls executed, final text, stop reason)."""
    client = anthropic_client(base_url, session, script)
    messages = [{"role": "user", "content": "List the files, please."}]
    executed = 0
    for _ in range(turns):
        if stream:
            with client.messages.stream(model="claude-test", max_tokens=1024, messages=messages, tools=ANTHROPIC_TOOLS) as s:
                for _ in s:
                    pass
                message = s.get_final_message()
        else:
            message = client.messages.create(model="claude-test", max_tokens=1024, messages=messages, tools=ANTHROPIC_TOOLS)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return executed, message.content[-1].text, message.stop_reason
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, "content": "a.txt\nb.txt"} for c in calls]}
        )
        executed += len(calls)
    return executed, None, None


def warned_responses(mock, session):
    out = []
    for r in mock_requests(mock, session):
        items = json.loads(r["body"])["input"]
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        out.append((len(outputs), bool(outputs) and "[loopguard]" in outputs[-1]["output"]))
    return out


def warned_anthropic(mock, session):
    out = []
    for r in mock_requests(mock, session):
        last = json.loads(r["body"])["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        results = sum(1 for m in json.loads(r["body"])["messages"] if isinstance(m["content"], list)
                      for b in m["content"] if b.get("type") == "tool_result")
        warned = any(b.get("type") == "text" and b["text"].startswith("[loopguard]") for b in blocks)
        out.append((results, warned))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_responses_loop_is_warned_then_blocked(mock, loopguard, stream):
    session = session_id()
    executed, text = responses_loop(loopguard.url, session, stream)
    assert executed == 4, "the 5th identical call must never reach the client"
    assert text.startswith("[loopguard]") and "identical_call" in text, text
    assert warned_responses(mock, session) == [(0, False), (1, False), (2, False), (3, True), (4, True)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_loop_is_warned_then_blocked(mock, loopguard, stream):
    session = session_id()
    executed, text, stop = anthropic_loop(loopguard.url, session, stream)
    assert executed == 4, "the 5th identical call must never reach the client"
    assert text.startswith("[loopguard]") and "identical_call" in text, text
    assert stop == "end_turn"
    assert warned_anthropic(mock, session) == [(0, False), (1, False), (2, False), (3, True), (4, True)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_responses_loop_with_abort_gets_http_400(mock, loopguard_abort, stream):
    session = session_id()
    with pytest.raises(openai.BadRequestError) as err:
        responses_loop(loopguard_abort.url, session, stream, script=TOOL_ONLY)
    assert err.value.code == "loop_detected"
    assert len(mock_requests(mock, session)) == 5


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_loop_with_abort_gets_http_400(mock, loopguard_abort, stream):
    session = session_id()
    with pytest.raises(anthropic.BadRequestError) as err:
        anthropic_loop(loopguard_abort.url, session, stream, script=TOOL_ONLY)
    assert err.value.status_code == 400
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "loop_detected" in err.value.body["error"]["message"]


def test_anthropic_abort_after_text_is_an_in_stream_error(mock, loopguard_abort):
    """Text went out first (so did the headers): the in-stream `error`
    event, which the anthropic SDK raises."""
    with pytest.raises(anthropic.APIStatusError) as err:
        anthropic_loop(loopguard_abort.url, session_id(), stream=True)
    assert "loop_detected" in str(err.value)


def test_responses_abort_after_text_is_an_error_event(mock, loopguard_abort):
    """Text went out first: the stream ends with the Responses `error` event
    (code loop_detected) and `response.failed`, no `response.completed`."""
    client = responses_client(loopguard_abort.url, session_id())
    items = [{"role": "user", "content": "List the files, please."}]
    for n in range(6):
        events = list(client.responses.create(model="gpt-test", input=items, tools=RESPONSES_TOOLS, store=False, stream=True))
        kinds = [e.type for e in events]
        if "error" in kinds:
            error = events[kinds.index("error")]
            assert error.code == "loop_detected", error
            assert kinds[-1] == "response.failed" and events[-1].response.error.code == "loop_detected"
            assert "response.completed" not in kinds
            assert n == 4
            return
        done = events[-1].response
        items.extend(o.model_dump(exclude_none=True) for o in done.output)
        call = [o for o in done.output if o.type == "function_call"][0]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
    pytest.fail("no error event")


def test_stateful_responses_chain_is_aborted_not_blocked(mock, loopguard):
    """Requests chained with previous_response_id carry only the new call
    output; loopguard finds the session (no session header) and the call
    from the response id, and aborts at critical: blocking would leave the
    server's stored call without its output."""
    client = responses_client(loopguard.url, None, script=TOOL_ONLY)
    response = client.responses.create(model="gpt-test", input="List the files, please.", tools=RESPONSES_TOOLS)
    executed = 0
    with pytest.raises(openai.BadRequestError) as err:
        for _ in range(8):
            call = [o for o in response.output if o.type == "function_call"][0]
            executed += 1
            response = client.responses.create(
                model="gpt-test",
                previous_response_id=response.id,
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"}],
                tools=RESPONSES_TOOLS,
            )
    assert err.value.code == "loop_detected"
    assert executed == 4, "the response carrying the 5th identical call becomes HTTP 400"


def test_request_time_blocks_are_complete_streams(mock, loopguard):
    """A history that already shows 5 identical cycles is answered by
    loopguard itself: a complete response.created … response.completed
    sequence / message_start … message_stop, consumed by the SDK helpers."""
    session = session_id()
    items = [{"role": "user", "content": "List the files."}]
    messages = [{"role": "user", "content": "List the files."}]
    for i in range(5):
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "list_directory", "arguments": '{"path":"."}'})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "a.txt"})
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "list_directory", "input": {"path": "."}}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "a.txt"}]})
    with responses_client(loopguard.url, session).responses.stream(model="gpt-test", input=items, tools=RESPONSES_TOOLS) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text.startswith("[loopguard]")
    with anthropic_client(loopguard.url, session + "-a").messages.stream(
        model="claude-test", max_tokens=100, messages=messages, tools=ANTHROPIC_TOOLS
    ) as s:
        text = s.get_final_text()
        final = s.get_final_message()
    assert text.startswith("[loopguard]")
    assert final.stop_reason == "end_turn"
    assert mock_requests(mock, session) == [] and mock_requests(mock, session + "-a") == []


def stateful_run_steps(client):
    """One stateful run (no session header): the first request, then each
    call's output chained with previous_response_id. A generator that yields
    after each request; it returns the number of calls executed when loopguard
    answers HTTP 400 with loop_detected."""
    response = client.responses.create(model="gpt-test", input="List the files, please.", tools=RESPONSES_TOOLS)
    executed = 0
    yield
    for _ in range(8):
        call = [o for o in response.output if o.type == "function_call"][0]
        executed += 1
        try:
            response = client.responses.create(
                model="gpt-test",
                previous_response_id=response.id,
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"}],
                tools=RESPONSES_TOOLS,
            )
        except openai.BadRequestError as err:
            assert err.code == "loop_detected"
            return executed
        yield
    raise AssertionError("the run was never stopped")


def run_to_end(steps):
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def test_a_second_stateful_run_starts_fresh(mock, loopguard):
    """Issue #12 point 11: the same script run twice, one run after the other
    (same first request, no session header): the second run's first request is
    answered, and the second run is stopped at its own 5th identical call."""
    client = responses_client(loopguard.url, None, script=TOOL_ONLY)
    assert run_to_end(stateful_run_steps(client)) == 4
    assert run_to_end(stateful_run_steps(client)) == 4


def test_stateful_runs_at_once_keep_their_own_state(mock, loopguard):
    """A pass@k harness: three stateful runs of the same task, interleaved
    request by request, each keep their own chain: each is stopped at its own
    5th identical call, not earlier from the others' calls."""
    client = responses_client(loopguard.url, None, script=TOOL_ONLY)
    runs = [stateful_run_steps(client) for _ in range(3)]
    executed = [None] * 3
    while any(e is None for e in executed):
        for i, run in enumerate(runs):
            if executed[i] is None:
                try:
                    next(run)
                except StopIteration as done:
                    executed[i] = done.value
    assert executed == [4, 4, 4]


def orphan_run(client):
    """A stateful run whose first request chains to a response loopguard
    never saw (made before it was in the path, or whose record was lost),
    carrying only that call's output; then each call's output chained to
    the previous response. The number of calls executed when loopguard
    answers HTTP 400 with loop_detected."""
    run = uuid.uuid4().hex[:8]
    previous = f"resp_unknown_{run}"
    outputs = [{"type": "function_call_output", "call_id": f"call_{run}", "output": "a.txt"}]
    executed = 0
    for _ in range(10):
        try:
            response = client.responses.create(
                model="gpt-test", previous_response_id=previous, input=outputs, tools=RESPONSES_TOOLS
            )
        except openai.BadRequestError as err:
            assert err.code == "loop_detected"
            return executed
        calls = [o for o in response.output if o.type == "function_call"]
        executed += len(calls)
        previous = response.id
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "a.txt"} for c in calls]
    raise AssertionError("the run was never stopped")


def test_runs_chaining_to_unknown_responses_keep_their_own_state(mock, loopguard):
    """Three runs one after the other, each starting from a different
    response id loopguard does not know, same credential and tools: each is
    a session of its own, stopped at its own 5th identical call. (Their
    first requests have no system text, user message or call to tell them
    apart by; all three shared one session before, and the third run was
    stopped at its first request.)"""
    client = responses_client(loopguard.url, None, script=TOOL_ONLY)
    executed = [orphan_run(client) for _ in range(3)]
    assert executed == [4, 4, 4], executed
