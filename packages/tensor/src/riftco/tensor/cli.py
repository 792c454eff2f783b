"""`riftco backends`: list every backend, available or not, and why; with each available
one's auto priority, the capabilities it implements as kernels, those riftco-tensor
composes from them on its device, and the missing ones."""

from __future__ import annotations

import argparse
import json


def main(argv: list[str]) -> int:
    """List every backend, available or not, with the reason, priority and capabilities."""
    parser = argparse.ArgumentParser(prog="riftco backends", description=main.__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--capabilities",
        action="store_true",
        help="list every capability each backend implements, not only the missing ones",
    )
    args = parser.parse_args(argv)
    from riftco.tensor import BACKEND_API_VERSION, CAPABILITIES, backends, get_backend

    infos = backends()
    if args.json:
        rows = [
            {**info.__dict__, "missing_capabilities": info.missing_capabilities} for info in infos
        ]
        print(json.dumps(rows, indent=2, default=list))
        return 0
    try:
        chosen = get_backend().name
    except Exception as exc:
        chosen = f"none ({exc})"
    width = max((len(i.name) for i in infos), default=4)
    api = ".".join(map(str, BACKEND_API_VERSION))
    for info in infos:
        if not info.available:
            print(f"{info.name:<{width}}  unavailable  {info.reason}  [{info.source}]")
            continue
        where = "host, by name only" if info.runs_on_host else f"priority {info.priority}"
        print(f"{info.name:<{width}}  available    {info.description}  [{info.source}; {where}]")
        pad = " " * (width + 2)
        native, total = len(info.capabilities), len(CAPABILITIES)
        print(
            f"{pad}native kernels: {native} of {total} (API {api}); dtypes: {' '.join(info.dtypes)}"
        )
        if info.composed:
            print(f"{pad}composed by riftco-tensor from its ops: {' '.join(info.composed)}")
        missing = info.missing_capabilities
        if missing:
            note = " (models decode op by op there)" if "decode_step" in missing else ""
            print(f"{pad}missing: {' '.join(missing)}{note}")
        if args.capabilities:
            print(f"{pad}implements: {' '.join(info.capabilities)}")
    print(f"default (RIFTCO_BACKEND or auto): {chosen}")
    return 0
