"""riftco.serve: paged key/value caches, continuous batching and an OpenAI-compatible server."""

from riftco.serve.app import create_app
from riftco.serve.batch_engine import BatchEngine
from riftco.serve.caches import ContiguousKVCachePool, PagedKVCachePool
from riftco.serve.config import ServerConfig
from riftco.serve.engine import (
    ChatMessage,
    Engine,
    EngineStats,
    Finished,
    GenerationRequest,
    GenerationStream,
    TextDelta,
)
from riftco.serve.errors import (
    CacheError,
    GenerationFailed,
    InvalidField,
    LimitsError,
    ModelNotFound,
    NotReady,
    Overloaded,
    PoolExhausted,
    RequestError,
    ServeError,
    UnsupportedParameter,
)
from riftco.serve.loading import app_from_bundle, engine_from_bundle
from riftco.serve.paged_attention import paged_attention
from riftco.serve.scheduler import Scheduler, SchedulerLimits

__version__ = "0.1.0"

__all__ = [
    "BatchEngine",
    "CacheError",
    "ChatMessage",
    "ContiguousKVCachePool",
    "Engine",
    "EngineStats",
    "Finished",
    "GenerationFailed",
    "GenerationRequest",
    "GenerationStream",
    "InvalidField",
    "LimitsError",
    "ModelNotFound",
    "NotReady",
    "Overloaded",
    "PagedKVCachePool",
    "PoolExhausted",
    "RequestError",
    "Scheduler",
    "SchedulerLimits",
    "ServeError",
    "ServerConfig",
    "TextDelta",
    "UnsupportedParameter",
    "app_from_bundle",
    "create_app",
    "engine_from_bundle",
    "paged_attention",
]
