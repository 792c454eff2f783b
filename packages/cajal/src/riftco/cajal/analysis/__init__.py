"""riftco.cajal.analysis: interpretation tools over captured representations, in the
standard library and numpy (the extra ``analysis``): named representation matrices,
deterministic covariance PCA, row-wise interventions and paired ablation statistics."""

from __future__ import annotations

from riftco.cajal.analysis.ablation import (
    MAX_EXACT_EXAMPLES,
    METHODS,
    AblationStatistics,
    paired_ablation,
)
from riftco.cajal.analysis.pca import PCA
from riftco.cajal.analysis.representations import (
    RepresentationMatrix,
    project_out_rows,
    replace_rows,
    representation_matrix,
    steer_rows,
)

__all__ = [
    "MAX_EXACT_EXAMPLES",
    "METHODS",
    "PCA",
    "AblationStatistics",
    "RepresentationMatrix",
    "paired_ablation",
    "project_out_rows",
    "replace_rows",
    "representation_matrix",
    "steer_rows",
]
