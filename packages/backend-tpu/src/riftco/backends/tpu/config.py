"""How the PJRT client is created and programs compiled, from the environment.

- ``RIFTCO_PJRT_OPTIONS``: a JSON object of ``PJRT_Client_Create`` options, e.g.
  ``{"memory_fraction": 0.5, "visible_devices": [0, 1]}`` or
  ``{"allocator": "platform"}`` for XLA's GPU plugin, ``{"cpu_device_count": 2}``
  for its CPU plugin. Values are booleans, integers, numbers, strings or lists of
  integers. A GPU plugin gets ``preallocate: false`` unless ``preallocate`` or
  ``allocator`` is given (XLA would otherwise take 75% of every visible GPU).
- ``RIFTCO_PJRT_DETERMINISTIC``: ``0`` lets XLA:GPU use its faster
  nondeterministic scatters and reductions (default ``1``:
  ``xla_gpu_deterministic_ops``).
- ``RIFTCO_PJRT_CACHE``: the folder of compiled programs, or ``0`` (also
  ``off``) for none; by default ``$RIFTCO_CACHE_DIR/pjrt``, else
  ``$XDG_CACHE_HOME/riftco/pjrt``, else ``~/.cache/riftco/pjrt``.
- ``RIFTCO_PJRT_CACHE_MAX_MB``: its size bound (default 1024), least recently
  used programs removed first.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from riftco.tensor.plugin import BackendUnavailable

OPTIONS_VAR = "RIFTCO_PJRT_OPTIONS"
DETERMINISTIC_VAR = "RIFTCO_PJRT_DETERMINISTIC"
CACHE_VAR = "RIFTCO_PJRT_CACHE"
CACHE_MAX_VAR = "RIFTCO_PJRT_CACHE_MAX_MB"
DEFAULT_CACHE_MAX_MB = 1024
_OFF = ("0", "off", "false", "no", "none")
_ON = ("1", "on", "true", "yes")

OptionValue = bool | int | float | str | list[int]


@dataclass(frozen=True)
class PjrtConfig:
    """What ``_native.Device`` is given."""

    options: tuple[tuple[str, OptionValue], ...] = ()
    deterministic: bool = True
    cache_dir: Path | None = None
    cache_max_bytes: int = DEFAULT_CACHE_MAX_MB << 20


def _option(name: object, value: object) -> tuple[str, OptionValue]:
    if not isinstance(name, str) or not name:
        raise BackendUnavailable(f"{OPTIONS_VAR}: option names are strings, found {name!r}")
    if isinstance(value, (bool, int, str)):
        return name, value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BackendUnavailable(f"{OPTIONS_VAR}: {name} must be finite, found {value}")
        return name, value
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return name, list(value)
    raise BackendUnavailable(
        f"{OPTIONS_VAR}: {name} must be a boolean, integer, number, string or list of "
        f"integers, found {value!r}"
    )


def parse_options(text: str) -> tuple[tuple[str, OptionValue], ...]:
    """The options of a ``RIFTCO_PJRT_OPTIONS`` value (a JSON object)."""
    if not text.strip():
        return ()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackendUnavailable(
            f"{OPTIONS_VAR}: expected a JSON object such as "
            f'\'{{"memory_fraction": 0.5, "visible_devices": [0]}}\', found {text!r} ({exc})'
        ) from None
    if not isinstance(parsed, dict):
        raise BackendUnavailable(
            f"{OPTIONS_VAR}: expected a JSON object of option names and values, "
            f"found {type(parsed).__name__} {text!r}"
        )
    return tuple(_option(name, value) for name, value in parsed.items())


def _flag(env: Mapping[str, str], var: str, default: bool) -> bool:
    value = env.get(var, "").strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise BackendUnavailable(f"{var}: expected 1 or 0, found {env[var]!r}")


def default_cache_dir(env: Mapping[str, str]) -> Path | None:
    """``$RIFTCO_CACHE_DIR/pjrt``, ``$XDG_CACHE_HOME/riftco/pjrt`` or ``~/.cache/riftco/pjrt``."""
    if env.get("RIFTCO_CACHE_DIR"):
        return Path(env["RIFTCO_CACHE_DIR"]).expanduser() / "pjrt"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "riftco" / "pjrt"
    home = env.get("HOME")
    return Path(home) / ".cache" / "riftco" / "pjrt" if home else None


def from_env(environ: Mapping[str, str] | None = None) -> PjrtConfig:
    """The configuration the environment asks for; ``BackendUnavailable`` saying
    what was expected when a variable is malformed."""
    env = os.environ if environ is None else environ
    options = parse_options(env.get(OPTIONS_VAR, ""))
    deterministic = _flag(env, DETERMINISTIC_VAR, True)
    chosen = env.get(CACHE_VAR, "").strip()
    if chosen.lower() in _OFF:
        cache_dir = None
    elif chosen:
        cache_dir = Path(chosen).expanduser()
    else:
        cache_dir = default_cache_dir(env)
    raw_max = env.get(CACHE_MAX_VAR, "").strip()
    try:
        max_mb = int(raw_max) if raw_max else DEFAULT_CACHE_MAX_MB
    except ValueError:
        max_mb = 0
    if max_mb <= 0:
        raise BackendUnavailable(
            f"{CACHE_MAX_VAR}: expected a positive number of megabytes, found {raw_max!r}"
        )
    return PjrtConfig(options, deterministic, cache_dir, max_mb << 20)
