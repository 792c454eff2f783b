"""Data-parallel training: communicators, flat bucketed gradients, the step's layout.

mpi4py is imported only by ``riftco.train.distributed.mpi`` (``mpi_world()``), so this
package works without it.
"""

from __future__ import annotations

from riftco.train.distributed.communicator import (
    Communicator,
    DistributedError,
    SimulatedRank,
    SimulatedWorld,
    SingleProcess,
    chunk_bounds,
)
from riftco.train.distributed.data_parallel import (
    DataParallel,
    check_resume_layout,
    check_same_parameters,
)
from riftco.train.distributed.gradients import (
    DEFAULT_BUCKET_BYTES,
    REDUCTIONS,
    FlatGradients,
    GradientReducer,
)

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "REDUCTIONS",
    "Communicator",
    "DataParallel",
    "DistributedError",
    "FlatGradients",
    "GradientReducer",
    "SimulatedRank",
    "SimulatedWorld",
    "SingleProcess",
    "check_resume_layout",
    "check_same_parameters",
    "chunk_bounds",
]
