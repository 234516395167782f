// ParsedProgram: a WorkerProgram (proto) checked and converted to domain
// types, the input of BufferSet and the executor.
//
// ParseProgram enforces docs/dataplane.md: ranks, device → worker rank map,
// tensors, this worker's buffers, and the steps it takes part in (relay
// chains: OP_BROADCAST and OP_SEND_RECV). Deps on steps outside the program
// are dropped (the contract says they are ignored); a dependency cycle is an
// error. Every error names the offending field and id.
//
//   ASSIGN_OR_RETURN(ParsedProgram program, ParseProgram(request.program()));
//
// Thread safety: a plain value; share it read-only between threads.
#ifndef MESHCAST_WORKER_PROGRAM_H_
#define MESHCAST_WORKER_PROGRAM_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "meshcast/v1/plan.pb.h"
#include "planner/tensor.h"

namespace meshcast::worker {

// Bounds that keep (step id, hop, chunk) packable into one 64-bit message
// tag (see relay_step.h).
// Step id (1 << 24) - 1 is reserved for control messages (barriers).
inline constexpr int kMaxStepId = (1 << 24) - 2;
inline constexpr int kMaxChainLength = 1 << 12;

enum class BufferRole { kSource, kDestination };

struct BufferDesc {
  int id = 0;
  int tensor = 0;
  int device = 0;
  Box box;
  BufferRole role = BufferRole::kSource;
};

// One relay chain: chain[0] sends `slice` of `tensor` to chain[1], which
// forwards it to chain[2], and so on.
struct StepDesc {
  int id = 0;
  int tensor = 0;
  Box slice;
  std::vector<int> chain;  // global device ids, rank order of the group
  int stage = 0;
  v1::Step::Op op = v1::Step::OP_BROADCAST;  // for metrics labels
  // Ids of steps of this program that must finish first.
  std::vector<int> deps;
  int64_t bytes = 0;  // NumElements(slice) * DTypeSize(dtype)
};

struct ParsedProgram {
  std::string job_id;
  std::string worker;
  int rank = 0;
  int world_size = 1;
  // Worker name by rank (empty, or world_size names), for messages.
  std::vector<std::string> rank_workers;
  std::vector<TensorSpec> tensors;
  std::vector<int> local_devices;
  absl::flat_hash_map<int, int> device_rank;  // global device -> worker rank
  std::vector<BufferDesc> buffers;            // buffers of local devices only
  std::vector<StepDesc> steps;                // steps touching a local device
  double predicted_seconds = 0;
  double lower_bound_seconds = 0;

  bool IsLocal(int device) const {
    auto it = device_rank.find(device);
    return it != device_rank.end() && it->second == rank;
  }
  int RankOf(int device) const { return device_rank.at(device); }
};

absl::StatusOr<ParsedProgram> ParseProgram(const v1::WorkerProgram& program);

}  // namespace meshcast::worker

#endif  // MESHCAST_WORKER_PROGRAM_H_
