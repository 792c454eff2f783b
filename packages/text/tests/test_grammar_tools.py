import json
import random

import jsonschema
import pytest
from grammar_walk import walk

from riftco.text import (
    BpeTokenizer,
    ByteTokenizer,
    ChatTemplate,
    ChatTemplateError,
    RoleFormat,
    ToolCallSyntax,
    tokenizer_from_state,
)
from riftco.text.grammar import (
    SchemaError,
    TokenNotAllowed,
    ToolCallError,
    parse_tool_calls,
    tool_grammar,
    tools_prompt,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 12},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "now"}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {"get_weather": WEATHER["function"]["parameters"], "now": {"const": {}}}


@pytest.fixture(scope="module")
def tok():
    corpus = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n' * 20
    return BpeTokenizer.train(corpus + "plain words here. ", vocab_size=340)


def encode_feed(state, tok, text):
    for token in tok.encode(text):
        state.advance(token)
    return state


def test_required_calls_parse_and_validate(tok):
    grammar = tool_grammar(TOOLS, tok, tool_choice="required")
    rng = random.Random(5)
    stop = tok.stop_ids(chat=True)
    for _ in range(15):
        text = walk(grammar.start(), rng, vocab=tok.vocabulary_bytes(), eos=stop).decode()
        reply = parse_tool_calls(text)
        assert reply.content == "" and 1 <= len(reply.tool_calls) <= 16, text
        for call in reply.tool_calls:
            jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_named_function_and_single_call(tok):
    choice = {"type": "function", "function": {"name": "now"}}
    grammar = tool_grammar(TOOLS, tok, tool_choice=choice, parallel_tool_calls=False)
    state = encode_feed(grammar.start(), tok, '<tool_call>{"name": "now", "arguments": {}}')
    assert not state.is_accepting()
    encode_feed(state, tok, "</tool_call>")
    assert state.is_accepting()
    assert not state.allows(tok.encode("\n")[0])  # one call only
    other = grammar.start()
    with pytest.raises(TokenNotAllowed):
        encode_feed(other, tok, '<tool_call>{"name": "get_weather"')


def test_auto_is_free_text_until_the_marker(tok):
    grammar = tool_grammar(TOOLS, tok, tool_choice="auto")
    state = encode_feed(grammar.start(), tok, "plain words here. ")
    assert state.is_accepting()
    encode_feed(state, tok, '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", ')
    assert not state.is_accepting()
    with pytest.raises(TokenNotAllowed):
        encode_feed(state.copy(), tok, '"bad": 1')
    encode_feed(state, tok, '"unit": "c"}}</tool_call> done')
    assert state.is_accepting()
    assert tool_grammar(TOOLS, tok, tool_choice="none") is None


def test_parse_round_trip():
    syntax = ToolCallSyntax()
    calls = [("get_weather", {"city": "Zürich", "unit": "c"}), ("now", {})]
    text = "Let me check.\n" + syntax.render_calls(calls)
    reply = parse_tool_calls(text, syntax)
    assert reply.content == "Let me check."
    assert [(c["name"], json.loads(c["arguments"])) for c in reply.tool_calls] == calls
    # a marker inside the arguments does not end the call early
    tricky = syntax.render_call("f", {"s": "</tool_call><tool_call>"})
    assert json.loads(parse_tool_calls(tricky).tool_calls[0]["arguments"]) == {
        "s": "</tool_call><tool_call>"
    }
    broken = 'hi <tool_call>{"name": "f", "arguments": 3}</tool_call>'
    assert parse_tool_calls(broken).content == broken
    assert parse_tool_calls(broken).tool_calls == []
    assert parse_tool_calls("<tool_call>{").content == "<tool_call>{"


def test_template_renders_tool_history():
    tok = BpeTokenizer.train("weather in Oslo " * 10, vocab_size=280)
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
    ]
    chat = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert chat.text == (
        "<|user|>Weather?<|end|><|assistant|>"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><|end|>'
        "<|user|><tool_response>12 C</tool_response><|end|><|assistant|>"
    )
    # the call is assistant content: post-training learns to write it
    masked = [i for i, m in zip(chat.ids, chat.assistant_mask, strict=True) if m]
    assert tok.decode(masked).startswith("<tool_call>")
    bad = [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]
    with pytest.raises(ChatTemplateError, match="JSON text"):
        tok.apply_chat_template(bad)
    assert tokenizer_from_state(tok.to_state()).chat_template.tool_call == ToolCallSyntax()


def test_templates_without_syntax_refuse():
    plain = ChatTemplate(
        {"user": RoleFormat("<|user|>", "<|end|>"), "assistant": RoleFormat("<|assistant|>", "")},
        "<|assistant|>",
    )
    assert "tool_call" not in plain.to_state()
    tok = ByteTokenizer.train("abc", chat_template=plain)
    with pytest.raises(ToolCallError, match="no tool-call syntax"):
        tool_grammar(TOOLS, tok)
    call = {"function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(ChatTemplateError, match="no tool-call syntax"):
        tok.apply_chat_template([{"role": "assistant", "content": "", "tool_calls": [call]}])
    with pytest.raises(ChatTemplateError, match="tool_role among the roles"):
        ChatTemplate(plain.roles, "<|assistant|>", tool_call=ToolCallSyntax())
    # a role named tool implies the default syntax unless the template says otherwise
    roles = {**plain.roles, "tool": RoleFormat("<|user|>", "<|end|>")}
    assert ChatTemplate(roles, "<|assistant|>").tool_call == ToolCallSyntax()
    silent = ChatTemplate(roles, "<|assistant|>", tool_call=None)
    assert silent.to_state()["tool_call"] is None
    assert ChatTemplate.from_state(silent.to_state()) == silent
    custom = ChatTemplate(roles, "<|assistant|>", tool_call=ToolCallSyntax(start="<call>"))
    assert ChatTemplate.from_state(custom.to_state()).tool_call.start == "<call>"


def test_bad_tools_refused(tok):
    for tools, match in [
        ([], "non-empty"),
        ([{"type": "retrieval"}], "function"),
        ([{"type": "function", "function": {"name": "a b"}}], "name"),
        ([TIME, TIME], "twice"),
    ]:
        with pytest.raises(ToolCallError, match=match):
            tool_grammar(tools, tok)
    with pytest.raises(ToolCallError, match="not among the tools"):
        tool_grammar(TOOLS, tok, tool_choice={"type": "function", "function": {"name": "x"}})
    with pytest.raises(ToolCallError, match="tool_choice"):
        tool_grammar(TOOLS, tok, tool_choice="sometimes")
    hostile = {"type": "function", "function": {"name": "f", "parameters": {"multipleOf": 2}}}
    with pytest.raises(SchemaError, match=r"tools\[0\]") as info:
        tool_grammar([hostile], tok)
    assert info.value.keyword == "multipleOf"


def test_tools_prompt_lists_every_tool():
    text = tools_prompt(TOOLS)
    assert "get_weather" in text and "now" in text and "<tool_call>" in text
