// CollectiveExchange: what the GPU collectives send and receive between
// workers (device_collectives.h), as pure functions, so that a host test
// can simulate every worker of random groups without a GPU and check that
// the point-to-point operations match, group call by group call, and that
// the reductions combine every worker's contribution exactly once.
//
// A group's ranks live on m workers, indexed in order of first appearance
// in the group (GroupLayout). Each worker exchanges through one NCCL rank
// (its leader); an Exchange lists, for one worker, the NCCL group calls it
// issues in order, each a list of Transfers (send or receive, peer worker
// index, region, offset and length in elements), and the reductions it
// runs after each group call (staging range into accumulator range).
//
//   ASSIGN_OR_RETURN(GroupLayout layout, GroupLayout::Create(worker_ids));
//   Exchange x = AllReduceExchange(layout, me, elements);
//   for (size_t g = 0; g < x.groups.size(); ++g) { issue x.groups[g];
//                                                  run x.reductions[g]; }
//
// Matching (what NCCL needs and the test checks): for every pair of
// workers (a, b), the k-th send from a to b and the k-th receive on b from
// a have the same length and sit in the same group call index on both
// sides, so no group waits for a later group of its peer.
//
//  - AllReduceExchange: `elements` cut into m pieces (ceil(elements / m));
//    group 0 sends piece w to worker w and receives m - 1 copies of its own
//    piece into staging, reduced into the accumulator after it; group 1
//    sends the reduced piece to every worker and receives every other
//    piece into the accumulator.
//  - ReduceScatterExchange: rank r's chunk (ceil(rows / n) rows of
//    `row_elements`); group 0 sends the chunk of every rank of another
//    worker to that worker (ascending rank order) and receives, for each
//    local rank (ascending) from each other worker (ascending), that chunk
//    into staging, reduced into the accumulator's chunk after it.
//  - AllGatherExchange: group 0 sends this worker's bundle to every other
//    worker and receives theirs (kIncoming, one buffer per peer).
//  - AllToAllExchange: group 0 sends one bundle per peer (kOutgoing) and
//    receives one (kIncoming); BundleBlocks gives the (sender rank,
//    receiver rank) blocks of a bundle in the order both ends use.
// Empty transfers are listed (length 0); the device code skips them on
// both ends alike.
//
// Thread safety: pure functions.
#ifndef MESHCAST_WORKER_CUDA_COLLECTIVE_EXCHANGE_H_
#define MESHCAST_WORKER_CUDA_COLLECTIVE_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/tensor.h"

namespace meshcast::worker::cuda {

class GroupLayout {
 public:
  // `worker_of_rank`: any worker id per group rank (e.g. WorkerProgram
  // ranks). INVALID_ARGUMENT for an empty group.
  static absl::StatusOr<GroupLayout> Create(
      const std::vector<int>& worker_of_rank);

  int n() const { return static_cast<int>(index_of_rank_.size()); }
  int m() const { return static_cast<int>(ranks_of_.size()); }
  // Worker index (order of first appearance) of group rank r.
  int WorkerOf(int r) const { return index_of_rank_[r]; }
  // Worker index of worker id `id`; -1 if it holds no rank.
  int IndexOfId(int id) const;
  // The group ranks of worker index w, ascending.
  const std::vector<int>& RanksOf(int w) const { return ranks_of_[w]; }

 private:
  std::vector<int> index_of_rank_;
  std::vector<int> ids_;  // worker id by index
  std::vector<std::vector<int>> ranks_of_;
};

enum class Region {
  kAccumulator,  // the reduction's accumulator (all elements)
  kStaging,      // received pieces before they are reduced
  kBundle,       // this worker's all-gather bundle
  kOutgoing,     // the all-to-all bundle for `peer`
  kIncoming,     // what `peer` sent (all-gather, all-to-all)
};

struct Transfer {
  bool send = true;
  int peer = 0;  // worker index
  Region region = Region::kAccumulator;
  int64_t offset = 0;  // elements, into the region (per peer for
                       // kOutgoing / kIncoming)
  int64_t length = 0;  // elements
};

struct Reduction {
  int64_t staging_offset = 0;      // elements into kStaging
  int64_t accumulator_offset = 0;  // elements into kAccumulator
  int64_t length = 0;
};

struct Exchange {
  std::vector<std::vector<Transfer>> groups;      // NCCL group calls, in order
  std::vector<std::vector<Reduction>> reductions;  // after each group call
  int64_t staging_elements = 0;
  // Elements of kOutgoing / kIncoming per peer worker index.
  std::vector<int64_t> outgoing_elements;
  std::vector<int64_t> incoming_elements;
};

// A half-open range of elements.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t length() const { return end - begin; }
};

// Piece w of m of `elements` (ceil(elements / m) each, the last shorter or
// empty).
ElementRange AllReducePiece(int64_t elements, int m, int w);
// Rank r's reduce-scatter chunk: rows [r c, (r + 1) c) clamped, c =
// ceil(rows / n), times row_elements.
ElementRange ReduceScatterChunk(int64_t rows, int64_t row_elements, int n,
                                int r);

Exchange AllReduceExchange(const GroupLayout& layout, int me,
                           int64_t elements);
Exchange ReduceScatterExchange(const GroupLayout& layout, int me, int64_t rows,
                               int64_t row_elements);
// bundle_elements[w]: elements of worker w's bundle.
Exchange AllGatherExchange(const GroupLayout& layout, int me,
                           const std::vector<int64_t>& bundle_elements);
// counts: n x n elements, row-major (rank r sends counts[r n + t] to t).
Exchange AllToAllExchange(const GroupLayout& layout, int me,
                          const std::vector<int64_t>& counts);

// The (sender rank, receiver rank) blocks of the all-to-all bundle from
// worker index `from` to worker index `to`: sender ranks ascending, then
// receiver ranks ascending.
std::vector<std::pair<int, int>> BundleBlocks(const GroupLayout& layout,
                                              int from, int to);

// The boxes of a worker's all-gather input buffers, as text for the
// rendezvous store ("id:b-e,b-e;id:..."), so that a worker can learn the
// extents of other workers' inputs named without a slice (a program holds
// only its own buffers). Decode is INVALID_ARGUMENT naming the text for
// anything malformed.
std::string EncodeBufferBoxes(const std::vector<std::pair<int, Box>>& boxes);
absl::StatusOr<std::vector<std::pair<int, Box>>> DecodeBufferBoxes(
    const std::string& text);

}  // namespace meshcast::worker::cuda

#endif  // MESHCAST_WORKER_CUDA_COLLECTIVE_EXCHANGE_H_
