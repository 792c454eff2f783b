"""The jobs a model's capability list is made for (riftco.nn.capabilities), named apart
so that a layer can say what it needs for a job without importing the list's maker."""

from __future__ import annotations

#: The jobs a capability list is made for.
JOBS = ("train", "lora", "qlora", "generate", "serve")
#: The jobs that train (and so run backward and the optimizer).
TRAINING_JOBS = ("train", "lora", "qlora")

__all__ = ["JOBS", "TRAINING_JOBS"]
