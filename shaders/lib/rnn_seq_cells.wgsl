// The cells of the sequence kernels (rnn_seq.wgsl, rnn_backward_seq.wgsl), which walk every
// step of a recurrence in one dispatch: a workgroup of 256 invocations owns RG * RP batch rows,
// and invocation li = (lane, rq) = (li % 64, li / 64) owns cell e = 2 i + u for i < RP and
// u < UPI: row rq * RP + i of the workgroup's rows and hidden unit lane + 64 u, so per-cell
// arrays hold CELLS entries. The including file's `p` has `batch` and `hidden`.

// Units per invocation: 1 (H <= 64, what the planner runs) or 2 (H <= 128, which no plan
// takes: slower on the H200 than a dispatch per step).
override UPI: u32 = 1u;
// Batch rows per invocation: 1, 2 or 4.
override RP: u32 = 1u;

// Row groups per workgroup (256 invocations of 64 lanes), and cells per invocation at most.
const RG: u32 = 4u;
const CELLS: u32 = 8u;

// Batch rows per workgroup.
fn rows() -> u32 {
    return RG * RP;
}

// Cell e of invocation li in workgroup wid: its batch row b, unit j and row r within the
// workgroup; `ok` when e is one of the invocation's RP x UPI cells and b and j are in range.
struct Cell {
    b: u32,
    j: u32,
    r: u32,
    ok: bool,
}

fn cell(wid: u32, li: u32, e: u32) -> Cell {
    let i = e / 2u;
    let u = e % 2u;
    let r = (li / 64u) * RP + i;
    let b = wid * rows() + r;
    let j = li % 64u + 64u * u;
    return Cell(b, j, r, i < RP && u < UPI && b < p.batch && j < p.hidden);
}
