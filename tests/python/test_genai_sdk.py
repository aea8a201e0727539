"""The official `google-genai` SDK gets the same results through loopguard
as talking to the upstream directly, streaming and not, function calls
included, through both Gemini routes."""

from google import genai
from google.genai import types

TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="list_directory",
            description="List a directory",
            parameters=types.Schema(
                type="OBJECT", properties={"path": types.Schema(type="STRING")}, required=["path"]
            ),
        )
    ]
)
CONFIG = types.GenerateContentConfig(
    tools=[TOOL], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
)


_CLIENTS = []


def client(base_url, headers=None, api_version=None):
    # Keep every client alive for the session: a genai.Client closes its
    # HTTP client when it is garbage-collected, even mid-call.
    options = types.HttpOptions(base_url=base_url, headers=headers or {}, api_version=api_version)
    c = genai.Client(api_key="AIza-test-key", http_options=options)
    _CLIENTS.append(c)
    return c


def summary(responses):
    text, calls, finish = [], [], None
    for response in responses:
        for candidate in response.candidates or []:
            if candidate.finish_reason:
                finish = str(candidate.finish_reason)
            for part in (candidate.content.parts if candidate.content else None) or []:
                if part.text and not part.thought:
                    text.append(part.text)
                if part.function_call:
                    calls.append((part.function_call.name, dict(part.function_call.args or {})))
    return {"text": "".join(text), "calls": calls, "finish": finish}


def bases(loopguard):
    # /gemini strips its prefix (the SDK's own paths pass unchanged); the root
    # base URL reaches the /v1beta route when the SDK uses that API version
    # (as Gemini CLI does).
    return [(loopguard.url + "/gemini", None), (loopguard.url, "v1beta")]


def test_generate_content_is_identical(mock, loopguard):
    expected = summary([client(mock.url).models.generate_content(model="gemini-test", contents="files?", config=CONFIG)])
    assert expected["calls"] == [("list_directory", {"path": "."})]
    for base, version in bases(loopguard):
        c = client(base, api_version=version)
        got = summary([c.models.generate_content(model="gemini-test", contents="files?", config=CONFIG)])
        assert got == expected, base


def test_generate_content_stream_is_identical(mock, loopguard):
    expected = summary(
        client(mock.url).models.generate_content_stream(model="gemini-test", contents="files?", config=CONFIG)
    )
    assert expected["calls"] == [("list_directory", {"path": "."})]
    for base, version in bases(loopguard):
        c = client(base, api_version=version)
        got = summary(c.models.generate_content_stream(model="gemini-test", contents="files?", config=CONFIG))
        assert got == expected, base


def test_sdk_at_the_root_on_the_openai_route_is_told_which_base_url_to_use(loopguard):
    """The SDK's default paths (/v1/models/...) at loopguard's root land on
    the OpenAI route: loopguard answers 400 naming the Gemini route instead
    of sending a Gemini request to OpenAI."""
    c = client(loopguard.url, api_version="v1")
    try:
        c.models.generate_content(model="gemini-test", contents="hi")
    except genai.errors.ClientError as e:
        assert e.code == 400
        assert "gemini route" in str(e)
    else:
        raise AssertionError("expected HTTP 400")


def test_recorded_gemini_streams_read_the_same_through_loopguard(mock, loopguard):
    for fixture in ["gemini/function-call.sse", "gemini/thinking-gemini3.sse", "gemini/text.sse"]:
        headers = {"x-mock-fixture": fixture}
        expected = summary(
            client(mock.url, headers).models.generate_content_stream(model="gemini-test", contents="hi")
        )
        got = summary(
            client(loopguard.url + "/gemini", headers).models.generate_content_stream(model="gemini-test", contents="hi")
        )
        assert got == expected, fixture
        assert expected["text"] or expected["calls"], fixture
