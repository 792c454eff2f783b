"""Parameters, gradients and textbook Adam for the optimizer tests."""

from __future__ import annotations

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter


def rand(shape, seed, scale=1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def make_params(shapes, seed=0, backend=None) -> list[Parameter]:
    return [
        Parameter(rt.from_numpy(rand(s, seed + i), backend=backend), name=f"p{i}")
        for i, s in enumerate(shapes)
    ]


def set_grads(params, arrays) -> None:
    for p, a in zip(params, arrays):
        p.grad = None if a is None else rt.from_numpy(np.asarray(a, np.float32), backend=p.backend)


def grads_for(shapes, step, scale=1.0) -> list[np.ndarray]:
    return [rand(s, 1000 * step + i, scale) for i, s in enumerate(shapes)]


def values(params) -> list[np.ndarray]:
    return [np.array(p.value.numpy(), copy=True) for p in params]


def same_bits(a, b) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


def state_bits(opt) -> bytes:
    """Every step count and moment of an optimizer, as bytes."""
    sd = opt.state_dict()
    parts = [str(sd["step"]).encode()]
    for index, s in sorted(sd["state"].items()):
        parts += [
            str((index, s["step"])).encode(),
            s["exp_avg"].tobytes(),
            s["exp_avg_sq"].tobytes(),
        ]
    return b"|".join(parts)


class TextbookAdam:
    """Adam / AdamW in float64, straight from the equations, one parameter at a time."""

    def __init__(self, p, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
        self.p = np.asarray(p, np.float64).copy()
        self.m = np.zeros_like(self.p)
        self.v = np.zeros_like(self.p)
        self.t = 0
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.wd, self.decoupled = weight_decay, decoupled

    def step(self, g, scale=1.0):
        g = np.asarray(g, np.float64) * scale
        self.t += 1
        if self.decoupled:
            self.p = self.p * (1 - self.lr * self.wd)
        else:
            g = g + self.wd * self.p
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        self.p = self.p - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        return self.p
