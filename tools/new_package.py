"""Start a new pure-Python package from templates/package: new_package.py NAME."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(name: str) -> int:
    dest = ROOT / "packages" / name
    if dest.exists():
        print(f"new_package: {dest} already exists", file=sys.stderr)
        return 1
    shutil.copytree(ROOT / "templates" / "package", dest)
    (dest / "src" / "riftco" / "NAME").rename(dest / "src" / "riftco" / name)
    for path in dest.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".toml", ".md"}:
            path.write_text(path.read_text().replace("NAME", name))
    print(f"created {dest.relative_to(ROOT)}; add a [testenv:test-{name}] to tox.ini")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
