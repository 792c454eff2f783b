"""Every operation's VJP against central finite differences, on every backend."""

import pytest

import riftco.autograd as ag
from riftco.autograd import gradcheck


def v(shape, domain="any"):
    return ("var", tuple(shape), domain)


def c(shape, domain="any"):
    """A float constant (a Variable that does not require gradients)."""
    return ("const", tuple(shape), domain)


def ints(data):
    return ("int64", data)


def bools(data):
    return ("bool", data)


CASES = {}


def case(name, fn, *inputs):
    assert name not in CASES, name
    CASES[name] = (fn, inputs)


# -- unary -------------------------------------------------------------------------------
UNARY = {
    "neg": (ag.neg, "any"),
    "abs": (ag.abs, "away"),
    "exp": (ag.exp, "any"),
    "log": (ag.log, "positive"),
    "sqrt": (ag.sqrt, "positive"),
    "rsqrt": (ag.rsqrt, "positive"),
    "tanh": (ag.tanh, "any"),
    "sigmoid": (ag.sigmoid, "any"),
    "relu": (ag.relu, "away"),
    "gelu": (ag.gelu, "any"),
    "gelu_tanh": (lambda x: ag.gelu(x, approximate="tanh"), "any"),
    "silu": (ag.silu, "any"),
}
for name, (fn, domain) in UNARY.items():
    for shape in [(), (5,), (2, 3, 2)]:
        case(f"{name}{list(shape)}", fn, v(shape, domain))
case("gelu_wide", ag.gelu, ("var_scaled", (3, 4), 4.0))
case("gelu_tanh_wide", lambda x: ag.gelu(x, approximate="tanh"), ("var_scaled", (3, 4), 4.0))
case("gelu_at_zero", ag.gelu, ("zeros", (2,)))

# -- binary with broadcasting ------------------------------------------------------------
PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((3, 1), (1, 4))]
BINARY = {
    "add": (ag.add, "any", "any"),
    "sub": (ag.sub, "any", "any"),
    "mul": (ag.mul, "any", "any"),
    "div": (ag.div, "any", "positive"),
    "pow": (ag.pow, "positive", "any"),
    "maximum": (ag.maximum, "grid", "grid_shifted"),
    "minimum": (ag.minimum, "grid", "grid_shifted"),
}
for name, (fn, da, db) in BINARY.items():
    for sa, sb in PAIRS:
        case(f"{name}{list(sa)}{list(sb)}", fn, v(sa, da), v(sb, db))
    case(f"{name}_const_right", fn, v((3, 4), da), c((4,), db))
    case(f"{name}_const_left", fn, c((3, 1), da), v((3, 4), db))
case("add_scalar", lambda x: x + 2.5, v((3,)))
case("radd_scalar", lambda x: 2.5 + x, v((3,)))
case("rsub_scalar", lambda x: 1.5 - x, v((3,)))
case("mul_scalar", lambda x: x * -3.0, v((3,)))
case("rdiv_scalar", lambda x: 2.0 / x, v((3,), "positive"))
case("div_scalar", lambda x: x / 4.0, v((3,)))
case("square", lambda x: x**2, v((2, 3)))
case("pow_fraction", lambda x: x**1.5, v((2, 3), "positive"))
case("rpow_scalar", lambda x: 2.0**x, v((2, 3)))
case("maximum_scalar", lambda x: ag.maximum(x, 0.0), v((2, 3), "away"))
case("same_operand", lambda x: x * x + x / (x * x + 1.0), v((3, 2)))
case(
    "where",
    lambda c, a, b: ag.where(c, a, b),
    bools([True, False, True, True]),
    v((3, 4)),
    v((3, 4)),
)
case(
    "where_broadcast",
    lambda c, a, b: ag.where(c, a, b),
    bools([[True], [False], [True]]),
    v((4,)),
    v((3, 1)),
)
case("where_scalar", lambda c, a: ag.where(c, a, 0.0), bools([True, False, True]), v((2, 3)))

# -- reductions --------------------------------------------------------------------------
for name, fn, domain in [
    ("sum", ag.sum, "any"),
    ("mean", ag.mean, "any"),
    ("sum_squares", ag.sum_squares, "any"),
    ("max", ag.max, "grid"),
    ("min", ag.min, "grid"),
]:
    for axis in [None, 0, -1, (0, 2)]:
        for keepdims in [False, True]:
            case(
                f"{name}_axis{axis}_keep{keepdims}",
                lambda x, fn=fn, axis=axis, keepdims=keepdims: fn(x, axis=axis, keepdims=keepdims),
                v((2, 3, 4), domain),
            )
    case(f"{name}_0d", fn, v((), domain))
case("max_ties", lambda x: ag.max(ag.maximum(x, 0.0), axis=-1), v((3, 4), "away"))

# -- matmul ------------------------------------------------------------------------------
MATMUL = [
    ((3, 4), (4, 5), False, False),
    ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True),
    ((4, 3), (5, 4), True, True),
    ((2, 3, 4), (4, 5), False, False),
    ((2, 1, 3, 4), (3, 4, 2), False, False),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((4,), (4, 5), False, False),
    ((3, 4), (4,), False, False),
    ((4,), (4,), False, False),
    ((4,), (2, 4, 3), False, False),
]
for sa, sb, ta, tb in MATMUL:
    case(
        f"matmul{list(sa)}{'T' if ta else ''}@{list(sb)}{'T' if tb else ''}",
        lambda a, b, ta=ta, tb=tb: ag.matmul(a, b, transpose_a=ta, transpose_b=tb),
        v(sa),
        v(sb),
    )
case("matmul_const_left", ag.matmul, c((3, 4)), v((4, 2)))
case("matmul_const_right", lambda a, b: a.matmul(b, transpose_b=True), v((3, 4)), c((2, 4)))
case("matmul_operator", lambda a, b: a @ b, v((2, 3)), v((3, 2)))

# -- layout ------------------------------------------------------------------------------
case("reshape", lambda x: x.reshape(4, -1), v((2, 3, 2)))
case("flatten", ag.flatten, v((2, 3)))
case("unsqueeze", lambda x: x.unsqueeze(1), v((2, 3)))
case("squeeze", lambda x: x.squeeze(1), v((2, 1, 3)))
case("squeeze_all", ag.squeeze, v((1, 3, 1)))
case("permute", lambda x: x.permute(2, 0, 1), v((2, 3, 4)))
case("permute_tuple", lambda x: x.permute((1, 2, 0)), v((2, 3, 4)))
case("transpose", lambda x: x.transpose(0, 2), v((2, 3, 4)))
case("T", lambda x: x.T, v((2, 3)))
case("narrow_middle", lambda x: x.narrow(1, 1, 2), v((2, 4, 3)))
case("narrow_start", lambda x: x.narrow(0, 0, 2), v((3, 2)))
case("narrow_end", lambda x: x.narrow(-1, 2, 2), v((2, 4)))
case("getitem_int", lambda x: x[1], v((3, 4)))
case("getitem_negative", lambda x: x[-1, 2], v((3, 4)))
case("getitem_slices", lambda x: x[1:, ::2], v((3, 4)))
case("getitem_ellipsis", lambda x: x[..., 1:3], v((2, 3, 4)))
case("getitem_none", lambda x: x[None, :, 1, None], v((3, 4)))
case("getitem_step", lambda x: x[0:5:3, 1], v((6, 2)))
case("getitem_empty", lambda x: x[2:2], v((3, 4)))
case("getitem_tensor", lambda x, i: x[i], v((4, 3)), ints([3, 0, 3]))
case("broadcast_to", lambda x: x.broadcast_to(2, 3, 4), v((3, 1)))
case("sum_to_shape", lambda x: x.sum_to_shape(3, 1), v((2, 3, 4)))
case(
    "concatenate",
    lambda a, b, d: ag.concatenate([a, b, d], axis=1),
    v((2, 1)),
    v((2, 3)),
    v((2, 2)),
)
case("concatenate_const", lambda a, b: ag.concatenate([a, b], axis=0), v((2, 3)), c((1, 3)))
case("stack", lambda a, b: ag.stack([a, b], axis=1), v((2, 3)), v((2, 3)))
case("stack_last", lambda a, b: ag.stack([a, b, a], axis=-1), v((3,)), v((3,)))
case("copy", ag.copy, v((2, 3)))
case("astype_same", lambda x: x.astype("float32"), v((2, 3)))

# -- indexing ----------------------------------------------------------------------------
case("index_select_rows", lambda x, i: ag.index_select(x, 0, i), v((4, 3)), ints([1, 3, 1]))
case("index_select_cols", lambda x, i: x.index_select(1, i), v((2, 4, 3)), ints([2, 2, 0]))
case("embedding", ag.embedding, v((5, 3)), ints([[0, 4, 4], [1, 0, 0]]))
case("gather_last", lambda x, i: ag.gather(x, -1, i), v((2, 4)), ints([[0, 3, 3], [1, 1, 2]]))
case("gather_first", lambda x, i: x.gather(0, i), v((3, 2)), ints([[2, 0], [2, 2]]))
case("index_add", lambda b, i, s: ag.index_add(b, 0, i, s), v((4, 3)), ints([0, 2, 0]), v((3, 3)))
case(
    "scatter_add",
    lambda b, i, s: ag.scatter_add(b, 1, i, s),
    v((2, 4)),
    ints([[0, 3, 0], [1, 1, 2]]),
    v((2, 3)),
)

# -- softmax -----------------------------------------------------------------------------
for name, fn in [("softmax", ag.softmax), ("log_softmax", ag.log_softmax)]:
    case(f"{name}_last", fn, v((3, 4)))
    case(f"{name}_axis0", lambda x, fn=fn: fn(x, axis=0), v((3, 4)))
    case(f"{name}_middle", lambda x, fn=fn: fn(x, axis=1), v((2, 3, 4)))
    case(f"{name}_causal", lambda x, fn=fn: fn(x, causal=True), v((2, 3, 3)))
    case(f"{name}_causal_more_keys", lambda x, fn=fn: fn(x, causal=True), v((2, 5)))
    case(f"{name}_1d", fn, v((5,)))

# -- compositions ------------------------------------------------------------------------
case(
    "mlp",
    lambda x, w1, w2: (ag.gelu(x @ w1) @ w2).log_softmax().mean(),
    v((3, 4)),
    v((4, 5)),
    v((5, 2)),
)
case(
    "attention_scores",
    lambda q, k: ((q.matmul(k, transpose_b=True)) * 0.5).softmax(causal=True),
    v((2, 3, 4)),
    v((2, 3, 4)),
)
case(
    "layer_norm",
    lambda x: (
        (x - x.mean(axis=-1, keepdims=True))
        * ((x - x.mean(axis=-1, keepdims=True)) ** 2)
        .mean(axis=-1, keepdims=True)
        .__add__(1e-5)
        .rsqrt()
    ),
    v((3, 5)),
)


def _build(spec, make, const, seed):
    kind = spec[0]
    if kind == "var":
        return make(spec[1], seed=seed, domain=spec[2])
    if kind == "const":
        return make(spec[1], seed=seed, domain=spec[2], requires_grad=False)
    if kind == "var_scaled":
        x = make(spec[1], seed=seed)
        return ag.Variable((x * spec[2]).value, requires_grad=True)
    if kind == "zeros":
        return ag.Variable((make(spec[1], seed=seed) * 0.0).value, requires_grad=True)
    return const(spec[1], dtype=kind)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vjp_matches_finite_differences(name, make, const):
    fn, specs = CASES[name]
    inputs = [_build(spec, make, const, seed) for seed, spec in enumerate(specs, start=1)]
    report = gradcheck(fn, inputs)
    assert report, report
