import itertools
import random

import pytest

from riftco.cajal import MultilinearMap, ShapeError


def random_map(rng, shape):
    size = 1
    for n in shape:
        size *= n
    return MultilinearMap(shape, [rng.uniform(-1, 1) for _ in range(size)])


def reference_apply(f, *arguments):
    """The defining sum, written with explicit indices."""
    out = [0.0] * f.output_dimension
    for index in itertools.product(*(range(n) for n in f.shape)):
        term = f.entry(*index)
        for argument, i in zip(arguments, index[1:]):
            term *= argument[i]
        out[index[0]] += term
    return out


def close(a, b):
    return len(a) == len(b) and all(abs(x - y) < 1e-9 for x, y in zip(a, b))


def vectors(rng, dimensions):
    return [[rng.uniform(-2, 2) for _ in range(n)] for n in dimensions]


@pytest.mark.parametrize("shape", [(3,), (2, 3), (3, 2, 4), (2, 1, 3, 2)])
def test_call_matches_the_defining_sum(shape):
    rng = random.Random(0)
    f = random_map(rng, shape)
    arguments = vectors(rng, f.input_dimensions)
    assert close(f(*arguments), reference_apply(f, *arguments))


def test_permute_reorders_arguments():
    rng = random.Random(1)
    f = random_map(rng, (2, 3, 4, 5))
    x, y, z = vectors(rng, (3, 4, 5))
    g = f.permute([2, 0, 1])
    assert g.input_dimensions == (5, 3, 4)
    assert close(g(z, x, y), f(x, y, z))


def test_substitute_feeds_an_inner_map_into_an_argument():
    rng = random.Random(2)
    f = random_map(rng, (2, 3, 4, 2))
    inner = random_map(rng, (4, 3, 2))
    x, a, b, z = vectors(rng, (3, 3, 2, 2))
    g = f.substitute(1, inner)
    assert g.input_dimensions == (3, 3, 2, 2)
    assert close(g(x, a, b, z), f(x, inner(a, b), z))


def test_outer_concatenate_pad_and_slice():
    rng = random.Random(3)
    f, g = random_map(rng, (2, 3)), random_map(rng, (3, 2))
    x, y = vectors(rng, (3, 2))
    fx, gy = f(x), g(y)
    assert close(f.outer(g)(x, y), [a * b for a in fx for b in gy])
    h = random_map(rng, (4, 3))
    assert close(f.concatenate(h)(x), list(fx) + list(h(x)))
    assert close(f.pad_output(1, 2)(x), [0.0, *fx, 0.0, 0.0])
    assert close(h.slice_output(1, 3)(x), h(x)[1:3])
    assert close((f + f.scale(2.0))(x), [3 * v for v in fx])


def test_identity_constant_and_nested():
    assert MultilinearMap.identity(3)([1.0, 2.0, 3.0]) == (1.0, 2.0, 3.0)
    assert MultilinearMap.constant([4.0, 5.0])() == (4.0, 5.0)
    assert MultilinearMap((2, 2), [1, 2, 3, 4]).to_nested() == [[1.0, 2.0], [3.0, 4.0]]
    f = MultilinearMap((2, 2), [0, 2, 0, 0])
    assert list(f.nonzero_entries()) == [((0, 1), 2.0)]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: MultilinearMap((2, 2), [1.0] * 3), "expected 4 entries, found 3"),
        (lambda: MultilinearMap((), []), "positive integers"),
        (lambda: MultilinearMap((2, 3), [0.0] * 6)([1.0, 2.0]), "expected a vector of length 3"),
        (lambda: MultilinearMap((2, 3), [0.0] * 6)(), "expected 1 arguments, found 0"),
        (lambda: MultilinearMap.zeros(2, [3]).permute([1]), "expected a permutation"),
        (
            lambda: MultilinearMap.zeros(2, [3]).substitute(0, MultilinearMap.zeros(2)),
            "expected an inner map with output dimension 3, found 2",
        ),
        (lambda: MultilinearMap.zeros(2, [3]) + MultilinearMap.zeros(2, [2]), "equal shapes"),
    ],
)
def test_shape_errors(build, message):
    with pytest.raises(ShapeError) as caught:
        build()
    assert message in str(caught.value)
