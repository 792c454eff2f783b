import math

import numpy as np
import pytest
from optim_helpers import TextbookAdam, grads_for, make_params, set_grads, values

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.optim import Adam, AdamStepStats, AdamW, weight_decay_groups


def scalar(value, backend=None):
    return Parameter(rt.tensor([value], backend=backend), name="w")


def test_hand_computed_steps():
    w = scalar(1.0)
    opt = Adam([w], lr=0.1, max_grad_norm=None)
    # step 1: m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25: w -= 0.1 * 0.5 / 0.5
    set_grads([w], [[0.5]])
    assert opt.step() == AdamStepStats(step=1, gradient_norm=0.5, clip_scale=1.0)
    assert w.value.numpy()[0] == pytest.approx(0.9, abs=1e-7)
    # step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225
    set_grads([w], [[-0.25]])
    opt.step()
    m_hat, v_hat = 0.02 / (1 - 0.9**2), 0.00031225 / (1 - 0.999**2)
    assert w.value.numpy()[0] == pytest.approx(0.9 - 0.1 * m_hat / math.sqrt(v_hat), abs=1e-6)
    assert w.value.numpy()[0] == pytest.approx(0.873366, abs=1e-6)
    # step 3: m = 0.018 + 0.1 = 0.118, v = 0.00031193775 + 0.001
    set_grads([w], [[1.0]])
    opt.step()
    m_hat, v_hat = 0.118 / (1 - 0.9**3), 0.00131193775 / (1 - 0.999**3)
    expected = 0.9 - 0.1 * (0.02 / 0.19) / math.sqrt(0.00031225 / (1 - 0.999**2))
    expected -= 0.1 * m_hat / math.sqrt(v_hat)
    assert w.value.numpy()[0] == pytest.approx(expected, abs=1e-6)
    sd = opt.state_dict()["state"][0]
    assert sd["step"] == 3
    assert sd["exp_avg"][0] == pytest.approx(0.118, rel=1e-6)
    assert sd["exp_avg_sq"][0] == pytest.approx(0.00131193775, rel=1e-6)


@pytest.mark.parametrize(
    ("cls", "weight_decay"), [(Adam, 0.0), (Adam, 0.05), (AdamW, 0.05), (AdamW, 0.0)]
)
def test_several_steps_follow_the_equations(backend, cls, weight_decay):
    shapes = [(4, 5), (7,), (1,)]
    params = make_params(shapes, backend=backend)
    refs = [
        TextbookAdam(v, lr=1e-2, weight_decay=weight_decay, decoupled=cls is AdamW)
        for v in values(params)
    ]
    opt = cls(params, lr=1e-2, weight_decay=weight_decay, max_grad_norm=None)
    for step in range(1, 7):
        grads = grads_for(shapes, step)
        set_grads(params, grads)
        stats = opt.step()
        assert stats.step == step and stats.clip_scale == 1.0
        expected_norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
        assert stats.gradient_norm == pytest.approx(expected_norm, rel=1e-6)
        for p, ref, g in zip(params, refs, grads):
            np.testing.assert_allclose(p.value.numpy(), ref.step(g), rtol=2e-6, atol=1e-7)


def test_zero_gradients_with_zero_state_leave_parameters_unchanged(backend):
    params = make_params([(3, 4), (5,)], backend=backend)
    before = values(params)
    opt = Adam(params, lr=0.1, weight_decay=0.0)
    set_grads(params, [np.zeros((3, 4)), np.zeros(5)])
    stats = opt.step()
    assert stats == AdamStepStats(1, 0.0, 1.0)
    for b, a in zip(before, values(params)):
        assert b.tobytes() == a.tobytes()
    state = opt.state_dict()["state"]
    assert all(not s["exp_avg"].any() and not s["exp_avg_sq"].any() for s in state.values())


def test_later_zero_gradients_follow_the_equations_once_momentum_exists(backend):
    w = Parameter(rt.tensor([1.0, -2.0, 3.0], backend=backend))
    ref = TextbookAdam(values([w])[0], lr=0.1)
    opt = Adam([w], lr=0.1, max_grad_norm=None)
    for g in ([0.5, 0.25, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]):
        set_grads([w], [g])
        opt.step()
        np.testing.assert_allclose(w.value.numpy(), ref.step(g), rtol=1e-6)
    # momentum keeps moving the parameters although the gradient is zero
    assert not np.allclose(w.value.numpy(), [1.0, -2.0, 3.0], atol=0.05)


def test_the_clip_scale_and_the_clipped_gradient_feed_both_moments(backend):
    a = Parameter(rt.tensor([3.0], backend=backend))
    b = Parameter(rt.tensor([[0.0, 4.0]], backend=backend))
    opt = Adam([a, b], lr=1e-3, max_grad_norm=1.0)
    set_grads([a, b], [[3.0], [[0.0, 4.0]]])
    stats = opt.step()
    assert stats.gradient_norm == 5.0
    assert stats.clip_scale == pytest.approx(0.2)
    state = opt.state_dict()["state"]
    np.testing.assert_allclose(state[0]["exp_avg"], [0.1 * 0.6], rtol=1e-6)
    np.testing.assert_allclose(state[0]["exp_avg_sq"], [0.001 * 0.36], rtol=1e-5)
    np.testing.assert_allclose(state[1]["exp_avg"], [[0.0, 0.1 * 0.8]], rtol=1e-6)
    # under the limit, no clipping; the limit off, no clipping either
    set_grads([a, b], [[0.3], [[0.0, 0.4]]])
    assert opt.step().clip_scale == 1.0
    opt.max_grad_norm = None
    set_grads([a, b], [[30.0], [[0.0, 40.0]]])
    stats = opt.step()
    assert (stats.gradient_norm, stats.clip_scale) == (50.0, 1.0)


def test_clipped_updates_follow_the_equations():
    shapes = [(6, 3), (4,)]
    params = make_params(shapes)
    refs = [TextbookAdam(v, lr=1e-2) for v in values(params)]
    opt = Adam(params, lr=1e-2, max_grad_norm=0.5)
    for step in range(1, 5):
        grads = grads_for(shapes, step, scale=3.0)
        set_grads(params, grads)
        stats = opt.step()
        assert stats.clip_scale == pytest.approx(0.5 / stats.gradient_norm)
        for p, ref, g in zip(params, refs, grads):
            np.testing.assert_allclose(
                p.value.numpy(), ref.step(g, stats.clip_scale), rtol=2e-6, atol=1e-7
            )


def test_huge_and_tiny_gradients_give_an_exact_finite_norm():
    w = Parameter(rt.zeros(1000))
    opt = Adam([w], lr=1e-3, max_grad_norm=1.0)
    set_grads([w], [np.full(1000, 1e30)])
    stats = opt.step()
    assert stats.gradient_norm == pytest.approx(1e30 * math.sqrt(1000), rel=1e-6)
    assert stats.clip_scale == pytest.approx(1.0 / stats.gradient_norm, rel=1e-6)
    assert np.isfinite(w.value.numpy()).all()
    set_grads([w], [np.full(1000, 1e-30)])
    assert opt.step().gradient_norm == pytest.approx(1e-30 * math.sqrt(1000), rel=1e-6)


def test_parameters_without_gradients_are_skipped():
    params = make_params([(2,), (3,)])
    before = values(params)
    opt = Adam(params, lr=0.1)
    set_grads(params, [[1.0, 1.0], None])
    opt.step()
    after = values(params)
    assert not np.array_equal(after[0], before[0])
    assert after[1].tobytes() == before[1].tobytes()
    assert list(opt.state_dict()["state"]) == [0]


def test_updates_are_in_place_and_bump_versions():
    w = scalar(1.0)
    storage, version = w.value._data, w.value.version
    opt = AdamW([w], lr=0.1)
    set_grads([w], [[1.0]])
    opt.step()
    assert w.value._data is storage
    assert w.value.version == version + 1


def test_zero_grad_and_set_lr():
    params = make_params([(2,), (3,)])
    opt = AdamW(params)
    set_grads(params, [[1.0, 2.0], [1.0, 2.0, 3.0]])
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    opt.set_lr(0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.5]
    with pytest.raises(ValueError, match="lr"):
        opt.set_lr(-1.0)


def test_weight_decay_groups_exclude_norms_biases_and_embeddings():
    named = {
        "token_embedding.weight": Parameter(rt.ones(10, 4)),
        "blocks.0.attention.query.weight": Parameter(rt.ones(4, 4)),
        "blocks.0.attention.query.bias": Parameter(rt.ones(4)),
        "final_norm.weight": Parameter(rt.ones(4)),
    }
    groups = weight_decay_groups(named.items(), 0.1)
    opt = AdamW(groups, lr=0.1)
    assert [len(g["params"]) for g in opt.param_groups] == [1, 3]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    for p in named.values():
        p.grad = rt.zeros(*p.shape)
    opt.step()
    # zero gradients: only decoupled decay moves anything, and only the decayed group
    assert named["blocks.0.attention.query.weight"].value.numpy()[0, 0] == np.float32(0.99)
    assert named["token_embedding.weight"].value.numpy()[0, 0] == 1.0
    assert named["final_norm.weight"].value.numpy()[0] == 1.0


def test_groups_keep_their_own_learning_rates():
    a, b = make_params([(3,), (3,)])
    ref_a = TextbookAdam(values([a])[0], lr=0.1)
    ref_b = TextbookAdam(values([b])[0], lr=0.01)
    opt = Adam([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1, max_grad_norm=None)
    for step in (1, 2):
        grads = grads_for([(3,), (3,)], step)
        set_grads([a, b], grads)
        opt.step()
        np.testing.assert_allclose(a.value.numpy(), ref_a.step(grads[0]), rtol=1e-6)
        np.testing.assert_allclose(b.value.numpy(), ref_b.step(grads[1]), rtol=1e-6)


def test_bad_arguments_are_refused():
    w = scalar(1.0)
    for kwargs, match in [
        ({"lr": -1.0}, "lr"),
        ({"betas": (0.9, 1.0)}, "beta2"),
        ({"betas": (0.9,)}, "betas"),
        ({"eps": float("nan")}, "eps"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"page_size": 0}, "page_size"),
    ]:
        with pytest.raises(ValueError, match=match):
            Adam([w], **kwargs)
    with pytest.raises(ValueError, match="twice"):
        Adam([w, w])
    with pytest.raises(ValueError, match="momentum"):
        Adam([{"params": [w], "momentum": 0.9}])
    with pytest.raises(TypeError, match="Parameter"):
        Adam([rt.ones(3)])
    with pytest.raises(TypeError, match="float32"):
        Adam([type("IntParameter", (), {"value": rt.arange(3), "grad": None})()])
    opt = Adam([w])
    w.grad = rt.ones(2)
    with pytest.raises(rt.ShapeError, match="gradient of shape"):
        opt.step()


def test_moments_must_follow_their_parameter():
    w = Parameter(rt.ones(2, 3))
    opt = Adam([w])
    w.grad = rt.ones(2, 3)
    opt.step()
    w.value, w.grad = rt.ones(3, 2), rt.ones(3, 2)
    with pytest.raises(rt.ShapeError, match="replaced"):
        opt.step()
    assert opt.step_count == 1


def test_moments_must_live_on_the_parameters_backend():
    from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points

    w = Parameter(rt.ones(4))
    opt = Adam([w])
    w.grad = rt.ones(4)
    opt.step()
    with extra_entry_points(REFERENCE_ENTRY_POINT):
        w.value, w.grad = w.value.to("reference"), w.grad.to("reference")
        with pytest.raises(rt.BackendMismatch, match="moments on cpu"):
            opt.step()
