"""prepare_data on files the tests write: layouts, splits, de-duplication, manifest."""

import hashlib
import json

import pytest

from riftco.train import load_jsonl
from riftco.train.errors import DataError
from riftco.train.prepare import (
    PrepareOptions,
    SplitOptions,
    open_source,
    prepare_data,
    read_manifest,
)


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def alpaca(n, start=0):
    return [
        {"instruction": f"Say {i}.", "input": "" if i % 2 else f"ctx {i}", "output": f"It is {i}."}
        for i in range(start, start + n)
    ]


def run(tmp_path, records, name="data.jsonl", **options):
    split = {k: options.pop(k) for k in list(options) if k in SplitOptions.__dataclass_fields__}
    src = write_jsonl(tmp_path / name, records)
    return prepare_data(
        open_source(src), tmp_path / "out", PrepareOptions(split=SplitOptions(**split), **options)
    )


def lines(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_alpaca_becomes_prompt_response_jsonl_that_post_training_reads(tmp_path):
    result = run(tmp_path, alpaca(40), validation_fraction=0.1, test_fraction=0.1)
    assert result.layout == "alpaca" and result.kind == "chat"
    assert result.counts["splits"] == {"train": 32, "validation": 4, "test": 4}
    rows = lines(result.files["train"]) + lines(result.files["test"])
    even = next(r for r in rows if r["response"] == "It is 0.")
    assert even == {"prompt": "Say 0.\n\nctx 0", "response": "It is 0."}
    odd = next(r for r in rows if r["response"] == "It is 1.")
    assert odd["prompt"] == "Say 1."
    assert len(load_jsonl(result.files["validation"])) == 4


def test_dolly_messages_and_text_layouts_are_detected(tmp_path):
    dolly = [{"instruction": "Q?", "context": "c", "response": "A.", "category": "qa"}]
    assert run(tmp_path, dolly, test_fraction=0, validation_fraction=0).layout == "dolly"
    chat = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    ]
    result = run(tmp_path, chat, test_fraction=0, validation_fraction=0)
    assert result.layout == "messages"
    assert lines(result.files["train"]) == chat
    text = run(
        tmp_path, [{"text": "one doc"}, {"text": "two doc"}], validation_fraction=0, test_fraction=0
    )
    assert text.kind == "text" and text.files["train"].name == "train.txt"
    assert text.files["train"].read_text("utf-8") == "one doc\n\ntwo doc\n"


def test_no_layout_fits_names_the_columns_found(tmp_path):
    with pytest.raises(DataError, match=r"columns found, \['answer', 'question'\].*alpaca"):
        run(tmp_path, [{"question": "q", "answer": "a"}])


def test_a_malformed_row_is_refused_with_its_line_or_skipped(tmp_path):
    records = [*alpaca(3), {"instruction": "x", "output": 5}, *alpaca(3, 10)]
    with pytest.raises(DataError, match=r"row 4: expected 'output' to be a string; found int"):
        run(tmp_path, records)
    skipped = []
    src = write_jsonl(tmp_path / "d.jsonl", records)
    result = prepare_data(
        open_source(src),
        tmp_path / "out",
        PrepareOptions(on_error="skip"),
        report_skip=lambda row, why: skipped.append(row),
    )
    assert skipped == [4]
    assert result.counts["skipped"] == 1 and result.counts["kept"] == 6
    assert result.manifest["skipped_rows"] == [
        {"row": 4, "reason": "expected 'output' to be a string; found int"}
    ]


def test_jsonl_rows_are_numbered_by_line_and_bad_json_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(alpaca(1)[0]) + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:3: expected JSON"):
        prepare_data(open_source(str(path)), tmp_path / "out")


def test_duplicate_prompts_are_dropped_and_never_cross_splits(tmp_path):
    records = alpaca(50) + [{**r, "output": "another answer"} for r in alpaca(50)]
    result = run(tmp_path, records, validation_fraction=0.2, test_fraction=0.2)
    assert result.counts["duplicates"] == 50 and result.counts["kept"] == 50
    prompts = [
        {r["prompt"] for r in lines(result.files[s])} for s in ("train", "validation", "test")
    ]
    assert sum(map(len, prompts)) == 50 and len(set.union(*prompts)) == 50
    by_record = run(tmp_path, records, identity="record")
    assert by_record.counts["duplicates"] == 0 and by_record.counts["kept"] == 100


def test_splits_are_seeded_deterministic_and_independent_of_input_order(tmp_path):
    def split_of(result):
        return {
            s: sorted(r["prompt"] for r in lines(result.files[s])) for s in ("validation", "test")
        }

    first = split_of(run(tmp_path, alpaca(60), seed=3, validation_fraction=0.2, test_fraction=0.2))
    again = split_of(
        run(tmp_path, alpaca(60)[::-1], seed=3, validation_fraction=0.2, test_fraction=0.2)
    )
    other = split_of(run(tmp_path, alpaca(60), seed=4, validation_fraction=0.2, test_fraction=0.2))
    assert first == again
    assert first != other


def test_stratification_keeps_each_category_in_every_split(tmp_path):
    records = [
        {"instruction": f"q{i}", "response": "a", "category": "rare" if i < 10 else "common"}
        for i in range(100)
    ]
    result = run(tmp_path, records, stratify="category", validation_fraction=0.1, test_fraction=0.1)
    assert result.counts["strata"] == {
        "common": {"train": 72, "validation": 9, "test": 9},
        "rare": {"train": 8, "validation": 1, "test": 1},
    }
    with pytest.raises(DataError, match=r"row 1: expected the stratification field 'topic'"):
        run(tmp_path, records, stratify="topic")


def test_manifest_records_source_counts_seed_license_and_hashes(tmp_path):
    records = [{**r, "license": "cc-by-4.0"} for r in alpaca(20)]
    result = run(tmp_path, records, seed=11)
    manifest = read_manifest(tmp_path / "out")
    assert manifest == result.manifest
    source = (tmp_path / "data.jsonl").read_bytes()
    assert manifest["source"]["sha256"] == hashlib.sha256(source).hexdigest()
    assert manifest["revision"] == manifest["source"]["sha256"]
    assert manifest["seed"] == 11 and manifest["license"] == "cc-by-4.0"
    assert manifest["counts"]["rows"] == 20
    for name, info in manifest["files"].items():
        data = (tmp_path / "out" / name).read_bytes()
        assert info["sha256"] == hashlib.sha256(data).hexdigest() and info["bytes"] == len(data)


def test_the_same_input_makes_the_same_files_and_manifest(tmp_path):
    first = run(tmp_path, alpaca(25), seed=2).manifest
    files = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert run(tmp_path, alpaca(25), seed=2).manifest == first
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == files


def test_a_failed_run_leaves_the_previous_files_untouched(tmp_path):
    run(tmp_path, alpaca(10))
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with pytest.raises(DataError):
        run(tmp_path, [*alpaca(5), {"instruction": "", "output": "x"}])
    after = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert after == before


def test_limit_and_empty_results(tmp_path):
    assert run(tmp_path, alpaca(30), limit=7).counts["rows"] == 7
    with pytest.raises(DataError, match="at least one usable record"):
        run(tmp_path, [{"instruction": "x", "output": 1}], on_error="skip")
    with pytest.raises(ValueError, match="below 1"):
        SplitOptions(validation_fraction=0.5, test_fraction=0.5)
