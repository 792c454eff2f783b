//! The step's key/value caches as the paged attention kernel reads them.

use super::Attend;
use crate::paged::{PagedLayout, PagedSegment};

/// The step's sequences as the paged kernel reads them. A contiguous cache is
/// read as pages of one row (a table entry per position), which the kernel
/// walks as runs of consecutive rows: its single-query path is the decode step's.
pub(super) enum Pages<'a> {
    Paged(PagedLayout, &'a [PagedSegment], &'a [i64]),
    Rows(Vec<PagedSegment>, Vec<i64>, usize),
}

impl<'a> Pages<'a> {
    pub(super) fn of(attend: &Attend<'a>) -> Self {
        match *attend {
            Attend::Paged {
                layout,
                segments,
                table,
            } => Pages::Paged(layout, segments, table),
            Attend::Contiguous(segments) => {
                let width = segments.iter().map(|s| s.kv_len).max().unwrap_or(0).max(1);
                let mut table = vec![0i64; segments.len() * width];
                for (j, s) in segments.iter().enumerate() {
                    for (p, t) in table[j * width..j * width + s.kv_len]
                        .iter_mut()
                        .enumerate()
                    {
                        *t = (s.kv_row + p) as i64;
                    }
                }
                let segs = segments
                    .iter()
                    .map(|s| PagedSegment {
                        q_row: s.q_row,
                        q_len: s.q_len,
                        kv_len: s.kv_len,
                    })
                    .collect();
                Pages::Rows(segs, table, width)
            }
        }
    }

    /// The layout, segments and table over a layer cache of `rows` rows.
    pub(super) fn parts(&self, rows: usize) -> (PagedLayout, &[PagedSegment], &[i64]) {
        match self {
            Pages::Paged(layout, segments, table) => (*layout, segments, table),
            Pages::Rows(segments, table, width) => (
                PagedLayout {
                    pages: rows,
                    page_size: 1,
                    max_pages: *width,
                },
                segments,
                table,
            ),
        }
    }
}
