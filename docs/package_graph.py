"""The package graph of the architecture page, drawn as an inline SVG when the site is
built (no script, no network: it renders wherever the page is opened).

Packages sit in layers, dependents above what they depend on; a solid arrow is a
dependency every install gets, a dotted one comes with an extra (its name at the arrow's
tail). A solid arrow that a longer solid path already implies is left out, so the layers
read; ``test`` extras are left out too: they are test support, not a layer.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

BOX_HEIGHT = 28
LAYER_GAP = 64
BOX_GAP = 18
CHAR_WIDTH = 7.4
MARGIN = 12


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    #: the extra that brings the dependency, or None for a plain dependency
    extra: str | None = None


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1).lower().replace("_", "-") if match else ""


def _reaches(edges: dict[str, set[str]], start: str, goal: str, skip: tuple[str, str]) -> bool:
    """Whether ``goal`` is reachable from ``start`` without the edge ``skip``."""
    seen, stack = set(), [start]
    while stack:
        here = stack.pop()
        for there in edges.get(here, ()):
            if (here, there) == skip or there in seen:
                continue
            if there == goal:
                return True
            seen.add(there)
            stack.append(there)
    return False


def graph_edges(projects: list[dict[str, Any]]) -> tuple[list[str], list[Edge]]:
    """The distributions' names and the arrows between them (see the module docstring)."""
    names = sorted(project["name"] for project in projects)
    by_name = {project["name"]: project for project in projects}
    solid: dict[str, set[str]] = {name: set() for name in names}
    optional: list[Edge] = []
    for name in names:
        project = by_name[name]
        for requirement in project.get("dependencies", []):
            target = requirement_name(requirement)
            if target in solid and target != name:
                solid[name].add(target)
        extras = project.get("optional-dependencies", {})
        for extra in sorted(extras):
            if extra == "test":
                continue
            for requirement in extras[extra]:
                target = requirement_name(requirement)
                if target in solid and target != name:
                    optional.append(Edge(name, target, extra))
    edges = [
        Edge(name, target)
        for name in names
        for target in sorted(solid[name])
        if not _reaches(solid, name, target, skip=(name, target))
    ]
    edges += [e for e in optional if e.target not in solid[e.source]]
    return names, edges


def _layers(names: list[str], edges: list[Edge]) -> list[list[str]]:
    """Layer 0 holds what depends on nothing; each package sits one layer above the
    highest thing it depends on (extras included, so every arrow points down)."""
    depends: dict[str, set[str]] = {name: set() for name in names}
    for edge in edges:
        depends[edge.source].add(edge.target)
    depth: dict[str, int] = {}

    def level(name: str, visiting: frozenset[str] = frozenset()) -> int:
        if name not in depth:
            if name in visiting:
                raise ValueError(f"the package dependencies form a cycle through {name}")
            below = [level(d, visiting | {name}) for d in depends[name]]
            depth[name] = 1 + max(below) if below else 0
        return depth[name]

    for name in names:
        level(name)
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for name in names:
        layers[depth[name]].append(name)
    # Order each layer by where what it depends on sits (barycenters), bottom up.
    position = {name: float(i) for i, name in enumerate(layers[0])} if layers else {}
    for layer in layers[1:]:
        layer.sort(
            key=lambda n: (
                sum(position[d] for d in depends[n]) / len(depends[n]) if depends[n] else 0.0,
                n,
            )
        )
        for i, name in enumerate(layer):
            position[name] = float(i)
    return layers


def svg(projects: list[dict[str, Any]]) -> str:
    """The graph as one line of inline SVG (raw HTML for the Markdown page)."""
    names, edges = graph_edges(projects)
    layers = _layers(names, edges)
    widths = {name: len(name) * CHAR_WIDTH + 20 for name in names}
    row_widths = [sum(widths[n] for n in layer) + BOX_GAP * (len(layer) - 1) for layer in layers]
    width = max(row_widths, default=0) + 2 * MARGIN
    height = len(layers) * BOX_HEIGHT + (len(layers) - 1) * LAYER_GAP + 2 * MARGIN
    box: dict[str, tuple[float, float]] = {}  # name -> (left, top)
    for index, layer in enumerate(layers):
        top = MARGIN + (len(layers) - 1 - index) * (BOX_HEIGHT + LAYER_GAP)
        left = (width - row_widths[index]) / 2
        for name in layer:
            box[name] = (left, top)
            left += widths[name] + BOX_GAP
    parts = [
        f'<svg class="riftco-package-graph" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="100%" role="img" '
        'aria-label="The packages and their dependencies">',
        '<defs><marker id="riftco-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0L10,5L0,10z" fill="currentColor"/></marker></defs>',
    ]
    centre = {name: box[name][0] + widths[name] / 2 for name in names}

    def port(name: str, others: list[str], other: str) -> float:
        """Where on ``name``'s edge the arrow to or from ``other`` meets it: the arrows
        spread along the middle half of the box, in the order of their other ends."""
        ordered = sorted(others, key=lambda o: (centre[o], o))
        share = (ordered.index(other) + 1) / (len(ordered) + 1)
        return box[name][0] + widths[name] * (0.25 + 0.5 * share)

    outgoing = {name: [e.target for e in edges if e.source == name] for name in names}
    incoming = {name: [e.source for e in edges if e.target == name] for name in names}
    for edge in edges:
        x1 = port(edge.source, outgoing[edge.source], edge.target)
        y1 = box[edge.source][1] + BOX_HEIGHT
        x2 = port(edge.target, incoming[edge.target], edge.source)
        y2 = box[edge.target][1]
        relation = (
            f"{edge.source} depends on {edge.target}"
            if edge.extra is None
            else f"{edge.source}[{edge.extra}] depends on {edge.target}"
        )
        dash = ' stroke-dasharray="4 3"' if edge.extra else ""
        parts.append(
            f'<g><title>{html.escape(relation)}</title><line x1="{x1:.1f}" y1="{y1:.1f}" '
            f'x2="{x2:.1f}" y2="{y2:.1f}" stroke="currentColor" stroke-opacity="0.55"'
            f'{dash} marker-end="url(#riftco-arrow)"/></g>'
        )
        if edge.extra:
            parts.append(
                f'<text x="{x1 + (x2 - x1) * 0.18:.1f}" y="{y1 + (y2 - y1) * 0.18 + 4:.1f}" '
                f'font-size="11" fill="currentColor" font-style="italic" '
                f'paint-order="stroke" stroke="var(--md-default-bg-color, white)" '
                f'stroke-width="3">[{html.escape(edge.extra)}]</text>'
            )
    for name in names:
        left, top = box[name]
        parts.append(
            f'<g><title>{html.escape(name)}</title><rect x="{left:.1f}" y="{top:.1f}" '
            f'width="{widths[name]:.1f}" height="{BOX_HEIGHT}" rx="5" '
            'fill="var(--md-code-bg-color, #f5f5f5)" stroke="currentColor" stroke-opacity="0.6"/>'
            f'<text x="{left + widths[name] / 2:.1f}" y="{top + BOX_HEIGHT / 2 + 4.5:.1f}" '
            'text-anchor="middle" font-size="13" font-family="monospace" fill="currentColor">'
            f"{html.escape(name)}</text></g>"
        )
    parts.append("</svg>")
    return '<div class="riftco-package-graph">' + "".join(parts) + "</div>"
