"""``--self-test``: checks of the geometry against independent computations and exact
results, of the PNG export, and of the page (self-contained, served locally).

Each check prints PASS or FAIL with what it compared; the exit status is 0 only when
every check passed.
"""

from __future__ import annotations

import itertools
import math
import re
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

from labs.superposition.geometry import (
    DIMENSIONS,
    angle_stats,
    expected_angle_sd,
    expected_band_fraction,
    pairwise_angles,
    query_angles,
    superpose,
    unit_vectors,
)

EXTERNAL = re.compile(
    r"""(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|src=["']?(?:https?:|//)""", re.I
)


def check_unit_and_seeded() -> str:
    v = unit_vectors(50, 16, 3)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-12), "a vector is not of unit length"
    assert np.array_equal(v, unit_vectors(50, 16, 3)), "the same seed gave other vectors"
    assert not np.array_equal(v, unit_vectors(50, 16, 4)), "another seed gave the same vectors"
    return "50 vectors in 16-d have unit length; the seed fixes them"


def check_angles_by_loop() -> str:
    v = unit_vectors(12, 5, 1)
    looped = [
        math.degrees(math.acos(max(-1.0, min(1.0, float(sum(a * b for a, b in zip(v[i], v[j])))))))
        for i in range(12)
        for j in range(i + 1, 12)
    ]
    assert np.allclose(pairwise_angles(v), looped, atol=1e-9), "pairwise angles differ from a loop"
    assert np.allclose(query_angles(v, 3), [looped_angle(v, 3, j) for j in range(12) if j != 3])
    return "pairwise and query angles equal a plain-Python loop (66 pairs)"


def looped_angle(v: np.ndarray, i: int, j: int) -> float:
    return math.degrees(math.acos(max(-1.0, min(1.0, float(np.dot(v[i], v[j]))))))


def check_narrowing() -> str:
    spreads = [angle_stats(pairwise_angles(unit_vectors(150, d, d)), d, 55).sd for d in DIMENSIONS]
    assert all(a > b for a, b in itertools.pairwise(spreads)), f"spread not falling: {spreads}"
    for d, sd in zip(DIMENSIONS, spreads):
        expected = expected_angle_sd(d)
        assert abs(sd / expected - 1) < 0.1, f"d={d}: sd {sd} vs exact {expected}"
    return "angle spread falls with d as the exact density says: " + ", ".join(
        f"{d}:{s:.2f}" for d, s in zip(DIMENSIONS, spreads)
    )


def check_band_matches_exact() -> str:
    lines = []
    for d, theta in ((3, 55.0), (8, 70.0), (16, 80.0), (64, 85.0)):
        angles = pairwise_angles(unit_vectors(200, d, 11 + d))
        stats = angle_stats(angles, d, theta)
        # pairs are not independent; 5 binomial sigmas over the vector count is generous
        sigma = math.sqrt(stats.expected_in_band * (1 - stats.expected_in_band) / 200)
        assert abs(stats.in_band - stats.expected_in_band) < 5 * sigma + 1e-3, (
            f"d={d}: {stats.in_band} in band, expected {stats.expected_in_band}"
        )
        lines.append(f"d={d} theta={theta:g}: {stats.in_band:.3f} vs {stats.expected_in_band:.3f}")
    exact3 = expected_band_fraction(60.0, 3)  # uniform cos in 3-d: P(|cos| <= 1/2) = 1/2
    assert abs(exact3 - 0.5) < 1e-6, f"3-d band of 60 degrees: {exact3}, expected 0.5"
    return "band fraction matches the exact density (" + "; ".join(lines) + "); 3-d exact 0.5"


def check_orthogonal_recovery() -> str:
    few = superpose(256, 8, 3, 0.6, 5)
    assert few.recovered, (
        f"8 features in 256-d with 3 active: decoded {few.decoded} of {few.active}"
    )
    crowded = superpose(8, 400, 40, 0.6, 5)
    assert not crowded.recovered, "400 features in 8-d with 40 active decoded exactly"
    assert np.isclose(few.values[list(few.active)].mean(), 1.0, atol=0.3)
    return "sparse features are recovered, crowded ones are not"


def check_png_export() -> str:
    from matplotlib.image import imread

    from labs.superposition.run import export_png, measure, parser

    args = parser().parse_args(["--profile", "smoke", "--dimensions", "3,64", "--vectors", "40"])
    with tempfile.TemporaryDirectory() as folder:
        path = export_png(measure(args), Path(folder) / "s.png")
        image = imread(path)
    height, width = image.shape[:2]
    ink = float((image[..., :3].mean(axis=2) < 0.9).mean())
    assert width > 800 and height > 500, f"image is {width}x{height}"
    assert ink > 0.03, f"only {ink:.1%} of the image is drawn on"
    return f"PNG export {width}x{height}, {ink:.0%} of pixels drawn"


def check_page_self_contained() -> str:
    from labs.superposition.serve import PAGE

    files = sorted(PAGE.glob("*"))
    for path in files:
        found = EXTERNAL.search(path.read_text(encoding="utf-8"))
        assert found is None, f"{path.name} refers outside the page: {found.group(0)!r}"
    html = (PAGE / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', html)
    assert scripts and all((PAGE / s).is_file() for s in scripts), f"scripts {scripts}"
    return f"{len(files)} page files refer to nothing outside the page ({', '.join(scripts)})"


def check_page_served() -> str:
    import threading

    from labs.superposition.serve import make_server

    server = make_server(0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with urllib.request.urlopen(base, timeout=10) as response:
            policy = response.headers["Content-Security-Policy"]
            body = response.read().decode("utf-8")
        with urllib.request.urlopen(base + "app.js", timeout=10) as response:
            script = response.read()
    finally:
        server.shutdown()
        server.server_close()
    assert "default-src 'self'" in policy and 'id="histogram"' in body and len(script) > 1000
    return f"page served on loopback with CSP {policy.split(';')[0]!r}"


CHECKS: list[Callable[[], str]] = [
    check_unit_and_seeded,
    check_angles_by_loop,
    check_narrowing,
    check_band_matches_exact,
    check_orthogonal_recovery,
    check_png_export,
    check_page_self_contained,
    check_page_served,
]


def self_test() -> int:
    failed = 0
    for check in CHECKS:
        name = check.__name__.removeprefix("check_").replace("_", " ")
        try:
            print(f"PASS {name}: {check()}")
        except Exception as exc:  # a self-test reports every failure and goes on
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}")
    print(f"{len(CHECKS) - failed}/{len(CHECKS)} checks passed")
    return 1 if failed else 0


__all__ = ["CHECKS", "self_test"]
