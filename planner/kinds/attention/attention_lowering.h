// Lowering of an `attention` job (self-attention over a sequence split
// across a sequence-parallel group) to the plan IR, in one of three
// algorithms, and the sequence layouts they share.
//
//   AttentionShape shape;  shape.heads = 8; shape.seq_len = 4096; ...
//   ASSIGN_OR_RETURN(v1::Plan plan, LowerAttention(shape,
//                    AttentionAlgorithm::kRing, devices));
//
// Layout. The P devices of the group each hold L = S / P rows of the
// sequence. Tensors keep the sequence dimension in *layout order*: device p
// holds layout rows [p L, (p+1) L) of Q, K, V and O, and layout row r is
// global position LayoutPosition(r) (contiguous: r; zigzag: the sequence
// cut in 2P chunks of L / 2, device p holding chunks p and 2P - 1 - p, so
// that causal work is balanced; striped: device p holding positions p, p +
// P, p + 2P, ...). Causal masks compare global positions, so every layout
// computes the same attention; only who holds which row changes.
//
// Data (seeded random, uniform in [-1, 1)): Q [B, H, S, D] (tensor 0), K
// and V [B, Hkv, S, D] (1, 2); the output O [B, H, S, D] (tensor 3, the
// job's DESTINATION, each device its L rows) = softmax(scale Q K^T + mask)
// V per head, head h reading kv head h / (H / Hkv), scale = 1/sqrt(D). A
// query row with no unmasked key gets zeros (none happens with causal
// masks: every row sees itself).
//
// Backward (`backward`, pass forward_backward): after the forward, the
// gradients against a seeded random dO [B, H, S, D] (tensor 4, seed 4):
// dQ [B, H, S, D] (tensor 5) and dK, dV as dKV [2, B, Hkv, S, D] (tensor
// 6), each device its L rows, DESTINATION like O. Compute: two
// attention_backward steps per block (dQ of the device's rows; dK and dV
// of the block's keys), recomputing P from the forward's state.
//  - kRing: K and V go around the ring again; each block's dK / dV
//    accumulator travels with it and, after P steps, lands on the block's
//    owner. Each device computes its part of a block's dK and dV into a
//    scratch of its own and adds it to the accumulator when that arrives,
//    so both transfers (K/V and the accumulator) overlap the gradient
//    GEMMs; only the add waits for the accumulator.
//  - kRsa: the same ring without overlap (every transfer waits for the
//    previous block's compute on both ends); only V and the accumulators
//    travel (every device holds every K block since the forward).
//  - kUlysses: dO to head-sharded by one more all-to-all, the gradients
//    over the whole sequence, and dQ, dK, dV back by three.
//
// Algorithms (compute: attention_block steps with the online-softmax
// state, then attention_finish; plan.proto):
//  - kRing: one pass; K and V blocks travel around the ring together in
//    double-buffered slots; the transfer of the next block runs while this
//    block is computed. P - 1 steps of send/recv. Blocks that a causal mask
//    hides entirely are passed on but not computed.
//  - kRsa: two passes without overlap, the seed paper's RSA: first every K
//    block goes around the ring and each device keeps all of them (the
//    memory RSA spends on its score matrix), then the V blocks go around
//    and each is computed on arrival; no transfer starts before the
//    computation of the previous block is done on both ends.
//  - kUlysses: all-to-all from sequence-sharded to head-sharded (each
//    device gets H / P heads of the whole sequence; Hkv / P kv heads), one
//    attention over all S rows, and the all-to-all back. Needs H and Hkv
//    divisible by P.
// Stages (Step.stage): AttentionPhase.
//
// Errors: INVALID_ARGUMENT when the shape does not fit the group (the kind
// validates first; these guard direct callers). Thread safety: pure.
#ifndef MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_LOWERING_H_
#define MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast {

enum class AttentionLayout { kContiguous, kZigzag, kStriped };
enum class AttentionAlgorithm { kRsa, kRing, kUlysses, kAuto };

std::string AttentionLayoutName(AttentionLayout layout);
std::string AttentionAlgorithmName(AttentionAlgorithm algorithm);
// "contiguous" (or empty), "zigzag", "striped".
absl::StatusOr<AttentionLayout> AttentionLayoutFromName(absl::string_view name);
// "rsa", "ring", "ulysses", "auto" (or empty).
absl::StatusOr<AttentionAlgorithm> AttentionAlgorithmFromName(
    absl::string_view name);

struct AttentionShape {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t seq_len = 1;
  int64_t head_dim = 1;
  int ranks = 1;  // P
  bool causal = false;
  AttentionLayout layout = AttentionLayout::kContiguous;
  DType dtype = DType::kFloat32;
  uint64_t seed = 1;
  bool backward = false;  // pass forward_backward

  int64_t rows() const { return seq_len / ranks; }  // L
  // The global position of layout row r (see the top of the file).
  int64_t LayoutPosition(int64_t r) const;
  // Whether query rows of device p see any key of device q's block.
  bool BlockVisible(int p, int q) const;
};

enum AttentionPhase : int {
  kAttentionExchange = 0,  // K/V transfers, all-to-alls, layout copies
  kAttentionCompute = 1,   // attention blocks and the finish
};

// Tensor ids of every lowering; the last three with `backward` only.
inline constexpr int kAttentionQ = 0, kAttentionK = 1, kAttentionV = 2,
                     kAttentionO = 3, kAttentionDO = 4, kAttentionDQ = 5,
                     kAttentionDKV = 6;

// The plan of `algorithm` (not kAuto) on `devices` (P global ids, the
// group in rank order). Not simulated.
absl::StatusOr<v1::Plan> LowerAttention(const AttentionShape& shape,
                                        AttentionAlgorithm algorithm,
                                        const std::vector<int>& devices);

}  // namespace meshcast

#endif  // MESHCAST_PLANNER_KINDS_ATTENTION_ATTENTION_LOWERING_H_
