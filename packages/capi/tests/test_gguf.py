"""GGUF files through the C ABI: riftco's exports at F32, F16, Q8_0 and Q4_0 (and a file
as llama.cpp's converter writes it, without riftco's keys) against riftco-interchange's
import of the same file on its stored blocks: logits and 64-step tokens; integrity and
hostile files refused, typed."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from riftco_ctypes import CapiError, Model, generate

pytest.importorskip("gguf")

from riftco.interchange import export_gguf_model, import_gguf_model, load_bundle
from riftco.nn.generation import SamplingConfig
from riftco.nn.generation import generate as nn_generate

PROMPT = [5, 17, 42, 99, 3, 250, 7]
#: The prompt runs op by op in riftco-nn and through the whole-step decoder here.
TOLERANCE = {"f32": 2e-5, "f16": 2e-5, "q8_0": 1e-4, "q4_0": 1e-4}


@pytest.fixture(scope="module", params=["f32", "f16", "q8_0", "q4_0"])
def gguf_file(request, bundle, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / f"{bundle.stem}-{request.param}.gguf"
    export_gguf_model(load_bundle(bundle), path, dtype=request.param)
    return request.param, path


def test_gguf_logits_and_tokens_equal_riftco_interchange(lib, gguf_file):
    dtype, path = gguf_file
    runnable = import_gguf_model(path, weights="stored")
    model = Model(lib, path)
    assert model.config.source == 1
    assert model.config.weight_format == {"f32": 0, "f16": 1, "q8_0": 2, "q4_0": 3}[dtype]
    session = model.session()
    session.prefill(PROMPT)
    want = runnable.logits(PROMPT)[-1]
    got = session.logits()
    assert np.max(np.abs(got - want)) <= TOLERANCE[dtype] * np.max(np.abs(want))
    session.close()
    for case in (dict(temperature=0.0), dict(temperature=0.9, top_k=30, seed=7)):
        config = SamplingConfig(max_new_tokens=64, **case)
        expected = nn_generate(runnable.model, [PROMPT], config)[0].tokens
        assert generate(model, PROMPT, 64, **case) == expected, (dtype, case)
    model.close()


def test_gguf_identity_is_the_bundles(lib, bundle, gguf_file):
    _, path = gguf_file
    assert Model(lib, path).artifact_id() == load_bundle(bundle).artifact_id


def _flip(path, at, tmp_path):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    out = tmp_path / "flipped.gguf"
    out.write_bytes(bytes(raw))
    return out


def test_changed_tensor_data_is_a_checksum_error(lib, gguf_file, tmp_path):
    from riftco.interchange.gguf_file import scan_gguf

    _, path = gguf_file
    layout = scan_gguf(path)
    tensor = layout.tensors["token_embd.weight"]
    with pytest.raises(CapiError) as info:
        Model(lib, _flip(path, layout.data_offset + tensor.offset + 5, tmp_path))
    assert info.value.status == "checksum"


def test_truncated_gguf_files_are_refused_typed(lib, gguf_file, tmp_path):
    from riftco.interchange.gguf_file import scan_gguf

    _, path = gguf_file
    raw = path.read_bytes()
    layout = scan_gguf(path)
    end = layout.data_offset + max(t.offset + t.nbytes for t in layout.tensors.values())
    out = tmp_path / "cut.gguf"
    for cut in [4, 8, 20, 24, 100, 1000, len(raw) // 2, end - 1]:
        out.write_bytes(raw[:cut])
        with pytest.raises(CapiError) as info:
            Model(lib, out)
        assert info.value.status in ("format", "limit", "unsupported", "io"), cut


def test_hostile_counts_and_lengths(lib, tmp_path):
    out = tmp_path / "hostile.gguf"
    cases = [
        (b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0), "limit"),  # tensor count
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40), "limit"),  # key count
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62), "limit"),  # key
        (b"GGUF" + struct.pack("<IQQ", 9, 0, 0), "unsupported"),  # version
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(8), "unsupported"),  # no architecture
    ]
    for raw, status in cases:
        out.write_bytes(raw)
        with pytest.raises(CapiError) as info:
            Model(lib, out)
        assert info.value.status == status, raw


def _without_riftco_keys(src, dst):
    """The file as another converter would leave it: llama.cpp's keys and the tensors,
    no riftco.* key (so nothing is verified)."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith(("riftco.", "GGUF.", "general.architecture")):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), kind)
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        writer.add_tensor(
            t.name,
            np.asarray(t.data),
            raw_shape=shape if t.tensor_type in (0, 1) else None,
            raw_dtype=t.tensor_type,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_file_without_riftco_keys_loads_the_same(lib, gguf_file, tmp_path):
    _, path = gguf_file
    plain = tmp_path / "plain.gguf"
    _without_riftco_keys(path, plain)
    ours, theirs = Model(lib, path), Model(lib, plain)
    assert theirs.artifact_id() == ""
    a, b = ours.session(), theirs.session()
    a.prefill(PROMPT)
    b.prefill(PROMPT)
    np.testing.assert_array_equal(a.logits(), b.logits())
    for m in (a, b, ours, theirs):
        m.close()


def test_gguf_single_steps_bit_equal_riftco_nn_native_step(lib, gguf_file):
    import riftco.nn as nn

    _, path = gguf_file
    model = import_gguf_model(path, weights="stored").model
    cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
    sid = cache.add_sequence()
    ours = Model(lib, path)
    session = ours.session()
    for i, token in enumerate([*PROMPT, 11, 12, 13, 200, 1]):
        want = model.forward_incremental([[token]], cache, [sid]).numpy()[0]
        if i == 0:
            session.prefill([token])
        else:
            session.step(token)
        np.testing.assert_array_equal(session.logits(), want)
    session.close()
    ours.close()


def test_gguf_truncations_and_bit_flips_are_typed(lib, gguf_file, tmp_path):
    """riftco-interchange's damaged-GGUF cases: each is loaded or refused with a typed
    status (never internal), and where import_gguf refuses the file, so does the C ABI."""
    from riftco.interchange import import_gguf

    _, path = gguf_file
    raw = path.read_bytes()
    rng = np.random.default_rng(0)
    variants = [raw[:offset] for offset in np.linspace(0, len(raw) - 1, 60).astype(int)]
    for position in rng.integers(0, len(raw), 60):
        flipped = bytearray(raw)
        flipped[position] ^= 1 << int(rng.integers(0, 8))
        variants.append(bytes(flipped))
    damaged = tmp_path / "damaged.gguf"
    for i, variant in enumerate(variants):
        damaged.write_bytes(variant)
        try:
            import_gguf(damaged, require_tokenizer=False)
            python_refuses = False
        except ValueError:
            python_refuses = True
        try:
            Model(lib, damaged).close()
            status = None
        except CapiError as exc:
            status = exc.status
        assert status != "internal", i
        if python_refuses:
            assert status is not None, i
