"""Tool calls in chat history: JSON-text arguments embedded as given, mappings as json.dumps."""

import json
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text import DEFAULT_CHAT_TEMPLATE, ChatTemplateError, ToolCallSyntax
from riftco.text import chat as chat_module
from riftco.text.chat import MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_DEPTH
from riftco.text.grammar import parse_tool_calls

SYNTAX = ToolCallSyntax()


def render(messages):
    return "".join(text for text, _, _ in DEFAULT_CHAT_TEMPLATE.render(messages, False))


def assistant(*calls, content=None):
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": a}}
            for k, (n, a) in enumerate(calls)
        ],
    }


def written(message):
    """The assistant content the message renders as (between its prefix and suffix)."""
    text = render([message])
    assert text.startswith("<|assistant|>") and text.endswith("<|end|>")
    return text[len("<|assistant|>") : -len("<|end|>")]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=16,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


@settings(max_examples=200, deadline=None)
@given(name=st.text(min_size=1, max_size=10), arguments=objects)
def test_mapping_arguments_render_as_the_whole_call_through_json_dumps(name, arguments):
    # What riftco wrote before JSON text went in verbatim, byte for byte.
    before = SYNTAX.start + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    assert SYNTAX.render_call(name, arguments) == before + SYNTAX.end
    assert written(assistant((name, arguments))) == before + SYNTAX.end


@settings(max_examples=200, deadline=None)
@given(
    arguments=objects,
    ensure_ascii=st.booleans(),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
    indent=st.sampled_from([None, 0, 2, "\t"]),
)
def test_json_text_arguments_are_embedded_as_given(arguments, ensure_ascii, separators, indent):
    text = json.dumps(arguments, ensure_ascii=ensure_ascii, separators=separators, indent=indent)
    expected = '<tool_call>{"name": "f", "arguments": ' + text + "}</tool_call>"
    assert SYNTAX.render_call("f", text) == expected
    assert written(assistant(("f", text))) == expected
    # What the model writes still reads back as the same object.
    parsed = parse_tool_calls(expected).tool_calls
    assert [(c["name"], json.loads(c["arguments"])) for c in parsed] == [("f", arguments)]


def test_several_calls_content_and_names():
    text = '{"city":"Z\\u00fcrich" , "days":3}'
    message = assistant(("get_weather", text), ("名前", {"é": [1.5, None]}), content="Checking.")
    assert written(message) == (
        "Checking.\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city":"Z\\u00fcrich" , "days":3}}'
        "</tool_call>\n"
        '<tool_call>{"name": "名前", "arguments": {"é": [1.5, null]}}</tool_call>'
    )
    # A call the parser gives back renders as it was written.
    reply = parse_tool_calls(SYNTAX.render_call("g", {"a": "</tool_call>"}))
    again = assistant(*[(c["name"], c["arguments"]) for c in reply.tool_calls])
    assert written(again) == SYNTAX.render_call("g", {"a": "</tool_call>"})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "JSON text"),
        ("[1, 2]", "a JSON object; found JSON text of a list"),
        ('"x"', "a JSON object"),
        ("null", "a JSON object"),
        ('{"a": 1', "JSON text"),
        ('{"a": 1} {"b": 2}', "JSON text"),
        ('{"a": NaN}', "JSON text"),
        ('{"a": 1e999}', "JSON text"),
        ('{"a": 1, "a": 2}', "JSON text"),
        ("{'a': 1}", "JSON text"),
        ('{"a": "\x00"}', "JSON text"),
        ('{"a": ' + "7" * 4301 + "}", "JSON text"),
        ('{"a": ' + "[" * MAX_TOOL_CALL_DEPTH + "]" * MAX_TOOL_CALL_DEPTH + "}", "JSON text"),
        ("[" * 400_000 + "]" * 400_000, "JSON text"),
        ('{"a": ' * 150_000, "JSON text"),
        ('{"a": "' + "x" * MAX_TOOL_CALL_CHARS + '"}', f"at most {MAX_TOOL_CALL_CHARS} characters"),
    ],
    ids=lambda v: v[:24] if isinstance(v, str) else None,
)
def test_bad_json_text_is_refused_with_where_and_what(text, match):
    with pytest.raises(ChatTemplateError, match=r"message 0: tool_calls\[1\]: expected") as info:
        render([assistant(("ok", {}), ("f", text))])
    assert match in str(info.value)
    with pytest.raises(ChatTemplateError, match=match):
        SYNTAX.render_call("f", text)


def test_json_text_at_the_limits_is_accepted():
    deepest = '{"a": ' + "[" * (MAX_TOOL_CALL_DEPTH - 1) + "]" * (MAX_TOOL_CALL_DEPTH - 1) + "}"
    longest = '{"a": "' + "x" * (MAX_TOOL_CALL_CHARS - 9) + '"}'
    digits = '{"a": -' + "9" * 4300 + "}"
    for text in (deepest, longest, digits):
        assert written(assistant(("f", text))) == SYNTAX.render_call("f", text)
        assert text in SYNTAX.render_call("f", text)


def test_recursion_in_the_reader_is_a_chat_template_error(monkeypatch):
    def too_deep(*args, **kwargs):
        raise RecursionError

    monkeypatch.setattr(chat_module, "loads_strict", too_deep)
    with pytest.raises(ChatTemplateError, match="nesting too deep"):
        SYNTAX.render_call("f", "{}")


def _deep_mapping(depth):
    root = node = {}
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


def test_mappings_that_are_not_json_are_refused():
    circular = {}
    circular["self"] = circular
    for arguments, match in [
        ({"s": {1, 2}}, "mapping of JSON values"),
        ({"b": b"bytes"}, "mapping of JSON values"),
        (circular, "mapping of JSON values"),
        (_deep_mapping(200_000), "nesting too deep"),
        ([1, 2], "a JSON object; found list"),
        (None, "a JSON object; found NoneType"),
        (3, "a JSON object; found int"),
    ]:
        with pytest.raises(ChatTemplateError, match=match):
            render([assistant(("f", arguments))])
        with pytest.raises(ChatTemplateError, match=match):
            SYNTAX.render_call("f", arguments)


def test_any_mapping_renders_as_its_dict():
    frozen = MappingProxyType({"z": 1, "a": [True]})
    assert SYNTAX.render_call("f", frozen) == SYNTAX.render_call("f", {"z": 1, "a": [True]})
