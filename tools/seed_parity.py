"""Regenerate the original riftco-transformer's files live and check they load here.

For each seed, the fixture scripts beside the tests write bundles (byte and BPE
tokenizers, fully fine-tuned and LoRA-merged children), exports and checkpoints
(full, LoRA, packed QLoRA) with random configurations, using the installed
``riftco-transformer`` package; then the same tests that check the committed
fixtures run against the new files. Used by ``tox -e seed-parity``.

    python tools/seed_parity.py              # three random seeds (printed)
    python tools/seed_parity.py 4 17 99      # these seeds
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ROOT / "packages/interchange/tests/original/make_fixtures.py"
CHECKPOINTS = ROOT / "packages/train/tests/original/make_checkpoints.py"
TESTS = [
    ROOT / "packages/interchange/tests/test_original.py",
    ROOT / "packages/train/tests/test_original_checkpoint.py",
]


def main(argv: list[str]) -> int:
    seeds = [int(s) for s in argv] or [random.SystemRandom().randrange(1 << 20) for _ in range(3)]
    print(f"seed-parity: seeds {seeds}", flush=True)
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix=f"seed-parity-{seed}-") as folder:
            bundles, checkpoints = Path(folder, "bundles"), Path(folder, "checkpoints")
            for script, out in ((BUNDLES, bundles), (CHECKPOINTS, checkpoints)):
                args = [
                    sys.executable,
                    str(script),
                    "--out",
                    str(out),
                    "--seed",
                    str(seed),
                    "--random",
                ]
                subprocess.run(args, check=True)
            env = dict(
                os.environ,
                RIFTCO_ORIGINAL_FIXTURES=str(bundles),
                RIFTCO_ORIGINAL_CHECKPOINTS=str(checkpoints),
            )
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *map(str, TESTS),
            ]
            print(f"seed-parity: seed {seed}", flush=True)
            if subprocess.run(command, env=env).returncode != 0:
                print(f"seed-parity: FAILED with seed {seed}", flush=True)
                return 1
    print(f"seed-parity: all {len(seeds)} seeds passed", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
