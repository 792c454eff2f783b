import json
import sys
from pathlib import Path

import pytest

from riftco.train.data import make_instructions
from riftco.train.errors import DataError
from riftco.train.instructions import (
    default_instructions,
    load_jsonl,
    parse_jsonl,
    to_jsonl,
)


def test_default_instructions_come_from_the_topics():
    examples = default_instructions()
    assert len(examples) > 200
    prompts = {e.prompt[0]["content"]: e.response for e in examples}
    assert prompts["Explain the if statement."].startswith('The "if" statement is used')
    assert any(p.startswith("Show the grammar of") for p in prompts)
    for e in examples:
        assert [m.role for m in e.messages] == ["user", "assistant"]
        assert 0 < len(e.response) <= 2 * make_instructions.MAX_RESPONSE


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the data file was made from 3.11's topics"
)
def test_data_file_matches_its_generator():
    from pydoc_data.topics import topics

    expected = make_instructions.render(make_instructions.derive_instructions(topics))
    assert Path(make_instructions.OUTPUT).read_text("utf-8") == expected


def test_both_forms_and_round_trip(tmp_path):
    lines = [
        json.dumps({"prompt": "hi", "response": "hello", "system": "be nice"}),
        "",
        json.dumps(
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
        ),
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    examples = load_jsonl(path)
    assert [e.line for e in examples] == [1, 3]
    assert [m.role for m in examples[0].messages] == ["system", "user", "assistant"]
    assert examples[1].prompt == [{"role": "user", "content": "a"}] and examples[1].response == "b"
    assert [e.messages for e in parse_jsonl(to_jsonl(examples))] == [e.messages for e in examples]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "expected JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"prompt": "x"}', "expected keys 'prompt' and 'response'"),
        ('{"prompt": "x", "response": 3}', "'response' to be a string"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "at least one assistant"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "expected a role"),
        ('{"messages": []}', "non-empty list"),
    ],
)
def test_malformed_line_names_its_number(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"prompt": "p", "response": "r"})
    path.write_text(f"{good}\n{good}\n{line}\n{good}\n")
    with pytest.raises(DataError, match=rf"bad.jsonl:3: .*{message}") as info:
        load_jsonl(path)
    assert info.value.line == 3 and info.value.path == str(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(DataError, match="empty.jsonl: expected at least one example"):
        load_jsonl(path)
