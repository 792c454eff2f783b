"""The sources of prepare-data (CSV, JSON, Parquet, Hugging Face) and its command."""

import csv
import io
import json
import sys
import types

import pytest

from riftco.train import load_jsonl
from riftco.train.errors import DataError
from riftco.train.prepare import PrepareOptions, open_source, prepare_data
from riftco.train.prepare.command import RowProgress, main

ROWS = [
    {
        "instruction": f"Name {i}.",
        "input": "",
        "output": f"Number {i}.",
        "category": "c" + str(i % 3),
    }
    for i in range(30)
]


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def write_parquet(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    return str(path)


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet"])
def test_every_file_format_gives_the_same_files(tmp_path, kind):
    path = tmp_path / f"data.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    elif kind == "json":
        path.write_text(json.dumps({"data": ROWS}), encoding="utf-8")
    elif kind == "csv":
        write_csv(path, ROWS)
    else:
        write_parquet(path, ROWS)
    source = open_source(str(path))
    assert source.format == kind
    assert source.columns == ["category", "input", "instruction", "output"]
    result = prepare_data(source, tmp_path / "out")
    digests = {n: f["sha256"] for n, f in result.manifest["files"].items()}
    reference = tmp_path / "ref.jsonl"
    reference.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    expected = prepare_data(open_source(str(reference)), tmp_path / "ref")
    assert digests == {n: f["sha256"] for n, f in expected.manifest["files"].items()}


def test_parquet_rows_are_counted_and_a_bad_row_is_numbered(tmp_path):
    rows = [*ROWS[:9], {**ROWS[9], "output": None}, *ROWS[10:]]
    source = open_source(write_parquet(tmp_path / "d.parquet", rows))
    assert source.total == 30
    with pytest.raises(DataError, match=r"row 10: expected 'output' to be a string; found nothing"):
        prepare_data(source, tmp_path / "out")


def test_csv_row_with_missing_fields_is_malformed(tmp_path):
    path = tmp_path / "d.csv"
    write_csv(path, ROWS[:3])
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("only,two\n")
    with pytest.raises(DataError, match=r"row 4: expected 4 fields; found 2"):
        prepare_data(open_source(str(path)), tmp_path / "out")
    result = prepare_data(open_source(str(path)), tmp_path / "out", PrepareOptions(on_error="skip"))
    assert result.counts["skipped"] == 1


def test_csv_columns_come_from_the_header_even_when_the_first_row_is_bad(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("prompt,response\nonly-one-field\n,Hi.\n", encoding="utf-8")
    source = open_source(str(path))
    assert source.columns == ["prompt", "response"]
    result = prepare_data(source, tmp_path / "out", PrepareOptions(on_error="skip"))
    assert result.layout == "prompt-response" and result.counts["skipped"] == 1
    lines = result.files["train"].read_text("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"prompt": "", "response": "Hi."}]
    assert load_jsonl(result.files["train"])[0].response == "Hi."


def test_unknown_suffix_and_bad_json_documents_are_refused(tmp_path):
    (tmp_path / "d.xml").write_text("<x/>")
    with pytest.raises(DataError, match=r"suffix '\.xml'"):
        open_source(str(tmp_path / "d.xml"))
    (tmp_path / "d.json").write_text('"a string"')
    with pytest.raises(DataError, match="expected a JSON array of records"):
        open_source(str(tmp_path / "d.json"))
    (tmp_path / "n.json").write_text("[NaN]")
    with pytest.raises(DataError, match="expected (standard )?JSON"):
        open_source(str(tmp_path / "n.json"))


class FakeDataset:
    """What prepare-data uses of a datasets.Dataset."""

    def __init__(self, rows):
        self.rows = rows
        self.column_names = list(rows[0])
        self.info = types.SimpleNamespace(license="apache-2.0", version="1.0.0")
        self._fingerprint = "f00d"

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)


def test_hugging_face_datasets_load_through_the_library(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("datasets")
    fake.config = types.SimpleNamespace(HF_DATASETS_OFFLINE=False)

    def load_dataset(name, config, split, revision, cache_dir):
        calls.append((name, config, split, revision, cache_dir, fake.config.HF_DATASETS_OFFLINE))
        return FakeDataset(ROWS)

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    source = open_source("hf:org/alpaca-like", revision="abc123", cache_dir="c", offline=True)
    assert calls == [("org/alpaca-like", None, "train", "abc123", "c", True)]
    result = prepare_data(source, tmp_path / "out")
    manifest = result.manifest
    assert manifest["license"] == "apache-2.0" and manifest["revision"] == "abc123"
    assert manifest["source"]["fingerprint"] == "f00d" and manifest["source"]["offline"]
    assert manifest["counts"]["rows"] == 30


def test_hugging_face_failures_and_a_missing_library_are_data_errors(monkeypatch):
    fake = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise ConnectionError("no network")

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(DataError, match="cannot load the dataset.*ConnectionError: no network"):
        open_source("hf:org/x")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match=r"riftco-train\[datasets\]"):
        open_source("hf:org/x")


def test_a_real_saved_dataset_loads_offline(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(
        tmp_path / "saved"
    )
    source = open_source(str(tmp_path / "saved"), offline=True)
    assert source.format == "hf" and source.total == 30
    assert prepare_data(source, tmp_path / "out").layout == "alpaca"


def test_the_command_prints_a_summary_table(tmp_path, capsys):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    argv = [str(src), "--out", str(tmp_path / "out"), "--seed", "5", "--stratify", "category"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "validation" in out.out and "train.jsonl" in out.out
    assert "rows read 30, kept 30, duplicates 0, skipped 0; layout alpaca, seed 5" in out.out
    assert "rows 30" in out.err
    assert main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 1
    assert main([str(src), "--out", "o", "--test-fraction", "1.5"]) == 2


def test_row_progress_draws_a_bar_when_the_total_is_known():
    stream = io.StringIO()
    bar = RowProgress(200, stream, every=100)
    for row in range(1, 201):
        bar(row)
    bar.close()
    printed = stream.getvalue().splitlines()
    assert len(printed) == 3 and printed[-1].startswith("rows 200/200 [####################] 100%")
