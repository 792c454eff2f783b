"""Every tensor op, defined once: shape and dtype checks, output shape, dispatch.

Each submodule lists its public ops in its ``__all__``; this package re-exports
them, and ``riftco.tensor`` re-exports this package's ``__all__``: that one list
per submodule is the only place an op is named for export.
"""

from riftco.tensor.ops import (
    blockquant,
    decode,
    elementwise,
    fused,
    indexing,
    inplace,
    layout,
    linalg,
    linear_layer,
    paged,
    projected,
    quantized,
    reduction,
)
from riftco.tensor.ops._common import broadcast_shapes, check_same_backend
from riftco.tensor.ops.blockquant import *  # noqa: F403
from riftco.tensor.ops.decode import *  # noqa: F403
from riftco.tensor.ops.elementwise import *  # noqa: F403
from riftco.tensor.ops.fused import *  # noqa: F403
from riftco.tensor.ops.indexing import *  # noqa: F403
from riftco.tensor.ops.inplace import *  # noqa: F403
from riftco.tensor.ops.layout import *  # noqa: F403
from riftco.tensor.ops.linalg import *  # noqa: F403
from riftco.tensor.ops.linear_layer import *  # noqa: F403
from riftco.tensor.ops.paged import *  # noqa: F403
from riftco.tensor.ops.projected import *  # noqa: F403
from riftco.tensor.ops.quantized import *  # noqa: F403
from riftco.tensor.ops.reduction import *  # noqa: F403

__all__: list[str] = []
__all__ += blockquant.__all__
__all__ += decode.__all__
__all__ += elementwise.__all__
__all__ += fused.__all__
__all__ += indexing.__all__
__all__ += inplace.__all__
__all__ += layout.__all__
__all__ += linalg.__all__
__all__ += linear_layer.__all__
__all__ += paged.__all__
__all__ += projected.__all__
__all__ += quantized.__all__
__all__ += reduction.__all__
__all__ += ["broadcast_shapes", "check_same_backend"]  # helpers, not re-exported at the top
