"""Which adapter each backend name would use, or why there is none.

``metal`` drives Apple GPUs and needs macOS; ``vulkan`` needs a Vulkan loader
(``libvulkan.so.1``, ``vulkan-1.dll``, or MoltenVK's ``libvulkan.1.dylib``) and
at least one installable client driver. When several adapters exist, a
discrete GPU is preferred to an integrated one, then a virtual one, then a
software rasterizer running on the host (Mesa's lavapipe, ``llvmpipe``);
``RIFTCO_WGPU_ADAPTER`` picks one by index or by a substring of its name.

A software adapter is chosen only when nothing else exists, and the backend
then declares ``runs_on_host``: usable by name (``backend="vulkan"``), never
picked by ``auto``.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from riftco.tensor.plugin import BackendUnavailable

ADAPTER_VAR = "RIFTCO_WGPU_ADAPTER"
#: Preference among device types (lower first).
_RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "other": 3, "cpu": 4}
_LOADERS = {
    "linux": ("libvulkan.so.1", "libvulkan.so"),
    "win32": ("vulkan-1.dll",),
    "darwin": ("libvulkan.1.dylib", "libMoltenVK.dylib"),
}
DRIVER_HINT = (
    "install your GPU's Vulkan driver, or Mesa's software device for CI "
    "(Debian/Ubuntu: apt-get install mesa-vulkan-drivers libvulkan1)"
)


@dataclass(frozen=True)
class Adapter:
    """One adapter as wgpu reports it (no device opened)."""

    api: str
    index: int
    name: str
    device_type: str
    driver: str
    driver_info: str
    shader_f16: bool
    #: wgpu's SUBGROUP feature and the subgroup sizes (min, max) the adapter reports.
    subgroup: bool = False
    subgroup_sizes: tuple[int, int] = (0, 0)
    #: wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX feature.
    cooperative_matrix: bool = False
    #: Every cooperative-matrix configuration the adapter reports (``16x16x16 f16->f32``).
    cooperative_matrices: tuple[str, ...] = ()
    #: The one the ``coop`` matmul path would use, or None (none square of 8 or 16 with
    #: an f32 accumulator, f16 inputs needing SHADER_F16 too, or the feature withheld).
    cooperative_matrix_config: str | None = None

    def features(self) -> str:
        """The optional shader features the adapter offers, as text."""
        found = []
        if self.shader_f16:
            found.append("f16")
        if self.subgroup:
            lo, hi = self.subgroup_sizes
            found.append(f"subgroups of {lo}" if lo == hi else f"subgroups of {lo}-{hi}")
        if self.cooperative_matrix:
            listed = ", ".join(self.cooperative_matrices)
            found.append(f"cooperative matrices ({listed})" if listed else "cooperative matrices")
        elif self.cooperative_matrices:
            listed = ", ".join(self.cooperative_matrices)
            found.append(f"cooperative matrices withheld by wgpu ({listed})")
        return ", ".join(found) or "none"

    @property
    def runs_on_host(self) -> bool:
        """A software rasterizer computing on the host CPU (lavapipe, llvmpipe, SwiftShader)."""
        return self.device_type == "cpu"

    def describe(self) -> str:
        driver = " ".join(p for p in (self.driver, self.driver_info) if p)
        kind = "software device on the host CPU" if self.runs_on_host else f"{self.device_type} GPU"
        return f"{self.name} ({kind}, {self.api} adapter {self.index}{', ' + driver if driver else ''})"


def vulkan_loader(platform: str | None = None) -> str | None:
    """The Vulkan loader library the dynamic linker would find, or None."""
    platform = platform or sys.platform
    names = _LOADERS.get(platform, _LOADERS["linux"])
    for name in names:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    found = ctypes.util.find_library("vulkan")
    return found or None


#: What Vulkan drivers wrote to stderr while adapters were enumerated or a device
#: opened (Mesa's WSI prints "error: XDG_RUNTIME_DIR is invalid or not set" on a
#: headless machine): kept here, and in ``driver_messages()``, instead of reaching
#: the terminal of a command that never asked for a GPU.
_DRIVER_MESSAGES: list[str] = []
_QUIET = threading.Lock()


def driver_messages() -> tuple[str, ...]:
    """The lines drivers wrote to stderr during this process's adapter enumeration."""
    return tuple(_DRIVER_MESSAGES)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[list[str]]:
    """Run the body with file descriptor 2 redirected to a private temporary file;
    the lines written there are appended to the list yielded (and to
    ``driver_messages()``). Native code writes straight to the descriptor, so
    ``sys.stderr`` alone would not catch it. Writes from other threads in that
    window are captured too, not lost. Without a usable descriptor 2 (a
    redirected ``sys.stderr`` in some embedders) the body runs as it is."""
    lines: list[str] = []
    with _QUIET:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield lines
            return
        try:
            with tempfile.TemporaryFile() as sink:
                os.dup2(sink.fileno(), 2)
                try:
                    yield lines
                finally:
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        sys.stderr.flush()
                    os.dup2(saved, 2)
                    sink.seek(0)
                    text = sink.read(1 << 16).decode("utf-8", "replace")
                    lines.extend(line for line in text.splitlines() if line.strip())
                    _DRIVER_MESSAGES.extend(lines)
        finally:
            os.close(saved)


def _as_adapters(api: str, raw: Sequence[dict[str, Any]]) -> list[Adapter]:
    return [
        Adapter(
            api,
            int(d["index"]),
            str(d["name"]),
            str(d["device_type"]),
            str(d["driver"]),
            str(d["driver_info"]),
            bool(d["shader_f16"]),
            bool(d.get("subgroup", False)),
            tuple(int(x) for x in d.get("subgroup_sizes", (0, 0)))[:2],  # type: ignore[arg-type]
            bool(d.get("cooperative_matrix", False)),
            tuple(str(c) for c in d.get("cooperative_matrices", ())),
            None
            if d.get("cooperative_matrix_config") is None
            else str(d["cooperative_matrix_config"]),
        )
        for d in raw
    ]


def choose(adapters: Sequence[Adapter], wanted: str | None) -> Adapter:
    """The adapter to open: the one ``wanted`` names (an index or a name substring),
    else the best by device type (then enumeration order)."""
    if wanted:
        if wanted.isdigit():
            for a in adapters:
                if a.index == int(wanted):
                    return a
        else:
            for a in adapters:
                if wanted.lower() in a.name.lower():
                    return a
        listed = "; ".join(f"{a.index}: {a.name}" for a in adapters)
        raise BackendUnavailable(
            f"{ADAPTER_VAR}={wanted!r} names no {adapters[0].api} adapter (found {listed})"
        )
    return min(adapters, key=lambda a: (_RANK.get(a.device_type, 3), a.index))


def find_adapter(
    api: str,
    enumerate_adapters: Callable[[str], Sequence[dict[str, Any]]],
    *,
    platform: str | None = None,
    loader: Callable[[], str | None] = vulkan_loader,
) -> Adapter:
    """The adapter the ``api`` backend would use; ``BackendUnavailable`` says why none."""
    platform = platform or sys.platform
    if api == "metal":
        if platform != "darwin":
            raise BackendUnavailable(
                f"Metal needs macOS (this is {platform}); on this machine use the vulkan "
                "backend with a Vulkan driver"
            )
        found = _as_adapters(api, enumerate_adapters(api))
        if not found:
            raise BackendUnavailable("wgpu found no Metal device on this Mac")
    else:
        library = loader()
        if library is None:
            raise BackendUnavailable(f"no Vulkan loader (libvulkan) found; {DRIVER_HINT}")
        found = _as_adapters(api, enumerate_adapters(api))
        if not found:
            said = driver_messages()
            raise BackendUnavailable(
                f"the Vulkan loader ({library}) found no adapter: no Vulkan driver (ICD) is "
                f"installed or none can open this GPU; {DRIVER_HINT}"
                + (f" (the drivers said: {' | '.join(dict.fromkeys(said))})" if said else "")
            )
    return choose(found, os.environ.get(ADAPTER_VAR))


__all__ = [
    "ADAPTER_VAR",
    "Adapter",
    "choose",
    "driver_messages",
    "find_adapter",
    "quiet_stderr",
    "vulkan_loader",
]
