"""riftco.testing: test support for riftco packages, shipped apart from them.

Production wheels carry no test code and do not need pytest; a package's ``test``
extra installs ``riftco-testing`` instead. Each module serves the package it names:

- :mod:`riftco.testing.tensor`: ``NumpyReferenceBackend`` (a second backend whose
  every capability is a numpy formula), ``extra_entry_points`` and the ``backend``
  pytest fixture;
- :mod:`riftco.testing.serve`: ``ScriptedEngine``, a deterministic engine for the
  HTTP layer (extra ``serve``);
- :mod:`riftco.testing.llamacpp`: ``llamacpp_logits``, a float64 forward that reads a
  GGUF file the way llama.cpp does (needs ``gguf``).
"""

__version__ = "0.1.0"
