// Shared by the attention kernels. P: threads, B, T, S, H, Hkv, Dh, scale, causal,
// window, page_size, max_pages, from_probs. Dense q/out [B, T, H, Dh], k/v
// [B, S, Hkv, Dh]; packed (varlen, paged) q/out [N, H, Dh] with segs[3 n] =
// (key start or sequence, key count, query position) per query row n.
const MAXD: u32 = 256u;

struct Query { row: u32, head: u32, pos: i32, first: i32, last: i32 }

fn dense_query(e: u32) -> Query {
    let H = P[4];
    let T = P[2];
    let S = P[3];
    var q: Query;
    q.head = e % H;
    q.row = e / H;
    let t = q.row % T;
    q.pos = i32(S) - i32(T) + i32(t);
    if (P[8] != 0u) {
        q.last = min(q.pos, i32(S) - 1);
        q.first = 0;
        if (P[9] > 0u) { q.first = max(0, q.pos - i32(P[9]) + 1); }
    } else {
        q.first = 0;
        q.last = i32(S) - 1;
    }
    return q;
}

fn kv_head(h: u32) -> u32 { return h / (P[4] / P[5]); }
fn q_at(row: u32, h: u32) -> u32 { return (row * P[4] + h) * P[6]; }
fn kv_at(key_row: u32, kvh: u32) -> u32 { return (key_row * P[5] + kvh) * P[6]; }
// [B, H, T] statistics of a dense query.
fn stat_at(q: Query) -> u32 {
    let T = P[2];
    return ((q.row / T) * P[4] + q.head) * T + q.row % T;
}
fn dense_key(q: Query, j: u32) -> u32 { return (q.row / P[2]) * P[3] + j; }
