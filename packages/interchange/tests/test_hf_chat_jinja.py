"""The chat template's Jinja export renders what riftco-text renders, tool calls included.

The Jinja runs in jinja2 set up as transformers' ``apply_chat_template`` sets it up
(``ImmutableSandboxedEnvironment`` with ``trim_blocks``, ``lstrip_blocks``, loop
controls, ``raise_exception`` and a ``tojson`` that is ``json.dumps(..., ensure_ascii=False)``
without sorting keys); where transformers is installed, it renders through
``apply_chat_template`` itself too.
"""

from __future__ import annotations

import json

import jinja2
import jinja2.ext
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from riftco.interchange.hf_tokenizer import (
    chat_template_from_jinja,
    jinja_chat_template,
    read_tokenizer_files,
    write_tokenizer_files,
)
from riftco.text import (
    DEFAULT_CHAT_TEMPLATE,
    ByteTokenizer,
    ChatTemplate,
    ChatTemplateError,
    RoleFormat,
    ToolCallSyntax,
)

CUSTOM = ChatTemplate(
    roles={
        "user": RoleFormat("<u>", "</u>\n"),
        "bot": RoleFormat("<b>", "</b>\n"),
        "observation": RoleFormat("<o>", "</o>\n"),
    },
    generation_prompt="<b>",
    assistant_role="bot",
    tool_call=ToolCallSyntax(
        start="[CALL 🔧]",
        end="[/CALL]",
        separator=" ;\n",
        tool_role="observation",
        result_start="«",
        result_end="»\\n",
    ),
)
NO_SYNTAX = ChatTemplate(
    roles={
        "user": RoleFormat("U:", "\n"),
        "assistant": RoleFormat("A:", "\n"),
        "tool": RoleFormat("T:", "\n"),
    },
    generation_prompt="A:",
    tool_call=None,
)
TEMPLATES = [DEFAULT_CHAT_TEMPLATE, CUSTOM, NO_SYNTAX]


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


ENV = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
)
ENV.filters["tojson"] = _tojson
ENV.globals["raise_exception"] = _raise


def jinja_render(template, messages, add_generation_prompt=False):
    compiled = ENV.from_string(jinja_chat_template(template))
    return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt)


def riftco_render(template, messages, add_generation_prompt=False):
    return "".join(text for text, _, _ in template.render(messages, add_generation_prompt))


def call(name, arguments, kind="function"):
    return {"type": kind, "function": {"name": name, "arguments": arguments}}


def conversation(template, calls, content=None):
    assistant, tool = template.assistant_role, template.tool_call.tool_role
    return [
        {"role": "user", "content": "What's the weather in Zürich, and 2+2?"},
        {"role": assistant, "content": content, "tool_calls": calls},
        {"role": tool, "content": '{"temp": 21.5, "unit": "°C"}'},
        {"role": tool, "content": "4"},
        {"role": assistant, "content": "It is 21.5 °C; 2+2 is 4. 🙂"},
    ]


# JSON text, in the shapes clients send it: every one is embedded as given.
ARGUMENT_TEXTS = [
    '{"city":"Zürich","days":3}',
    '{ "city" : "Z\\u00fcrich" ,\n\t"days" : 3 }',
    '{"emoji": "\\ud83d\\ude42", "lone": "\\ud83d x \\ude42", "pair\\ud83dkey": "\\ud83d\\u0041"}',
    '{"esc": "\\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0001 \\u001F \\u007f \\u2028 <>&\'"}',
    '{"n": [0, -0, 10, -12, 1.50, 1e5, 1E-7, -2.5e+3, 0.1, 123456789012345678901]}',
    '{"w": [true, false, null], "e": {}, "a": [], "x": [{}, [[]]]}',
    '{"deep": {"a": {"b": [1, {"c": "d"}]}}, "order": {"z": 1, "a": 2}}',
    "{}",
    '  {"pad": 1}  \n',
    '{"k": 7, "' + "é" * 300 + '": "' + "x" * 5000 + '"}',
    '{"tag": "</tool_call><tool_call>", "hash": "#} {#", "jinja": "{{ x }} {% if %}"}',
]


def embedded(template, name, text):
    syntax = template.tool_call
    return (
        syntax.start + '{"name": ' + json.dumps(name) + ', "arguments": ' + text + "}" + syntax.end
    )


@pytest.mark.parametrize("template", [DEFAULT_CHAT_TEMPLATE, CUSTOM], ids=["default", "custom"])
@pytest.mark.parametrize("text", ARGUMENT_TEXTS)
def test_string_arguments_render_verbatim_in_both(template, text):
    calls = [call("get_weather", text), call("add", {"a": 2, "b": 2})]
    messages = conversation(template, calls)
    rendered = riftco_render(template, messages, True)
    assert jinja_render(template, messages, True) == rendered
    assert embedded(template, "get_weather", text) + template.tool_call.separator in rendered


@pytest.mark.parametrize("template", [DEFAULT_CHAT_TEMPLATE, CUSTOM], ids=["default", "custom"])
@pytest.mark.parametrize("content", [None, "", "Let me check. ", "two\nlines"])
def test_several_calls_with_mapping_arguments_and_content(template, content):
    calls = [
        call("get_weather", {"city": "Zürich", "when": ["today", "tomorrow"], "z": 1, "a": 0.5}),
        call("noop", {}),
        call("名前", {"<tag>": "&amp; 'x'", "nested": {"k": [None, True, 1e-9, 10**30]}}),
        call("echo", json.dumps({"back": "to text"})),
    ]
    messages = conversation(template, calls, content)
    if content is None:
        del messages[1]["content"]  # a call without content at all renders the same
        assert jinja_render(template, messages) == riftco_render(template, messages)
        messages[1]["content"] = None
    assert jinja_render(template, messages, True) == riftco_render(template, messages, True)
    assert riftco_render(template, messages).count(template.tool_call.start) == 4


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**25), 10**25)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    arguments=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    ensure_ascii=st.booleans(),
    spacing=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
    indent=st.sampled_from([None, 0, 2, "\t"]),
    as_text=st.booleans(),
)
def test_random_arguments_render_the_same(arguments, ensure_ascii, spacing, indent, as_text):
    value = (
        json.dumps(arguments, ensure_ascii=ensure_ascii, separators=spacing, indent=indent)
        if as_text
        else arguments
    )
    messages = conversation(DEFAULT_CHAT_TEMPLATE, [call("f", value), call("g", {"x": 1})])
    rendered = riftco_render(DEFAULT_CHAT_TEMPLATE, messages)
    assert jinja_render(DEFAULT_CHAT_TEMPLATE, messages) == rendered
    # A mapping renders as the whole call went through json.dumps; JSON text as given.
    whole = json.dumps({"name": "f", "arguments": arguments}, ensure_ascii=False)
    first = (
        embedded(DEFAULT_CHAT_TEMPLATE, "f", value)
        if as_text
        else f"<tool_call>{whole}</tool_call>"
    )
    assert first + "\n" + '<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>' in rendered


REFUSED_TEXTS = [
    "",
    "   ",
    "[1]",
    "3",
    '"text"',
    "null",
    "{",
    '{"a": 1,}',
    '{"a": [1,]}',
    '{"a" 1}',
    '{"a": 01}',
    '{"a": 1.}',
    '{"a": .5}',
    '{"a": -}',
    '{"a": 1e}',
    '{"a": +1}',
    '{"a": tru}',
    '{"a": nulll}',
    '{"a": NaN}',
    '{"a": -Infinity}',
    '{"a": 1e400}',
    '{"a": 1, "a": 2}',
    '{"a": "\x01"}',
    '{"a": "\\x"}',
    '{"a": "\\u12g4"}',
    '{"a": "open}',
    '{"a": 1} x',
    '{"a": 1}}',
    '{"a": 1}{"b": 2}',
    '{"a": [1}',
    "{'a': 1}",
    '{"a": ' + "1" * 4301 + "}",
    '{"a": ' + "[" * 512 + "]" * 512 + "}",
    '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "{" * 300_000,
    '{"a": "' + "x" * (1 << 20) + '"}',
]


@pytest.mark.parametrize("text", REFUSED_TEXTS, ids=range(len(REFUSED_TEXTS)))
def test_arguments_that_are_not_one_json_object_are_refused_by_riftco(text):
    messages = conversation(DEFAULT_CHAT_TEMPLATE, [call("f", text)])
    with pytest.raises(ChatTemplateError, match=r"tool_calls\[0\]: expected"):
        riftco_render(DEFAULT_CHAT_TEMPLATE, messages)
    with pytest.raises(ChatTemplateError, match="expected"):
        DEFAULT_CHAT_TEMPLATE.tool_call.render_call("f", text)


def test_the_jinja_embeds_json_text_as_given_without_checking_it():
    # riftco checks the text; the Jinja writes whatever string it is handed.
    for text in ("{", '{"a": NaN}', '{"a": 1, "a": 2}', "[1]"):
        messages = conversation(DEFAULT_CHAT_TEMPLATE, [call("f", text)])
        assert embedded(DEFAULT_CHAT_TEMPLATE, "f", text) in jinja_render(
            DEFAULT_CHAT_TEMPLATE, messages
        )


@pytest.mark.parametrize(
    "text",
    [
        '{"a": -' + "9" * 4300 + "}",
        '{"a": ' + "[" * 511 + "]" * 511 + "}",
        '{"x": [1e16, 123.456e-300, 5e-324, 1.7976931348623157e308, -0.0, 1.50]}',
        '{"a": "' + "x" * ((1 << 20) - 9) + '"}',
    ],
    ids=["longest-integer", "deepest", "float-spellings", "longest"],
)
def test_json_text_at_the_limits_renders_verbatim_in_both(text):
    messages = conversation(DEFAULT_CHAT_TEMPLATE, [call("f", text)])
    rendered = riftco_render(DEFAULT_CHAT_TEMPLATE, messages)
    assert jinja_render(DEFAULT_CHAT_TEMPLATE, messages) == rendered
    assert embedded(DEFAULT_CHAT_TEMPLATE, "f", text) in rendered


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi", "tool_calls": [call("f", {})]}],
        [{"role": "assistant", "content": None, "tool_calls": []}],
        [{"role": "assistant", "content": None, "tool_calls": "f()"}],
        [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}],
        [{"role": "assistant", "content": None, "tool_calls": [call("", {})]}],
        [{"role": "assistant", "content": None, "tool_calls": [call(3, {})]}],
        [{"role": "assistant", "content": None, "tool_calls": [call("f", [1, 2])]}],
        [{"role": "assistant", "content": None, "tool_calls": [call("f", None)]}],
        [{"role": "assistant", "content": 5, "tool_calls": [call("f", {})]}],
        [{"role": "tool", "content": None}],
        [{"role": "robot", "content": "hi"}],
    ],
)
def test_malformed_messages_are_refused_by_both(messages):
    with pytest.raises(ChatTemplateError):
        riftco_render(DEFAULT_CHAT_TEMPLATE, messages)
    with pytest.raises((jinja2.exceptions.TemplateError, TypeError)):
        jinja_render(DEFAULT_CHAT_TEMPLATE, messages)


def test_a_template_without_a_syntax_refuses_tool_calls_in_jinja_too():
    messages = [{"role": "assistant", "content": "x", "tool_calls": [call("f", {})]}]
    with pytest.raises(ChatTemplateError, match="no tool-call syntax"):
        riftco_render(NO_SYNTAX, messages)
    with pytest.raises(jinja2.exceptions.TemplateError, match="no tool-call syntax"):
        jinja_render(NO_SYNTAX, messages)
    # Its tool role is a role like any other: no result markers.
    plain = [{"role": "tool", "content": "4"}, {"role": "assistant", "content": "ok"}]
    assert jinja_render(NO_SYNTAX, plain, True) == riftco_render(NO_SYNTAX, plain, True)


@pytest.mark.parametrize("template", TEMPLATES, ids=["default", "custom", "no-syntax"])
def test_export_then_import_keeps_the_template(template):
    text = jinja_chat_template(template)
    back = chat_template_from_jinja(text)
    assert back == template
    assert back.tool_call == template.tool_call and back.assistant_role == template.assistant_role
    assert chat_template_from_jinja("\n" + text + "\n") == template  # as a .jinja file holds it
    # A body that no longer matches its opening comment is not riftco's.
    assert chat_template_from_jinja(text.replace("{% endfor %}", "{{ 1 }}{% endfor %}")) is None
    assert (
        chat_template_from_jinja(text.replace('"generation_prompt":"', '"generation_prompt":"x'))
        is None
    )


def test_a_hash_in_the_template_cannot_end_the_opening_comment():
    template = ChatTemplate(
        {"user": RoleFormat("#} {# ", "#"), "assistant": RoleFormat("{#", "#}")},
        "#}",
        tool_call=ToolCallSyntax(start="#}", end="#", tool_role="user"),
    )
    text = jinja_chat_template(template)
    assert chat_template_from_jinja(text) == template
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("f", '{"#": "#}"}')]},
    ]
    assert jinja_render(template, messages, True) == riftco_render(template, messages, True)


def test_jinja_written_from_roles_alone_still_imports():
    # What the export wrote before it spoke tool calls: the syntax comes from the roles.
    branches = "".join(
        ("{% if" if k == 0 else "{% elif")
        + f" message['role'] == {json.dumps(role)} %}}"
        + f"{{{{ {json.dumps(fmt.prefix)} + message['content'] + {json.dumps(fmt.suffix)} }}}}"
        for k, (role, fmt) in enumerate(DEFAULT_CHAT_TEMPLATE.roles.items())
    )
    text = (
        "{% for message in messages %}"
        + branches
        + "{% else %}{{ raise_exception('unknown role ' + message['role']) }}"
        "{% endif %}{% endfor %}"
        '{% if add_generation_prompt %}{{ "<|assistant|>" }}{% endif %}'
    )
    assert chat_template_from_jinja(text) == DEFAULT_CHAT_TEMPLATE


@pytest.mark.parametrize("jinja_file", [False, True], ids=["tokenizer_config", "jinja_file"])
def test_a_directory_without_riftco_state_keeps_the_syntax(tmp_path, jinja_file):
    tokenizer = ByteTokenizer(
        list(range(256)),
        special_tokens=["<|endoftext|>", "<u>", "<b>", "<o>"],
        chat_template=CUSTOM,
    )
    write_tokenizer_files(tokenizer, tmp_path, context_length=32)
    path = tmp_path / "tokenizer_config.json"
    config = json.loads(path.read_text())
    del config["riftco_tokenizer"]
    if jinja_file:  # where newer transformers releases save it
        (tmp_path / "chat_template.jinja").write_text(config.pop("chat_template") + "\n")
    path.write_text(json.dumps(config, indent=2))
    assert read_tokenizer_files(tmp_path).chat_template == CUSTOM


def test_transformers_renders_the_same(tmp_path, tokenizer):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE
    write_tokenizer_files(tokenizer, tmp_path / "ours", context_length=64)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    calls = [call("get_weather", text) for text in ARGUMENT_TEXTS[:7]]
    calls.append(call("add", {"z": 2, "a": [1.5, "é", None]}))
    messages = conversation(DEFAULT_CHAT_TEMPLATE, calls, "Checking.")
    rendered = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == riftco_render(DEFAULT_CHAT_TEMPLATE, messages, True)
    auto.save_pretrained(tmp_path / "theirs")
    assert read_tokenizer_files(tmp_path / "theirs").chat_template == DEFAULT_CHAT_TEMPLATE
