//! The exported functions: version, model, decode sessions, sampler.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use crate::error::{guard, in_slice, in_str, out_ptr, out_slice, Error, Status};
use crate::handle::{self, tag, Handle};
use crate::model::Source;
use crate::sampler::{Sampler, SamplingConfig};
use crate::session::{self, Session, Shared};

/// The major version of the ABI: bumped by a change that breaks existing callers.
pub const RIFTCO_ABI_VERSION_MAJOR: u32 = 1;
/// The minor version: bumped by an additive change (a new function, status or enum value).
pub const RIFTCO_ABI_VERSION_MINOR: u32 = 0;

/// The ABI version of the loaded library: `(major << 16) | minor`. A program built against
/// header version M.m runs with any library of the same major M and a minor >= m.
#[no_mangle]
pub extern "C" fn riftco_abi_version() -> u32 {
    (RIFTCO_ABI_VERSION_MAJOR << 16) | RIFTCO_ABI_VERSION_MINOR
}

/// A loaded model (weights, configuration and the cache pool its sessions share).
/// Thread safety: a model may be used from any number of threads at once (it is
/// immutable; its cache pool is locked internally). Free it after its sessions or
/// before: sessions keep the model alive.
pub struct RiftcoModel {
    _opaque: [u8; 0],
}

/// One sequence being decoded over its model's paged key/value cache. Thread safety: a
/// session may move between threads but must not be used by two threads at once;
/// different sessions may be stepped from different threads (their steps take turns on
/// the model's cache pool).
pub struct RiftcoSession {
    _opaque: [u8; 0],
}

/// A sequence's sampler: its generator (riftco-nn's `sequence_rng(seed, index)`) and the
/// tokens its repetition penalty sees. Thread safety: like a session.
pub struct RiftcoSampler {
    _opaque: [u8; 0],
}

unsafe impl Handle for RiftcoModel {
    type Inner = Arc<Shared>;
    const TAG: u64 = tag(b"MODL");
    const NAME: &'static str = "RiftcoModel";
}

unsafe impl Handle for RiftcoSession {
    type Inner = Session;
    const TAG: u64 = tag(b"SESS");
    const NAME: &'static str = "RiftcoSession";
}

unsafe impl Handle for RiftcoSampler {
    type Inner = Sampler;
    const TAG: u64 = tag(b"SMPL");
    const NAME: &'static str = "RiftcoSampler";
}

/// A model's configuration (riftco-nn's `TransformerConfig`, what inference reads).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RiftcoModelConfig {
    pub vocab_size: u32,
    pub context_length: u32,
    pub d_model: u32,
    pub n_layers: u32,
    pub n_heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub d_ff: u32,
    /// 0: none; else keys `sliding_window` or more positions back are hidden.
    pub sliding_window: u32,
    /// 0: layer norm; 1: RMS norm.
    pub rms_norm: u32,
    /// 0: learned positions; 1: rotary.
    pub rotary: u32,
    /// 0: GELU; 1: SwiGLU.
    pub swiglu: u32,
    /// 1: GELU in its tanh form.
    pub gelu_tanh: u32,
    pub linear_bias: u32,
    pub head_bias: u32,
    pub tie_embeddings: u32,
    /// 0: a `.rift` bundle; 1: a GGUF file.
    pub source: u32,
    /// The layers' weight format: 0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 mixed.
    pub weight_format: u32,
    pub norm_eps: f64,
    pub rope_theta: f64,
    /// Bytes of weights held in memory.
    pub weight_bytes: u64,
}

/// How a sampler draws (riftco-nn's `SamplingConfig`). Start from
/// `riftco_sampling_params_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RiftcoSamplingParams {
    /// 0: greedy (the lowest id among equal maxima); else divide the logits by it.
    pub temperature: f64,
    /// 0: off; else keep the k most likely ids.
    pub top_k: u32,
    /// 0: off; else in (0, 1]: keep the smallest most-likely set reaching it.
    pub top_p: f64,
    /// 1: off; > 1 divides the positive (multiplies the negative) logits of seen ids.
    pub repetition_penalty: f64,
    /// 0: off; else draw only ids below it.
    pub vocab_limit: u32,
    /// OpenAI's presence penalty in [-2, 2] (0 off): subtracted once from the logit of each
    /// id generated so far (the prompt is not counted).
    pub presence_penalty: f64,
    /// OpenAI's frequency penalty in [-2, 2] (0 off): subtracted per generation of an id.
    pub frequency_penalty: f64,
    /// The generator is riftco-nn's `sequence_rng(seed, index)`:
    /// PCG64(SeedSequence([seed, index])).
    pub seed: u64,
    pub index: u64,
}

fn model_ref<'a>(m: *const RiftcoModel) -> crate::error::Result<&'a Arc<Shared>> {
    unsafe { handle::get::<RiftcoModel>(m) }
}

/// Load a model: a `.rift` bundle (identity and checksums verified) or a GGUF file
/// (`gpt2` / `llama`; F32, F16, Q8_0, Q4_0), told apart by their first bytes. On success
/// `*out` is a new model the caller frees with `riftco_model_free`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_model_load(
    path: *const c_char,
    out: *mut *mut RiftcoModel,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let path = in_str(path, "path")?;
        let data = load_any(Path::new(path))?;
        *out = handle::new::<RiftcoModel>(Shared::new(data));
        Ok(())
    })
}

pub fn load_any(path: &Path) -> crate::error::Result<crate::model::ModelData> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let meta =
        std::fs::metadata(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
    if meta.is_file() {
        let mut f =
            std::fs::File::open(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        let got = f
            .read(&mut magic)
            .map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        if got == 4 && &magic == b"GGUF" {
            return crate::gguf::load(path);
        }
    }
    crate::rift::load(path)
}

/// Free a model (NULL is a no-op). Sessions made from it stay valid.
///
/// # Safety
/// `model` is NULL or a live model handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_model_free(model: *mut RiftcoModel) -> Status {
    guard(|| handle::free::<RiftcoModel>(model))
}

/// The model's configuration.
///
/// # Safety
/// `model` is a model handle; `out` points to a `RiftcoModelConfig`.
#[no_mangle]
pub unsafe extern "C" fn riftco_model_config(
    model: *const RiftcoModel,
    out: *mut RiftcoModelConfig,
) -> Status {
    guard(|| {
        let m = model_ref(model)?;
        let out = out_ptr(out, "out")?;
        let d = &m.data;
        let c = &d.config;
        *out = RiftcoModelConfig {
            vocab_size: c.vocab_size as u32,
            context_length: c.context_length as u32,
            d_model: c.d_model as u32,
            n_layers: c.n_layers as u32,
            n_heads: c.n_heads as u32,
            kv_heads: c.kv_heads as u32,
            head_dim: c.head_dim() as u32,
            d_ff: c.d_ff as u32,
            sliding_window: c.sliding_window as u32,
            rms_norm: c.rms as u32,
            rotary: c.rotary as u32,
            swiglu: c.swiglu as u32,
            gelu_tanh: c.gelu_tanh as u32,
            linear_bias: c.linear_bias as u32,
            head_bias: c.head_bias as u32,
            tie_embeddings: c.tie_embeddings as u32,
            source: match d.source {
                Source::Rift => 0,
                Source::Gguf => 1,
            },
            weight_format: match d.weight_format {
                "f32" => 0,
                "f16" => 1,
                "q8_0" => 2,
                "q4_0" => 3,
                _ => 4,
            },
            norm_eps: c.norm_eps,
            rope_theta: c.rope_theta,
            weight_bytes: d.weight_bytes() as u64,
        };
        Ok(())
    })
}

/// Copy `text` and its NUL into `buf` (`capacity` bytes); `*needed` (if not NULL) gets
/// the bytes it takes, NUL included. A short buffer is `RIFTCO_STATUS_LIMIT` with nothing
/// written, so a caller may ask with `capacity` 0 first.
unsafe fn copy_text(
    text: &str,
    buf: *mut c_char,
    capacity: usize,
    needed: *mut usize,
) -> crate::error::Result<()> {
    let want = text.len() + 1;
    if !needed.is_null() {
        *out_ptr(needed, "needed")? = want;
    }
    if capacity < want {
        if buf.is_null() && capacity == 0 && !needed.is_null() {
            return Ok(());
        }
        return Err(Error::limit(format!(
            "a buffer of {capacity} bytes for a text of {want} (NUL included)"
        )));
    }
    let dst = out_slice(buf as *mut u8, want, "buf")?;
    dst[..text.len()].copy_from_slice(text.as_bytes());
    dst[text.len()] = 0;
    Ok(())
}

/// The model's identity: a bundle's `artifact_id` (64 hex digits); "" for a GGUF file
/// without riftco's lineage. String protocol: see `riftco_model_tokenizer_state`.
///
/// # Safety
/// `model` is a model handle; `buf` holds `capacity` bytes (or is NULL with 0).
#[no_mangle]
pub unsafe extern "C" fn riftco_model_artifact_id(
    model: *const RiftcoModel,
    buf: *mut c_char,
    capacity: usize,
    needed: *mut usize,
) -> Status {
    guard(|| copy_text(&model_ref(model)?.data.artifact_id, buf, capacity, needed))
}

/// The tokenizer state the file holds (riftco-text's, as JSON), or
/// `RIFTCO_STATUS_UNSUPPORTED` when it holds none. Strings come back in the caller's
/// buffer: pass `buf` NULL and `capacity` 0 to learn the size (`*needed`, NUL included),
/// then call again.
///
/// # Safety
/// As `riftco_model_artifact_id`.
#[no_mangle]
pub unsafe extern "C" fn riftco_model_tokenizer_state(
    model: *const RiftcoModel,
    buf: *mut c_char,
    capacity: usize,
    needed: *mut usize,
) -> Status {
    guard(|| {
        let m = model_ref(model)?;
        let state = m.data.tokenizer_state.as_deref().ok_or_else(|| {
            Error::unsupported("the model's file holds no riftco tokenizer state")
        })?;
        copy_text(state, buf, capacity, needed)
    })
}

/// The model's key/value cache pool: pages (of 16 positions) held by sessions now, and
/// pages allocated in all. Pages freed by a session, a rollback or a reset are kept for
/// reuse, so the pool stays at its high-water mark until the model is freed.
///
/// # Safety
/// `model` is a model handle; `in_use` and `total` point to `size_t`s.
#[no_mangle]
pub unsafe extern "C" fn riftco_model_cache_pages(
    model: *const RiftcoModel,
    in_use: *mut usize,
    total: *mut usize,
) -> Status {
    guard(|| {
        let m = model_ref(model)?;
        let (used, all) = m.pool.lock().unwrap_or_else(|e| e.into_inner()).usage();
        *out_ptr(in_use, "in_use")? = used;
        *out_ptr(total, "total")? = all;
        Ok(())
    })
}

// -- sessions ---------------------------------------------------------------------------

/// A new, empty session of `model` (which it keeps alive).
///
/// # Safety
/// `model` is a model handle; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_create(
    model: *const RiftcoModel,
    out: *mut *mut RiftcoSession,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let m = model_ref(model)?.clone();
        *out = handle::new::<RiftcoSession>(Session::new(m));
        Ok(())
    })
}

/// Free a session and its cache pages (NULL is a no-op).
///
/// # Safety
/// `session` is NULL or a live session handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_free(session: *mut RiftcoSession) -> Status {
    guard(|| handle::free::<RiftcoSession>(session))
}

fn tokens_i64(tokens: &[i32]) -> Vec<i64> {
    tokens.iter().map(|&t| t as i64).collect()
}

/// Add `n` prompt tokens to the session's cache in one step; the logits of the last one
/// are then the session's. `RIFTCO_STATUS_LIMIT` when the cache would pass the context
/// length (the session is unchanged).
///
/// # Safety
/// `session` is a session handle; `tokens` holds `n` ids.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_prefill(
    session: *mut RiftcoSession,
    tokens: *const i32,
    n: usize,
) -> Status {
    guard(|| {
        let s = handle::get_mut::<RiftcoSession>(session)?;
        let t = in_slice(tokens, n, "tokens")?;
        s.prefill(&tokens_i64(t))
    })
}

/// Add one token; its logits become the session's. When the cache already holds
/// `context_length` tokens the window slides first (riftco-nn's rule: the newest
/// `replay_tokens(context_length)` tokens, this one included, are replayed from position 0).
///
/// # Safety
/// `session` is a session handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_step(session: *mut RiftcoSession, token: i32) -> Status {
    guard(|| handle::get_mut::<RiftcoSession>(session)?.step(token as i64))
}

/// One step of `n` sessions of the same model, session i adding `tokens[i]` (each slides
/// as `riftco_session_step` does), all in one call of the decoder: the way a host runs
/// continuous batching. Each session's logits are updated; `logits_out` (NULL, or
/// `n * vocab_size` floats) also receives them, session after session. The sessions must
/// be distinct and must not be in use on another thread.
///
/// # Safety
/// `sessions` holds `n` session handles; `tokens` `n` ids; `logits_out` NULL or
/// `n * vocab_size` floats.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_step_batch(
    sessions: *const *mut RiftcoSession,
    tokens: *const i32,
    n: usize,
    logits_out: *mut f32,
) -> Status {
    guard(|| {
        let handles = in_slice(sessions, n, "sessions")?;
        let t = in_slice(tokens, n, "tokens")?;
        for (i, h) in handles.iter().enumerate() {
            if handles[..i].contains(h) {
                return Err(Error::invalid(format!(
                    "session batch: session {i} appears twice"
                )));
            }
        }
        let mut refs: Vec<&mut Session> = Vec::with_capacity(n);
        for (i, &h) in handles.iter().enumerate() {
            refs.push(
                handle::get_mut::<RiftcoSession>(h)
                    .map_err(|e| e.context(&format!("sessions[{i}]")))?,
            );
        }
        let out = if logits_out.is_null() {
            None
        } else {
            let vocab = refs.first().map_or(0, |s| s.model.data.config.vocab_size);
            Some(out_slice(logits_out, n * vocab, "logits_out")?)
        };
        session::step_batch(&mut refs, &tokens_i64(t), out)
    })
}

/// Copy the session's logits (`len` must be the model's `vocab_size`).
/// `RIFTCO_STATUS_STATE` before the first prefill or step, and after a rollback.
///
/// # Safety
/// `session` is a session handle; `out` holds `len` floats.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_logits(
    session: *const RiftcoSession,
    out: *mut f32,
    len: usize,
) -> Status {
    guard(|| {
        let s = handle::get::<RiftcoSession>(session)?;
        let logits = s.logits()?;
        if len != logits.len() {
            return Err(Error::invalid(format!(
                "riftco_session_logits: a buffer of {len} floats, the vocabulary has {}",
                logits.len()
            )));
        }
        out_slice(out, len, "out")?.copy_from_slice(logits);
        Ok(())
    })
}

/// Tokens in the session's cache.
///
/// # Safety
/// `session` is a session handle; `out` points to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_length(
    session: *const RiftcoSession,
    out: *mut usize,
) -> Status {
    guard(|| {
        *out_ptr(out, "out")? = handle::get::<RiftcoSession>(session)?.len();
        Ok(())
    })
}

/// How many times the session's window has slid.
///
/// # Safety
/// `session` is a session handle; `out` points to a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_slides(
    session: *const RiftcoSession,
    out: *mut u64,
) -> Status {
    guard(|| {
        *out_ptr(out, "out")? = handle::get::<RiftcoSession>(session)?.slides();
        Ok(())
    })
}

/// Drop the newest `n` tokens from the cache (at most the tokens it holds); the logits
/// are cleared until the next step.
///
/// # Safety
/// `session` is a session handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_rollback(session: *mut RiftcoSession, n: usize) -> Status {
    guard(|| handle::get_mut::<RiftcoSession>(session)?.rollback(n))
}

/// Empty the session (its pages go back to the model's pool).
///
/// # Safety
/// `session` is a session handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_reset(session: *mut RiftcoSession) -> Status {
    guard(|| {
        handle::get_mut::<RiftcoSession>(session)?.reset();
        Ok(())
    })
}

/// Draw the next token from the session's logits with `sampler` (which this does not
/// change beyond its generator: call `riftco_sampler_accept` for a token the sequence keeps).
///
/// # Safety
/// `session` and `sampler` are handles; `out` points to an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_session_sample(
    session: *const RiftcoSession,
    sampler: *mut RiftcoSampler,
    out: *mut i32,
) -> Status {
    guard(|| {
        let s = handle::get::<RiftcoSession>(session)?;
        let sm = handle::get_mut::<RiftcoSampler>(sampler)?;
        let out = out_ptr(out, "out")?;
        *out = sm.draw(s.logits()?)? as i32;
        Ok(())
    })
}

// -- sampler ----------------------------------------------------------------------------

/// Greedy defaults: temperature 0, no top-k / top-p, repetition penalty 1, no vocabulary
/// limit, seed 0, index 0.
///
/// # Safety
/// `out` points to a `RiftcoSamplingParams`.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampling_params_default(out: *mut RiftcoSamplingParams) -> Status {
    guard(|| {
        *out_ptr(out, "out")? = RiftcoSamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 0.0,
            repetition_penalty: 1.0,
            vocab_limit: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
            index: 0,
        };
        Ok(())
    })
}

/// A new sampler; `RIFTCO_STATUS_INVALID_ARGUMENT` for parameters riftco-nn refuses.
///
/// # Safety
/// `params` points to a `RiftcoSamplingParams`; `out` to storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_create(
    params: *const RiftcoSamplingParams,
    out: *mut *mut RiftcoSampler,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        if params.is_null() {
            return Err(Error::null("params"));
        }
        let p = *params;
        let config = SamplingConfig {
            temperature: p.temperature,
            top_k: (p.top_k != 0).then_some(p.top_k as usize),
            top_p: (p.top_p != 0.0).then_some(p.top_p),
            repetition_penalty: p.repetition_penalty,
            vocab_limit: (p.vocab_limit != 0).then_some(p.vocab_limit as usize),
            presence_penalty: p.presence_penalty,
            frequency_penalty: p.frequency_penalty,
            logit_bias: Vec::new(),
        };
        *out = handle::new::<RiftcoSampler>(Sampler::new(config, p.seed, p.index)?);
        Ok(())
    })
}

/// Free a sampler (NULL is a no-op).
///
/// # Safety
/// `sampler` is NULL or a live sampler handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_free(sampler: *mut RiftcoSampler) -> Status {
    guard(|| handle::free::<RiftcoSampler>(sampler))
}

/// Tokens now in the sequence (the prompt): the repetition penalty sees them.
///
/// # Safety
/// `sampler` is a sampler handle; `tokens` holds `n` ids.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_observe(
    sampler: *mut RiftcoSampler,
    tokens: *const i32,
    n: usize,
) -> Status {
    guard(|| {
        let s = handle::get_mut::<RiftcoSampler>(sampler)?;
        s.observe(&tokens_i64(in_slice(tokens, n, "tokens")?));
        Ok(())
    })
}

/// A drawn token the sequence keeps (the repetition penalty sees it).
///
/// # Safety
/// `sampler` is a sampler handle.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_accept(sampler: *mut RiftcoSampler, token: i32) -> Status {
    guard(|| {
        handle::get_mut::<RiftcoSampler>(sampler)?.accept(token as i64);
        Ok(())
    })
}

/// Set the sampler's logit bias (riftco-nn's `SamplingConfig.logit_bias`, OpenAI's): `n`
/// pairs of a token id and a bias in [-100, 100] added to that id's logit after the
/// penalties, before the temperature (an id given twice: the later bias). Replaces any
/// bias set before; `n` 0 clears it. A draw over fewer ids than a biased id is an error.
///
/// # Safety
/// `sampler` is a sampler handle; `ids` and `biases` hold `n` values each.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_set_logit_bias(
    sampler: *mut RiftcoSampler,
    ids: *const i32,
    biases: *const f64,
    n: usize,
) -> Status {
    guard(|| {
        let s = handle::get_mut::<RiftcoSampler>(sampler)?;
        let ids = in_slice(ids, n, "ids")?;
        let biases = in_slice(biases, n, "biases")?;
        let mut map = std::collections::BTreeMap::new();
        for (&id, &b) in ids.iter().zip(biases) {
            if id < 0 {
                return Err(Error::invalid(format!(
                    "logit_bias: token ids must be non-negative, found {id}"
                )));
            }
            map.insert(id as usize, b);
        }
        let mut config = s.config.clone();
        config.logit_bias = map.into_iter().collect();
        config.check()?;
        s.config = config;
        Ok(())
    })
}

/// Draw a token from a row of `n` logits, as riftco-nn's `sample_next` does.
///
/// # Safety
/// `sampler` is a sampler handle; `logits` holds `n` floats; `out` points to an `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn riftco_sampler_draw(
    sampler: *mut RiftcoSampler,
    logits: *const f32,
    n: usize,
    out: *mut i32,
) -> Status {
    guard(|| {
        let s = handle::get_mut::<RiftcoSampler>(sampler)?;
        let row = in_slice(logits, n, "logits")?;
        let out = out_ptr(out, "out")?;
        *out = s.draw(row)? as i32;
        Ok(())
    })
}
