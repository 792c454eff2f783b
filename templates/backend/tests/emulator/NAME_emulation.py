"""The emulator hook: the NAME backend's own ops on a host stand-in for the device, for
CI machines without one (tests only; loaded as a pytest plugin, ``-p NAME_emulation``).

It registers the backend ``NAMEemu``: the same ``PLUGINCLASS`` and its ops over
``HostDevice`` (host memory, the kernels built for the host). Replace ``HostDevice``
here by whatever runs the device's kernels on the host (a compiler for the kernel
sources, an interpreter, a software device), so the whole op suite checks them.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from riftco.backends.NAME.backend import PLUGINCLASS
from riftco.backends.NAME.device import HostDevice
from riftco.tensor.plugin import ENTRY_POINT_GROUP
from riftco.testing.discovery import add_entry_points


class EmulatedBackend(PLUGINCLASS):
    name = "NAMEemu"
    runs_on_host = True

    def describe(self) -> str:
        return "the NAME backend's kernels on the host (tests only)"


def create_backend() -> EmulatedBackend:
    return EmulatedBackend(HostDevice())


ENTRY_POINT = EntryPoint(
    name="NAMEemu", value="NAME_emulation:create_backend", group=ENTRY_POINT_GROUP
)

# Loaded with -p, before any conftest builds the `backend` fixture from discovery.
add_entry_points(ENTRY_POINT)
