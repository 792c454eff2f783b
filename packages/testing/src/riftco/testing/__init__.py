"""riftco.testing: test support for riftco packages, shipped apart from them.

Production wheels carry no test code and do not need pytest; a package's ``test``
extra installs ``riftco-testing`` instead.

A backend plugin's device tests are two calls:

- ``run_backend_suite(name)``: riftco-tensor's whole op suite on that backend, in a
  subprocess (riftco.testing.suite);
- ``check_model_against_cpu(name)``: a tiny transformer's training step on that backend
  against the CPU's (riftco.testing.model_check);

with ``run_checks(path)`` for the backend's own ``check_*.py`` files. The other modules
each serve the package they name:

- :mod:`riftco.testing.tensor`: ``NumpyReferenceBackend`` (a second backend whose
  every capability is a numpy formula), ``extra_entry_points`` and the ``backend``
  pytest fixture (importing it builds the fixture from discovery);
- :mod:`riftco.testing.serve`: ``ScriptedEngine``, a deterministic engine for the
  HTTP layer (extra ``serve``);
- :mod:`riftco.testing.llamacpp`: ``llamacpp_logits``, a float64 forward that reads a
  GGUF file the way llama.cpp does (needs ``gguf``).
"""

__version__ = "0.1.0"

from riftco.testing.model_check import Tolerances, check_model_against_cpu
from riftco.testing.suite import (
    PytestOutcome,
    available_backend,
    run_backend_suite,
    run_checks,
    unavailable_reason,
)

__all__ = [
    "PytestOutcome",
    "Tolerances",
    "available_backend",
    "check_model_against_cpu",
    "run_backend_suite",
    "run_checks",
    "unavailable_reason",
]
