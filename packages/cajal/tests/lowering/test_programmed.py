import numpy as np
import pytest
from programs import LENGTH, SYMBOLS, conditional_reverse, config

import riftco.tensor as rt
from riftco.autograd import no_grad
from riftco.cajal import encode, enumerate_values
from riftco.cajal.programmed import (
    ProgrammedConfig,
    ProgrammedConfigError,
    ProgrammedDecoder,
    ReplaceInput,
    RollBranch,
    Span,
    Steer,
    TimeRangeLoss,
    time_range_cross_entropy,
)
from riftco.nn.functional import cross_entropy


@pytest.fixture(scope="module")
def program():
    return conditional_reverse()


def _ids(batch=5, seed=0):
    return np.random.default_rng(seed).integers(0, SYMBOLS + 1, (batch, 2 * LENGTH))


def test_the_program_reverses_exactly_when_the_condition_is_true(program):
    (seq_type, bool_type) = (t for _, t in program.context)
    for x in list(enumerate_values(seq_type))[:20]:
        for c, reverse in zip(enumerate_values(bool_type), (False, True)):
            out = np.array(program.map(encode(x), encode(c))).reshape(LENGTH, SYMBOLS)
            blocks = np.array(encode(x)).reshape(LENGTH, SYMBOLS)
            np.testing.assert_array_equal(out, blocks[::-1] if reverse else blocks)


def test_forward_shapes_sites_and_capture_never_change_the_result(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    plain = model(ids).numpy()
    out = model.run(ids, capture=True)
    np.testing.assert_array_equal(out.logits.numpy(), plain)
    assert plain.shape == (5, 2 * LENGTH, SYMBOLS + 1)
    assert set(out.traces) == set(model.site_names())
    assert out.traces["program.input.x"].shape == (5, LENGTH * SYMBOLS)
    assert out.traces["program.input.c"].shape == (5, 2)
    assert out.traces["layer0.program"].shape == (5, 2 * LENGTH, 8)
    program_out = out.traces["layer0.program"]
    assert not program_out[:, :LENGTH].any() and program_out[:, LENGTH:].any()
    residual = out.traces["embedding"] + sum(out.traces[b] for b in model.branch_names())
    np.testing.assert_allclose(out.traces["layer0.residual"], residual, rtol=1e-5, atol=1e-5)
    with pytest.raises(ProgrammedConfigError, match="unknown sites"):
        model.run(ids, capture=["nowhere"])


def test_the_model_is_causal(program):
    model = ProgrammedDecoder(config(), program, seed=1)
    ids = _ids()
    changed = ids.copy()
    changed[:, -1] = (changed[:, -1] + 1) % (SYMBOLS + 1)
    a, b = model(ids).numpy(), model(changed).numpy()
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])


def test_replacing_a_logical_input_feeds_the_program_exact_encodings(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids(batch=4)
    x = np.eye(SYMBOLS, dtype=np.float32)[ids[:, :LENGTH] % SYMBOLS].reshape(4, -1)
    c = np.eye(2, dtype=np.float32)[[0, 1, 1, 0]]
    out = model.run(
        ids,
        capture=["program.output"],
        interventions=[ReplaceInput("x", x), ReplaceInput("c", c)],
    )
    expected = [program.map(x[i], c[i]) for i in range(4)]
    np.testing.assert_array_equal(out.traces["program.output"], np.float32(expected))
    with pytest.raises(ProgrammedConfigError, match="expected values of shape"):
        model.run(ids, interventions=[ReplaceInput("x", x[:, :3])])


def test_batch_roll_shuffles_a_branch_output_across_the_batch(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    base = model.run(ids, capture=["layer0.attention1"]).traces["layer0.attention1"]
    rolled = model.run(
        ids, capture=["layer0.attention1"], interventions=[RollBranch("layer0.attention1", 2)]
    ).traces["layer0.attention1"]
    np.testing.assert_array_equal(rolled, np.roll(base, -2, axis=0))
    with pytest.raises(ProgrammedConfigError, match="expected one of the branches"):
        model.run(ids, interventions=[RollBranch("layer0.missing")])


def test_steering_adds_a_scaled_basis_vector(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    base = model.run(ids, capture=["program.output", "layer0.feed_forward"]).traces
    steered = model.run(
        ids,
        capture=["program.output", "layer0.feed_forward"],
        interventions=[Steer("program.output", 5, 2.5), Steer("layer0.feed_forward", 1, -1.0, [4])],
    ).traces
    delta = steered["program.output"] - base["program.output"]
    assert np.allclose(delta[:, 5], 2.5) and np.allclose(np.delete(delta, 5, axis=1), 0)
    ff = steered["layer0.feed_forward"] - base["layer0.feed_forward"]
    assert np.allclose(ff[:, 4, 1], -1.0) and np.count_nonzero(np.abs(ff) > 1e-6) == 5
    with pytest.raises(ProgrammedConfigError, match="has no positions"):
        model.run(ids, interventions=[Steer("program.output", 1, 1.0, [0])])
    with pytest.raises(ProgrammedConfigError, match="index in 0..11"):
        model.run(ids, interventions=[Steer("program.output", 30, 1.0)])


def test_switching_branches_off(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    out = model.run(ids, off=["attention", "layer0.program"], capture=True)
    residual = out.traces["embedding"] + out.traces["layer0.feed_forward"]
    np.testing.assert_allclose(out.traces["layer0.residual"], residual, rtol=1e-6, atol=1e-6)
    assert "layer0.attention0" not in out.traces
    with pytest.raises(ProgrammedConfigError, match="names no branch"):
        model.run(ids, off=["convolution"])


def test_time_range_cross_entropy_counts_only_its_range(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    targets = np.roll(ids, -1, axis=1)
    logits = model(ids)
    loss = time_range_cross_entropy(logits, targets, LENGTH, 2 * LENGTH).item()
    sliced = cross_entropy(
        rt.from_numpy(logits.numpy()[:, LENGTH:].copy()), targets[:, LENGTH:]
    ).item()
    assert loss == pytest.approx(sliced, rel=1e-6)
    weights = np.ones_like(targets, dtype=np.float32)
    assert TimeRangeLoss(LENGTH, 2 * LENGTH)(logits, targets, weights).item() == pytest.approx(loss)
    with pytest.raises(ProgrammedConfigError, match="time range"):
        time_range_cross_entropy(logits, targets, 4, 2)


def test_gradients_reach_learned_parts_but_not_the_frozen_program(program):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    TimeRangeLoss(LENGTH, 2 * LENGTH)(model(ids), np.roll(ids, -1, axis=1)).backward()
    names = {n for n, p in model.named_parameters() if p.grad is not None}
    assert "layers.0.program.input_projections.0.weight" in names
    assert "layers.0.program.output_projection.weight" in names
    assert not any("program.program" in n for n, _ in model.named_parameters())
    assert "layers.0.program.program.coefficients" in model.state_dict()
    trainable = ProgrammedDecoder(config(trainable_program=True, program_init="normal"), program)
    assert "layers.0.program.program.coefficients" in dict(trainable.named_parameters())


def test_configuration_errors_name_the_problem(program):
    with pytest.raises(ProgrammedConfigError, match="see the future"):
        config(output=Span(1, LENGTH, SYMBOLS))
    with pytest.raises(ProgrammedConfigError, match="past the context"):
        config(output=Span(LENGTH + 1, LENGTH, SYMBOLS))
    with pytest.raises(ProgrammedConfigError, match="has dimension 12"):
        ProgrammedDecoder(config(inputs=(Span(0, 2, SYMBOLS), Span(0, 1, 2))), program)
    with pytest.raises(ProgrammedConfigError, match="pass it as program"):
        ProgrammedDecoder(config())
    with pytest.raises(ProgrammedConfigError, match="multiple of heads"):
        config(heads=3)
    with pytest.raises(ProgrammedConfigError, match="programmed config"):
        ProgrammedConfig.from_dict({**config().to_dict(), "output": {"start": 3, "size": 3}})
    with pytest.raises(ProgrammedConfigError, match="unknown keys"):
        ProgrammedConfig.from_dict({**config().to_dict(), "colour": 1})
    assert ProgrammedConfig.from_dict(config().to_dict()) == config()
    plain = ProgrammedDecoder(config(inputs=(), output=None))
    assert plain.program_branch is None and "layer0.program" not in plain.branch_names()


def test_the_model_moves_between_backends(program, backend):
    model = ProgrammedDecoder(config(), program, seed=0)
    ids = _ids()
    with no_grad():
        expected = model(ids).numpy()
    model.to(backend)
    assert model.program_branch.program.coefficient_tensor().backend.name == backend.name
    with no_grad():
        got = model(rt.from_numpy(ids, backend=backend)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
