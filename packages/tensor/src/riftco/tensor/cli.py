"""`riftco backends`: list every backend, available or not, and why."""

from __future__ import annotations

import argparse
import json


def main(argv: list[str]) -> int:
    """List every backend, available or not, with the reason."""
    parser = argparse.ArgumentParser(prog="riftco backends", description=main.__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    from riftco.tensor import backends, get_backend

    infos = backends()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2, default=list))
        return 0
    try:
        chosen = get_backend().name
    except Exception as exc:
        chosen = f"none ({exc})"
    width = max((len(i.name) for i in infos), default=4)
    for info in infos:
        status = "available" if info.available else "unavailable"
        detail = info.description if info.available else info.reason
        print(f"{info.name:<{width}}  {status:<11}  {detail}  [{info.source}]")
    print(f"default (RIFTCO_BACKEND or auto): {chosen}")
    return 0
