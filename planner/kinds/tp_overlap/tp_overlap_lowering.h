// Lowering of a `tp_overlap` job (a tensor-parallel GEMM whose output feeds
// a reduce-scatter or all-reduce) to the plan IR, in one of three modes.
//
//   ASSIGN_OR_RETURN(TpLowering lowering,
//                    LowerTpOverlap(shape, TpMode::kFused, /*chunks=*/8,
//                                   devices, TpCostModel{}));
//   v1::Plan& plan = lowering.plan;  // not yet simulated
//
// Data. Rank r (devices[r], tp ranks) holds A_r = A[:, k_r] (m x k/tp) and
// B_r = B[k_r, :] (k/tp x n), k_r its k/tp columns of A / rows of B, A and B
// seeded random tensors (seeds 1 and 2). The output is sum_r A_r B_r,
// reduce-scattered (rows in tp equal pieces, piece r on rank r; m % tp == 0)
// or all-reduced (the whole output on every rank).
//
// Stages (Step.stage; the worker dispatches ready steps by (stage, id), so
// a lower stage goes first when several are ready):
//   0 kStageGemmAlone  the full GEMM A_r B_r alone on every rank, into a
//                      scratch tensor G [tp, m, n]: gemm_seconds;
//   1 kStageCommAlone  one collective of G alone (after every rank's stage
//                      0 GEMM) into a scratch tensor: comm_seconds;
//   2 kStageModeComm   the mode's communication and ring additions;
//   3 kStageModeGemm   the mode's GEMM steps.
// Every mode step depends, directly or through its chain, on the stage-1
// collective, so the mode phase starts on a rank when that rank has
// finished the collective alone. The mode's output is the job's only
// DESTINATION (verified); everything else is SCRATCH or SOURCE.
//
// Modes (Step ids are positions in plan.steps; deps always point back):
//  - kSequential = chunked with 1 chunk: the whole GEMM, then the whole
//    collective.
//  - kChunked, C chunks: the output rows in C blocks, chunk i of R_i rows
//    from row o_i. Tensors P_i [tp, R_i, n] (scratch) and Y_i [R_i, n]
//    (DESTINATION). On every rank the GEMMs of chunks 0..C-1 run in order
//    (a chain), writing P_i[r] = A_r[o_i : o_i + R_i, :] B_r; collective i
//    (OP_REDUCE_SCATTER / OP_ALL_REDUCE of P_i into Y_i) waits for chunk i's
//    GEMM on every rank and for collective i-1 (a chain). reduce_scatter:
//    R_i is a multiple of tp and rank r's piece of Y_i is rows
//    [r R_i/tp, (r+1) R_i/tp), i.e. global output rows
//    o_i + r R_i/tp .. o_i + (r+1) R_i/tp: rank r holds the r-th tp-th of
//    every chunk, not one contiguous block.
//  - kFused, C = tp * j chunks (T3's track & trigger): the output's rows in
//    tp ring pieces (piece c: reduce_scatter rows [c m/tp, (c+1) m/tp);
//    all_reduce: near-equal), each cut into j sub-chunks, each sub-chunk's
//    GEMM emitted as row tiles (TpCostModel::TileCount). Tensors:
//    P [tp, m, n] (partials, P[r] on rank r), ACC [tp-2, m, n] (running
//    sums, when tp > 2), Y [m, n] (DESTINATION: rank r's piece, or all of
//    it for all_reduce). Rank r computes pieces in the staggered order
//    c = r-1, r-2, ..., r (mod tp): the piece it sends at ring step 0
//    first, its own piece last. Ring step s = 0..tp-2: rank r sends its
//    running sum of piece c = r-s-1 (s = 0: P[r]; else ACC[s-1], same
//    coordinates) sub-chunk by sub-chunk to rank r+1 (OP_SEND_RECV in
//    operand form into a SCRATCH receive buffer of the same tensor and
//    coordinates), which adds its own P[r+1] sub-chunk (OP_COMPUTE
//    elementwise ADD) into ACC[s] (s < tp-2) or, at the last step, into its
//    Y piece. A send depends on exactly the tiles of its sub-chunk (or the
//    addition before it), never on unrelated tiles: the engine's
//    per-step dependency counter is T3's tracker, and its reaching zero the
//    trigger. all_reduce then runs an all-gather ring: at step s rank r
//    sends piece r-s of its Y buffer to rank r+1's Y buffer (same
//    coordinates). The p2p steps of one link (r -> r+1, one CommGroup
//    [devices[r], devices[r+1]]) are chained in ring order, and the first
//    depends on the stage-1 collective, so a receiver never waits on a step
//    that is not yet due.
// Every tensor element has one value wherever it is stored (plan.proto's
// value semantics), so the worker's float64 reference derives Y from the
// GEMM, ADD and collective steps alone, moves ignored.
//
// Errors: INVALID_ARGUMENT naming tp_overlap.chunks or tp_overlap.mode and
// the allowed values when the chunk count does not fit the mode, the rows
// and tp (CheckTpChunks).
//
// Thread safety: pure functions.
#ifndef MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_LOWERING_H_
#define MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast {

enum class TpMode { kSequential, kChunked, kFused, kAuto };

// "sequential", "chunked", "fused", "auto".
absl::string_view TpModeName(TpMode mode);

inline constexpr int kStageGemmAlone = 0;
inline constexpr int kStageCommAlone = 1;
inline constexpr int kStageModeComm = 2;
inline constexpr int kStageModeGemm = 3;

inline constexpr uint64_t kTpSeedA = 1;
inline constexpr uint64_t kTpSeedB = 2;

struct TpShape {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kFloat32;
  bool all_reduce = false;
};

// The planner's model of GEMM efficiency (tp_overlap_cost.h explains it)
// and the tiling of fused chunks.
struct TpCostModel {
  // Rows at which a GEMM slab runs at half the device's peak rate.
  double half_rate_rows = 16;
  // A fused sub-chunk's GEMM is cut into at most this many row tiles, each
  // of at least min_tile_rows rows (so a tile keeps >= 8/9 of the rate at
  // the default half_rate_rows). Tiles only cost here (each is a GEMM call
  // of its own, and a send waits for all of its sub-chunk's tiles), so
  // they stay few and large.
  int max_tiles_per_chunk = 2;
  int64_t min_tile_rows = 128;

  int TileCount(int64_t rows) const;

  // The model for the topology's devices: CPU-class rates (device_flops
  // below 1e13 FLOP/s) keep the defaults; GPU-class rates (an H100's
  // ~1e15) take half_rate_rows 128 (a block row per SM wave) and tiles of
  // at least 1024 rows.
  static TpCostModel ForDeviceFlops(double device_flops);
};

// "sequential", "chunked/4", "fused/8" (chunks = the total chunk count).
std::string TpStrategyName(TpMode mode, int chunks);

// OK when `chunks` (> 0) fits `mode` for this shape and tp ranks:
//  sequential: 1; chunked: 1..m/tp (reduce_scatter) or 1..m (all_reduce);
//  fused: tp * j with 1 <= j <= floor(m/tp), tp >= 2.
absl::Status CheckTpChunks(const TpShape& shape, int tp, TpMode mode,
                           int chunks);

// The chunk counts `mode` tries when chunks = 0 (see tp_overlap_cost.h),
// those CheckTpChunks accepts; empty if none does.
std::vector<int> TpCandidateChunks(const TpShape& shape, int tp, TpMode mode);

// `rows` cut into `parts` near-equal intervals from `first` (the first
// rows % parts one row longer).
std::vector<Interval> SplitRows(int64_t first, int64_t rows, int parts);

// Where the verified output lives: tensor `tensor` holds global output rows
// [first_row, first_row + its rows).
struct TpOutput {
  int tensor = 0;
  int64_t first_row = 0;
};

struct TpLowering {
  v1::Plan plan;
  std::vector<TpOutput> outputs;
  int comm_alone_step = 0;  // the stage-1 collective's step id
};

// kAuto is not a mode to lower (INVALID_ARGUMENT); chunks must pass
// CheckTpChunks. devices: the tp ranks' global device ids.
absl::StatusOr<TpLowering> LowerTpOverlap(const TpShape& shape, TpMode mode,
                                          int chunks,
                                          const std::vector<int>& devices,
                                          const TpCostModel& model);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_TP_OVERLAP_TP_OVERLAP_LOWERING_H_
