"""riftco.nn: modules, the GPT and Llama decoder topologies, fused attention,
key/value caches (contiguous and paged), decode sessions and token sampling, over riftco.tensor and riftco.autograd.

    >>> import riftco.nn as nn
    >>> model = nn.DecoderOnlyTransformer(nn.TransformerConfig.preset("llama", size="tiny"))
    >>> loss = model.loss(tokens, targets)
    >>> loss.backward()
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.autograd import Parameter
from riftco.nn import functional
from riftco.nn.attention import CausalSelfAttention
from riftco.nn.cache import ContiguousKVCache, DecodeLayout, DecodeStep, KVCache, WholeStepCache
from riftco.nn.capabilities import JOBS, model_capabilities, required_capabilities_for
from riftco.nn.config import PRESETS, SIZES, TransformerConfig
from riftco.nn.errors import CacheError, ConfigError, PoolExhausted, SessionError, StateDictError
from riftco.nn.feed_forward import FeedForward, SwiGLU
from riftco.nn.functional import cross_entropy
from riftco.nn.generation import (
    GENERATE_PAGE_SIZE,
    Constraint,
    GenerationResult,
    SamplingConfig,
    TokenLogprobs,
    TokenSampler,
    choice_seed,
    generate,
    replay_tokens,
    sample_next,
    sequence_rng,
)
from riftco.nn.inference_weights import (
    INFERENCE_FORMATS,
    KEEPABLE,
    BlockHead,
    BlockLinear,
    check_keep_float,
    dequantize_for_training,
    inference_formats,
    matrix_type,
    quantize_for_inference,
)
from riftco.nn.layers import GELU, Dropout, Embedding, LayerNorm, Linear, RMSNorm, SiLU
from riftco.nn.lora import (
    LORA_TARGETS,
    AdapterError,
    LoraConfig,
    LoraLinear,
    LoraQuantizedLinear,
    attach_lora,
    check_exportable,
    detach_lora,
    has_adapters,
    load_lora_state_dict,
    lora_parameters,
    lora_state_dict,
    merge_lora,
)
from riftco.nn.module import LoadResult, Module, ModuleList, ParameterList
from riftco.nn.page_allocator import PageAllocator, prefix_keys
from riftco.nn.paged_cache import PagedKVCache
from riftco.nn.precision import PRECISIONS, compute_dtype, mixed_precision
from riftco.nn.quantized import (
    QuantizedLinear,
    WeightMemory,
    dequantize_model,
    quantize_model,
    weight_memory,
)
from riftco.nn.session import DecodeSession, DecodeSessionPool, prefill_many, step_many
from riftco.nn.transformer import (
    DecoderOnlyTransformer,
    LanguageModelHead,
    TransformerBlock,
    initialize,
)

__all__ = [
    "GELU",
    "PRECISIONS",
    "PRESETS",
    "SIZES",
    "CacheError",
    "CausalSelfAttention",
    "ConfigError",
    "Constraint",
    "ContiguousKVCache",
    "DecodeLayout",
    "DecodeStep",
    "DecoderOnlyTransformer",
    "Dropout",
    "Embedding",
    "FeedForward",
    "GenerationResult",
    "KVCache",
    "LanguageModelHead",
    "LayerNorm",
    "Linear",
    "LoadResult",
    "Module",
    "ModuleList",
    "Parameter",
    "ParameterList",
    "RMSNorm",
    "SamplingConfig",
    "SiLU",
    "StateDictError",
    "SwiGLU",
    "TokenLogprobs",
    "TokenSampler",
    "TransformerBlock",
    "TransformerConfig",
    "WholeStepCache",
    "choice_seed",
    "cross_entropy",
    "functional",
    "generate",
    "initialize",
    "replay_tokens",
    "sample_next",
    "sequence_rng",
]
__all__ += ["compute_dtype", "mixed_precision"]
__all__ += [
    "GENERATE_PAGE_SIZE",
    "DecodeSession",
    "DecodeSessionPool",
    "PageAllocator",
    "PagedKVCache",
    "PoolExhausted",
    "SessionError",
    "prefill_many",
    "prefix_keys",
    "step_many",
]
__all__ += ["JOBS", "model_capabilities", "required_capabilities_for"]
__all__ += [
    "LORA_TARGETS",
    "AdapterError",
    "LoraConfig",
    "LoraLinear",
    "LoraQuantizedLinear",
    "QuantizedLinear",
    "WeightMemory",
    "attach_lora",
    "check_exportable",
    "dequantize_model",
    "detach_lora",
    "has_adapters",
    "load_lora_state_dict",
    "lora_parameters",
    "lora_state_dict",
    "merge_lora",
    "quantize_model",
    "weight_memory",
]
__all__ += [
    "INFERENCE_FORMATS",
    "KEEPABLE",
    "BlockHead",
    "BlockLinear",
    "check_keep_float",
    "dequantize_for_training",
    "inference_formats",
    "matrix_type",
    "quantize_for_inference",
]
