"""The transactional Adam / AdamW update.

Each parameter's moment pages are gathered into contiguous scratch buffers
(device copies), candidates are computed there with a per-call non-finite flag,
and the flag is read back (one synchronization per step). Only when every
candidate is finite are parameters and pages overwritten, again by device
copies; otherwise nothing has changed and the first bad parameter is returned.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, f32bits, groups_for
from riftco.tensor.plugin import DType

_F32 = DType.float32
_CLEAR = 0xFFFFFFFF


def _coefficients(lr, beta1, beta2, eps, wd, decoupled, step, grad_scale) -> list[int]:
    # As the CPU kernel: float64 scalars, each rounded once to float32.
    bc1 = 1.0 - beta1 ** float(step)
    bc2 = 1.0 - beta2 ** float(step)
    return [
        f32bits(grad_scale),
        f32bits(0.0 if decoupled else wd),
        f32bits(1.0 - lr * wd),
        int(decoupled and wd != 0.0),
        f32bits(1.0 - beta1),
        f32bits(beta2),
        f32bits(1.0 - beta2),
        f32bits(-(lr / bc1)),
        f32bits(np.sqrt(bc2)),
        f32bits(eps),
    ]


def _pages_fit(name: str, pages: Sequence[Storage], size: int, page_size: int, i: int) -> None:
    counts = [p.count for p in pages]
    expected = [min(page_size, size - s) for s in range(0, size, page_size)] or [0]
    if counts != expected:
        raise GpuError(
            f"adam_update: parameter {i} has {size} elements; its {name} pages hold {counts}, "
            f"expected {expected} for pages of {page_size}"
        )


def adam_update(
    rt: Runtime,
    params,
    grads,
    m,
    v,
    sizes,
    page_size,
    lr,
    beta1,
    beta2,
    eps,
    weight_decay,
    decoupled,
    step,
    grad_scale,
) -> int | None:
    count = len(params)
    lists = (grads, m, v, sizes, lr, beta1, beta2, eps, weight_decay, step)
    if any(len(x) != count for x in lists):
        raise GpuError(f"adam_update: argument lists disagree in length with {count} parameters")
    if page_size <= 0:
        raise GpuError(f"adam_update: page size must be positive, found {page_size}")
    flag = rt.upload_words([_CLEAR], DType.bool)
    staged = []
    for i in range(count):
        n = int(sizes[i])
        if params[i].count != n or grads[i].count != n:
            raise GpuError(
                f"adam_update: parameter {i} should have {n} elements, found {params[i].count} "
                f"and a gradient of {grads[i].count}"
            )
        if int(step[i]) < 1:
            raise GpuError(f"adam_update: step counts from 1, found {step[i]} for parameter {i}")
        _pages_fit("first-moment", m[i], n, page_size, i)
        _pages_fit("second-moment", v[i], n, page_size, i)
        if n == 0:
            continue
        m2, v2, p2 = rt.empty(n, _F32), rt.empty(n, _F32), rt.empty(n, _F32)
        for pages, joined in ((m[i], m2), (v[i], v2)):
            at = 0
            for page in pages:
                rt.copy(page, joined, page.count, 0, at)
                at += page.count
        coefficients = _coefficients(
            float(lr[i]), float(beta1[i]), float(beta2[i]), float(eps[i]),
            float(weight_decay[i]), bool(decoupled), int(step[i]), float(grad_scale),
        )  # fmt: skip
        rt.run(
            rt.kernel("adam"),
            [params[i], grads[i], m2, v2, p2, flag],
            [n, i, *coefficients],
            groups_for(n),
        )
        staged.append((i, m2, v2, p2))
    (first,) = rt.device.read(flag.buffer, 4).view(np.uint32)
    if first != _CLEAR:
        return int(first)
    for i, m2, v2, p2 in staged:
        rt.copy(p2, params[i], p2.count)
        for pages, joined in ((m[i], m2), (v[i], v2)):
            at = 0
            for page in pages:
                rt.copy(joined, page, page.count, at, 0)
                at += page.count
    return None
