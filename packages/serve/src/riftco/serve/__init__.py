"""riftco.serve: paged key/value caches, continuous batching and an OpenAI-compatible server."""

from .app import create_app
from .batch_engine import BatchEngine
from .caches import ContiguousKvCache, PagedKvCachePool
from .config import ServerConfig
from .engine import (
    ChatMessage,
    Engine,
    EngineStats,
    Finished,
    GenerationRequest,
    GenerationStream,
    SamplingOptions,
    TextDelta,
)
from .errors import (
    CacheError,
    GenerationFailed,
    InvalidField,
    ModelNotFound,
    NotReady,
    Overloaded,
    PoolExhausted,
    RequestError,
    ServeError,
    UnsupportedParameter,
)

__version__ = "0.1.0"

__all__ = [
    "BatchEngine",
    "CacheError",
    "ChatMessage",
    "ContiguousKvCache",
    "Engine",
    "EngineStats",
    "Finished",
    "GenerationFailed",
    "GenerationRequest",
    "GenerationStream",
    "InvalidField",
    "ModelNotFound",
    "NotReady",
    "Overloaded",
    "PagedKvCachePool",
    "PoolExhausted",
    "RequestError",
    "SamplingOptions",
    "ServeError",
    "ServerConfig",
    "TextDelta",
    "UnsupportedParameter",
    "create_app",
]
