//! Decode sessions over a paged key/value cache.
//!
//! A model owns one pool of cache pages per layer (`[pages, PAGE_SIZE, kv_heads,
//! head_dim]` of keys and of values), behind a mutex; a session holds its sequence's page
//! list, its tokens and its last logits. A step of one session or of several (the batched
//! step) is one call of the kernels' whole-step decoder over the pool, the sessions'
//! pages given as a page table. Context sliding is riftco-nn's `generate` rule: a session
//! whose cache holds `context_length` tokens drops it and replays its newest
//! `replay_tokens(context_length)` tokens (the new one included) from position 0.

use std::sync::{Arc, Mutex};

use riftco_kernels::decode::{self, Attend, Batch, CacheLayer};
use riftco_kernels::paged::{PagedLayout, PagedSegment};

use crate::error::{Error, Result, Status};
use crate::model::ModelData;

/// Token positions per cache page.
pub const PAGE_SIZE: usize = 16;

/// riftco-nn's `replay_tokens`: half the context, at least 1, at most `context - 1`.
pub fn replay_tokens(context_length: usize) -> usize {
    (context_length / 2)
        .min(context_length.saturating_sub(1))
        .max(1)
}

/// The cache pages of every session of one model.
pub struct Pool {
    kv_width: usize,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    pages: usize,
    free: Vec<usize>,
}

impl Pool {
    fn new(layers: usize, kv_width: usize) -> Pool {
        Pool {
            kv_width,
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
            pages: 0,
            free: Vec::new(),
        }
    }

    fn alloc(&mut self) -> Result<usize> {
        if let Some(p) = self.free.pop() {
            return Ok(p);
        }
        let grow = self.pages.max(4);
        let new_pages = self.pages + grow;
        let len = new_pages
            .checked_mul(PAGE_SIZE * self.kv_width)
            .ok_or_else(|| Error::limit("session: the cache pool is past the address space"))?;
        for buf in self.keys.iter_mut().chain(self.values.iter_mut()) {
            buf.try_reserve_exact(len - buf.len()).map_err(|_| {
                Error::new(
                    Status::OutOfMemory,
                    format!("session: cannot grow the cache pool to {new_pages} pages"),
                )
            })?;
            buf.resize(len, 0.0);
        }
        self.free.extend((self.pages + 1..new_pages).rev());
        let page = self.pages;
        self.pages = new_pages;
        Ok(page)
    }

    fn release(&mut self, pages: impl IntoIterator<Item = usize>) {
        self.free.extend(pages);
    }

    /// Pages in use and in all.
    pub fn usage(&self) -> (usize, usize) {
        (self.pages - self.free.len(), self.pages)
    }
}

/// A loaded model and its cache pool, shared by its sessions.
pub struct Shared {
    pub data: ModelData,
    pub pool: Mutex<Pool>,
}

impl Shared {
    pub fn new(data: ModelData) -> Arc<Shared> {
        let kvw = data.config.kv_heads * data.config.head_dim();
        let layers = data.config.n_layers;
        Arc::new(Shared {
            data,
            pool: Mutex::new(Pool::new(layers, kvw)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        // A panic while the pool was held leaves it consistent (pages are only
        // handed out after a step succeeds), so a poisoned lock is used as is.
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One sequence being decoded.
pub struct Session {
    pub model: Arc<Shared>,
    pages: Vec<usize>,
    /// Tokens in the cache.
    len: usize,
    /// The sequence's newest tokens (the cache's tokens are its last `len`).
    history: Vec<i64>,
    logits: Vec<f32>,
    slides: u64,
}

impl Drop for Session {
    fn drop(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        self.model.lock().release(pages);
    }
}

/// What one session adds in a step.
struct Work {
    feed: Vec<i64>,
    reset: bool,
}

impl Session {
    pub fn new(model: Arc<Shared>) -> Session {
        Session {
            model,
            pages: Vec::new(),
            len: 0,
            history: Vec::new(),
            logits: Vec::new(),
            slides: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn slides(&self) -> u64 {
        self.slides
    }
    pub fn logits(&self) -> Result<&[f32]> {
        if self.logits.is_empty() {
            return Err(Error::state(
                "session: no logits yet (prefill or step first; a rollback clears them)",
            ));
        }
        Ok(&self.logits)
    }

    fn check_tokens(&self, tokens: &[i64]) -> Result<()> {
        let vocab = self.model.data.config.vocab_size as i64;
        if let Some((i, t)) = tokens
            .iter()
            .enumerate()
            .find(|(_, t)| !(0..vocab).contains(*t))
        {
            return Err(Error::invalid(format!(
                "session: token {t} (index {i}) is outside the vocabulary 0..{}",
                vocab - 1
            )));
        }
        Ok(())
    }

    /// Add a prompt (or more of one) to the cache; the logits of its last token come back.
    pub fn prefill(&mut self, tokens: &[i64]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::invalid("session: prefill of no tokens"));
        }
        self.check_tokens(tokens)?;
        let context = self.model.data.config.context_length;
        if self.len + tokens.len() > context {
            return Err(Error::limit(format!(
                "session: {} cached + {} new tokens is past the context length {context}",
                self.len,
                tokens.len()
            )));
        }
        let model = self.model.clone();
        step_sessions(
            &model,
            &mut [self],
            vec![Work {
                feed: tokens.to_vec(),
                reset: false,
            }],
            None,
        )
    }

    fn work_for(&self, token: i64) -> Work {
        let context = self.model.data.config.context_length;
        if self.len >= context {
            let mut all = self.history.clone();
            all.push(token);
            let replay = replay_tokens(context);
            let feed = all[all.len().saturating_sub(replay)..].to_vec();
            Work { feed, reset: true }
        } else {
            Work {
                feed: vec![token],
                reset: false,
            }
        }
    }

    /// Add one token (sliding the window when the cache is full).
    pub fn step(&mut self, token: i64) -> Result<()> {
        self.check_tokens(&[token])?;
        let work = self.work_for(token);
        let model = self.model.clone();
        step_sessions(&model, &mut [self], vec![work], None)
    }

    /// Drop the newest `n` tokens from the cache (the logits are cleared).
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.len {
            return Err(Error::invalid(format!(
                "session: rollback of {n} tokens, the cache holds {}",
                self.len
            )));
        }
        self.len -= n;
        self.history.truncate(self.history.len() - n);
        self.logits.clear();
        let keep = self.len.div_ceil(PAGE_SIZE);
        let extra: Vec<usize> = self.pages.drain(keep..).collect();
        self.model.lock().release(extra);
        Ok(())
    }

    pub fn reset(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        self.model.lock().release(pages);
        self.len = 0;
        self.history.clear();
        self.logits.clear();
    }
}

/// One step of several sessions of the same model, each adding one token.
pub fn step_batch(
    sessions: &mut [&mut Session],
    tokens: &[i64],
    logits_out: Option<&mut [f32]>,
) -> Result<()> {
    if sessions.is_empty() {
        return Err(Error::invalid("session batch: no sessions"));
    }
    if sessions.len() != tokens.len() {
        return Err(Error::invalid(format!(
            "session batch: {} sessions and {} tokens",
            sessions.len(),
            tokens.len()
        )));
    }
    let model = sessions[0].model.clone();
    for (i, s) in sessions.iter().enumerate() {
        if !Arc::ptr_eq(&s.model, &model) {
            return Err(Error::invalid(format!(
                "session batch: session {i} belongs to another model than session 0"
            )));
        }
        s.check_tokens(&tokens[i..i + 1])
            .map_err(|e| e.context(&format!("session batch: session {i}")))?;
    }
    let works = sessions
        .iter()
        .zip(tokens)
        .map(|(s, &t)| s.work_for(t))
        .collect();
    step_sessions(&model, sessions, works, logits_out)
}

fn step_sessions(
    model: &Shared,
    sessions: &mut [&mut Session],
    works: Vec<Work>,
    logits_out: Option<&mut [f32]>,
) -> Result<()> {
    let data = &model.data;
    let vocab = data.config.vocab_size;
    if let Some(out) = &logits_out {
        if out.len() != sessions.len() * vocab {
            return Err(Error::invalid(format!(
                "session batch: a logits buffer of {} floats for {} sessions of {vocab}",
                out.len(),
                sessions.len()
            )));
        }
    }
    let mut pool = model.lock();
    // Pages for every session's new tokens (a reset session starts over).
    let mut added: Vec<Vec<usize>> = Vec::with_capacity(sessions.len());
    let mut plans = Vec::with_capacity(sessions.len());
    let mut failure = None;
    for (s, w) in sessions.iter().zip(&works) {
        let start = if w.reset { 0 } else { s.len };
        let end = start + w.feed.len();
        let have = if w.reset { 0 } else { s.pages.len() };
        let mut new = Vec::new();
        while have + new.len() < end.div_ceil(PAGE_SIZE) {
            match pool.alloc() {
                Ok(p) => new.push(p),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let table: Vec<usize> = if w.reset {
            new.clone()
        } else {
            s.pages.iter().copied().chain(new.iter().copied()).collect()
        };
        added.push(new);
        plans.push((start, end, table));
        if failure.is_some() {
            break;
        }
    }
    let undo = |pool: &mut Pool, added: Vec<Vec<usize>>| pool.release(added.into_iter().flatten());
    if let Some(e) = failure {
        undo(&mut pool, added);
        return Err(e);
    }
    let n: usize = works.iter().map(|w| w.feed.len()).sum();
    let width = plans.iter().map(|p| p.2.len()).max().unwrap_or(1).max(1);
    let mut tokens = Vec::with_capacity(n);
    let mut positions = Vec::with_capacity(n);
    let mut cache_rows = Vec::with_capacity(n);
    let mut segments = Vec::with_capacity(sessions.len());
    let mut table = vec![0i64; sessions.len() * width];
    let mut logit_rows = Vec::with_capacity(sessions.len());
    for (j, ((start, end, pages), w)) in plans.iter().zip(&works).enumerate() {
        let q_row = tokens.len();
        for (i, &t) in w.feed.iter().enumerate() {
            let p = start + i;
            tokens.push(t);
            positions.push(p as i64);
            cache_rows.push((pages[p / PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE) as i64);
        }
        for (k, &page) in pages.iter().enumerate() {
            table[j * width + k] = page as i64;
        }
        segments.push(PagedSegment {
            q_row,
            q_len: w.feed.len(),
            kv_len: *end,
        });
        logit_rows.push(tokens.len() - 1);
    }
    let layout = PagedLayout {
        pages: pool.pages,
        page_size: PAGE_SIZE,
        max_pages: width,
    };
    let batch = Batch {
        tokens: &tokens,
        positions: &positions,
        cache_rows: &cache_rows,
        attend: Attend::Paged {
            layout,
            segments: &segments,
            table: &table,
        },
        logit_rows: &logit_rows,
    };
    let mut logits = vec![0.0f32; sessions.len() * vocab];
    let result = {
        let Pool { keys, values, .. } = &mut *pool;
        let mut cache: Vec<CacheLayer> = keys
            .iter_mut()
            .zip(values.iter_mut())
            .map(|(k, v)| CacheLayer {
                keys: k.as_mut_slice(),
                values: v.as_mut_slice(),
            })
            .collect();
        decode::step(&data.view(), &batch, &mut cache, &mut logits)
    };
    if let Err(e) = result {
        undo(&mut pool, added);
        return Err(Error::internal(format!("decode step: {}", e.0)));
    }
    // Commit: pages, lengths, history, logits.
    for (j, ((s, w), new)) in sessions.iter_mut().zip(works).zip(added).enumerate() {
        if w.reset {
            let old = std::mem::take(&mut s.pages);
            pool.release(old);
            s.pages = new;
            s.len = w.feed.len();
            s.slides += 1;
            s.history.push(*w.feed.last().expect("a token"));
        } else {
            s.pages.extend(new);
            s.len += w.feed.len();
            s.history.extend_from_slice(&w.feed);
        }
        let context = data.config.context_length;
        if s.history.len() > 2 * context {
            let cut = s.history.len() - context;
            s.history.drain(..cut);
        }
        s.logits.clear();
        s.logits
            .extend_from_slice(&logits[j * vocab..(j + 1) * vocab]);
    }
    if let Some(out) = logits_out {
        out.copy_from_slice(&logits);
    }
    Ok(())
}
