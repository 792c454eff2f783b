"""A ctypes binding of libriftco for the parity tests (no dependency beyond the
standard library and numpy): each call raises `CapiError` with the status name and
`riftco_last_error()` when it does not return RIFTCO_STATUS_OK."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
STATUS = [
    "ok",
    "invalid_argument",
    "null_handle",
    "wrong_handle",
    "io",
    "format",
    "checksum",
    "unsupported",
    "limit",
    "out_of_memory",
    "state",
    "internal",
]


def library_path() -> Path | None:
    """$RIFTCO_CAPI_LIB, else the newer of the staged and the cargo-built library."""
    env = os.environ.get("RIFTCO_CAPI_LIB")
    if env:
        return Path(env) if Path(env).is_file() else None
    candidates = [ROOT / "build/capi/lib/libriftco.so", ROOT / "target/release/libriftco.so"]
    found = [p for p in candidates if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


class CapiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = STATUS[status] if 0 <= status < len(STATUS) else f"status {status}"
        self.message = message
        super().__init__(f"{self.status}: {message}")


class ModelConfig(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint32)
        for name in (
            "vocab_size context_length d_model n_layers n_heads kv_heads head_dim d_ff "
            "sliding_window rms_norm rotary swiglu gelu_tanh linear_bias head_bias "
            "tie_embeddings source weight_format"
        ).split()
    ] + [
        ("norm_eps", ctypes.c_double),
        ("rope_theta", ctypes.c_double),
        ("weight_bytes", ctypes.c_uint64),
    ]


class SamplingParams(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_double),
        ("top_k", ctypes.c_uint32),
        ("top_p", ctypes.c_double),
        ("repetition_penalty", ctypes.c_double),
        ("vocab_limit", ctypes.c_uint32),
        ("presence_penalty", ctypes.c_double),
        ("frequency_penalty", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("index", ctypes.c_uint64),
    ]


class Lib:
    def __init__(self, path: Path) -> None:
        self.dll = ctypes.CDLL(str(path))
        self.dll.riftco_last_error.restype = ctypes.c_char_p
        self.dll.riftco_abi_version.restype = ctypes.c_uint32

    def __call__(self, name: str, *args: object) -> None:
        status = getattr(self.dll, "riftco_" + name)(*args)
        if status != 0:
            raise CapiError(status, self.dll.riftco_last_error().decode("utf-8", "replace"))


class Model:
    def __init__(self, lib: Lib, path: str | Path) -> None:
        self.lib = lib
        self.ptr = ctypes.c_void_p()
        lib("model_load", str(path).encode(), ctypes.byref(self.ptr))
        cfg = ModelConfig()
        lib("model_config", self.ptr, ctypes.byref(cfg))
        self.config = cfg

    def session(self) -> Session:
        return Session(self)

    def artifact_id(self) -> str:
        buf = ctypes.create_string_buffer(80)
        self.lib("model_artifact_id", self.ptr, buf, ctypes.c_size_t(80), None)
        return buf.value.decode()

    def close(self) -> None:
        if self.ptr:
            self.lib("model_free", self.ptr)
            self.ptr = ctypes.c_void_p()


def _ids(tokens: list[int]) -> ctypes.Array:
    return (ctypes.c_int32 * len(tokens))(*tokens)


class Session:
    def __init__(self, model: Model) -> None:
        self.model, self.lib = model, model.lib
        self.ptr = ctypes.c_void_p()
        self.lib("session_create", model.ptr, ctypes.byref(self.ptr))

    def prefill(self, tokens: list[int]) -> None:
        self.lib("session_prefill", self.ptr, _ids(tokens), ctypes.c_size_t(len(tokens)))

    def step(self, token: int) -> None:
        self.lib("session_step", self.ptr, ctypes.c_int32(token))

    def logits(self) -> np.ndarray:
        out = np.zeros(self.model.config.vocab_size, np.float32)
        self.lib(
            "session_logits",
            self.ptr,
            out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            ctypes.c_size_t(out.size),
        )
        return out

    def length(self) -> int:
        n = ctypes.c_size_t()
        self.lib("session_length", self.ptr, ctypes.byref(n))
        return n.value

    def rollback(self, n: int) -> None:
        self.lib("session_rollback", self.ptr, ctypes.c_size_t(n))

    def sample(self, sampler: Sampler) -> int:
        out = ctypes.c_int32()
        self.lib("session_sample", self.ptr, sampler.ptr, ctypes.byref(out))
        return out.value

    def close(self) -> None:
        if self.ptr:
            self.lib("session_free", self.ptr)
            self.ptr = ctypes.c_void_p()


def step_batch(sessions: list[Session], tokens: list[int]) -> np.ndarray:
    lib = sessions[0].lib
    vocab = sessions[0].model.config.vocab_size
    ptrs = (ctypes.c_void_p * len(sessions))(*[s.ptr.value for s in sessions])
    out = np.zeros((len(sessions), vocab), np.float32)
    lib(
        "session_step_batch",
        ptrs,
        _ids(tokens),
        ctypes.c_size_t(len(sessions)),
        out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
    )
    return out


class Sampler:
    def __init__(
        self,
        lib: Lib,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float = 1.0,
        vocab_limit: int | None = None,
        seed: int = 0,
        index: int = 0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: dict[int, float] | None = None,
    ) -> None:
        self.lib = lib
        p = SamplingParams(
            temperature,
            top_k or 0,
            top_p or 0.0,
            repetition_penalty,
            vocab_limit or 0,
            presence_penalty,
            frequency_penalty,
            seed,
            index,
        )
        self.ptr = ctypes.c_void_p()
        lib("sampler_create", ctypes.byref(p), ctypes.byref(self.ptr))
        if logit_bias:
            ids, biases = zip(*logit_bias.items())
            lib(
                "sampler_set_logit_bias",
                self.ptr,
                (ctypes.c_int32 * len(ids))(*ids),
                (ctypes.c_double * len(ids))(*biases),
                ctypes.c_size_t(len(ids)),
            )

    def observe(self, tokens: list[int]) -> None:
        self.lib("sampler_observe", self.ptr, _ids(tokens), ctypes.c_size_t(len(tokens)))

    def accept(self, token: int) -> None:
        self.lib("sampler_accept", self.ptr, ctypes.c_int32(token))

    def draw(self, logits: np.ndarray) -> int:
        row = np.ascontiguousarray(logits, np.float32)
        out = ctypes.c_int32()
        self.lib(
            "sampler_draw",
            self.ptr,
            row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            ctypes.c_size_t(row.size),
            ctypes.byref(out),
        )
        return out.value

    def close(self) -> None:
        if self.ptr:
            self.lib("sampler_free", self.ptr)
            self.ptr = ctypes.c_void_p()


def generate(model: Model, prompt: list[int], max_new: int, stops=(), **sampling) -> list[int]:
    """riftco-nn's `generate` loop for one sequence, through the C ABI."""
    session, sampler = model.session(), Sampler(model.lib, **sampling)
    try:
        session.prefill(prompt)
        sampler.observe(prompt)
        out: list[int] = []
        while len(out) < max_new:
            token = session.sample(sampler)
            if token in stops:
                break
            out.append(token)
            sampler.accept(token)
            if len(out) >= max_new:
                break
            session.step(token)
        return out
    finally:
        session.close()
        sampler.close()
