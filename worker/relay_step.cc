#include "worker/relay_step.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"

namespace meshcast::worker {
namespace {

// Receives a direct (zero-copy) segment keeps posted: no staging bounds
// them, and the more the peer finds posted the fewer sends wait for the
// receiver's ready message (docs/dataplane.md).
constexpr int kDirectWindow = 16;

// How a slice of `elements` is cut into chunks and staged.
struct ChunkLayout {
  int64_t chunk_elements = 1;
  int64_t chunks = 0;
  int depth = 1;           // chunks in flight per segment
  int64_t slot_bytes = 0;  // one staging slot
};

ChunkLayout LayoutOf(const StepDesc& step, int64_t elements, int element_size,
                     const RelayOptions& options) {
  ChunkLayout layout;
  layout.chunk_elements = std::max<int64_t>(
      1, RelayChunkBytes(step, options.chunk_bytes) / element_size);
  layout.chunks =
      (elements + layout.chunk_elements - 1) / layout.chunk_elements;
  layout.depth = static_cast<int>(std::clamp<int64_t>(
      options.pipeline_depth, 1, std::max<int64_t>(1, layout.chunks)));
  layout.slot_bytes = std::min(layout.chunk_elements, elements) * element_size;
  return layout;
}

// Element offset in `tile` of the first element of `slice` when the
// slice's row-major order is one contiguous range of the tile's (every
// dimension after the first one the slice spans more than one index of is
// the tile's full extent); -1 otherwise. Chunks of such a slice are sent
// straight from, and received straight into, the tile.
int64_t ContiguousOffset(const TileBuffer& tile, const Box& slice) {
  const Box& box = tile.box();
  if (box.size() != slice.size()) return -1;
  bool spanning = false;  // a dimension with more than one index was seen
  for (size_t d = 0; d < slice.size(); ++d) {
    if (spanning && slice[d].size() != box[d].size()) return -1;
    if (slice[d].size() > 1) spanning = true;
  }
  int64_t offset = 0;
  for (size_t d = 0; d < slice.size(); ++d) {
    offset = offset * box[d].size() + (slice[d].begin - box[d].begin);
  }
  return offset;
}

// The region the sender reads and the one every receiver writes: the
// step's slice of its tensor, or in the operand form of OP_SEND_RECV the
// input's and the output's regions (equal element counts; ParseProgram).
const Box& SendRegion(const StepDesc& step) {
  return step.operand_form ? step.inputs[0].box : step.slice;
}
const Box& ReceiveRegion(const StepDesc& step) {
  return step.operand_form ? step.outputs[0].box : step.slice;
}

// The tile of an operand-form step's operand on this worker.
absl::StatusOr<TileBuffer*> OperandTile(const BufferSet& buffers,
                                        const OperandDesc& operand,
                                        const char* what) {
  TileBuffer* tile = buffers.ById(operand.buffer);
  if (tile == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " buffer ", operand.buffer, " has no tile on this worker"));
  }
  return tile;
}

// A position of another worker whose parent is in a segment.
struct RemoteChild {
  int position = 0;
  int rank = 0;  // its worker
};

// A connected part of the relay tree on this worker (every position's
// parent is in it but the root's), with its staging slots (one chunk each)
// and the transfers in flight on them.
struct Segment {
  int root = 0;                       // where chunks arrive (or are packed: 0)
  std::vector<int> positions;         // ascending, the root first
  int source_rank = -1;               // worker of the root's parent; -1: none
  std::vector<RemoteChild> children;  // ascending positions
  // Direct (zero-copy) segments: chunks arrive in, or leave from, `tile`
  // at element `offset` (the slice is contiguous there), so no staging and
  // no slot limits how far ahead receives are posted. Otherwise chunks go
  // through `slots`.
  TileBuffer* tile = nullptr;
  int64_t offset = 0;
  int window = 1;  // chunks in flight each way
  std::vector<StagingBuffer> slots;  // from the worker's staging pool
  std::vector<std::unique_ptr<CommRequest>> receives;  // by chunk % window
  // By chunk % window, one per remote child: an entry (and its slot) is
  // free again once all of them are done.
  std::vector<std::vector<std::unique_ptr<CommRequest>>> sends;
};

class RelayRun {
 public:
  RelayRun(const StepDesc& step, const RelayEnvironment& env)
      : step_(step), env_(env), start_(absl::Now()) {}

  absl::Status Run() {
    const ParsedProgram& program = *env_.program;
    const int length = static_cast<int>(step_.chain.size());
    element_size_ = RelayElementSize(step_, program);
    elements_ = RelayElements(step_);
    if (elements_ == 0) return absl::OkStatus();

    // Resolve the tiles of the local positions.
    destinations_.assign(length, nullptr);
    bool all_local = true;
    for (int p = 0; p < length; ++p) {
      const int device = step_.chain[p];
      if (!program.IsLocal(device)) {
        all_local = false;
        continue;
      }
      if (step_.operand_form) {
        ASSIGN_OR_RETURN(
            TileBuffer * tile,
            OperandTile(*env_.buffers,
                        p == 0 ? step_.inputs[0] : step_.outputs[0],
                        p == 0 ? "inputs[0]" : "outputs[0]"));
        if (p == 0) {
          sender_ = tile;
        } else {
          destinations_[p] = tile;
        }
      } else if (p == 0) {
        ASSIGN_OR_RETURN(sender_, env_.buffers->SenderTile(device, step_.tensor,
                                                           step_.slice));
      } else {
        ASSIGN_OR_RETURN(
            destinations_[p],
            env_.buffers->ReceiverTile(device, step_.tensor, step_.slice));
      }
    }
    if (all_local) {
      return step_.operand_form ? CopyBetweenRegions() : CopyAlongTree();
    }
    if (env_.comm == nullptr) {
      return absl::FailedPreconditionError(
          "the chain crosses workers but this job has no communicator");
    }
    return Pipeline();
  }

 private:
  // Every hop is a copy from the parent's tile, in position order (parents
  // first), slice by slice so that a cancellation stops a gigabyte copy
  // within one slice.
  absl::Status CopyAlongTree() {
    const std::vector<BoxPiece> pieces =
        SplitBox(step_.slice, env_.slicing.elements(element_size_));
    for (int p = 1; p < static_cast<int>(step_.chain.size()); ++p) {
      const int parent = RelayParentOf(step_, p);
      const TileBuffer* from = parent == 0 ? sender_ : destinations_[parent];
      for (const BoxPiece& piece : pieces) {
        RETURN_IF_ERROR(env_.slicing.Next(*env_.cancellation));
        RETURN_IF_ERROR(destinations_[p]->CopyRegionFrom(*from, piece.box));
      }
      HopDone(p);
    }
    return absl::OkStatus();
  }

  // The operand form on one worker: element e of the input's region to
  // element e of the output's, one memcpy per piece where both regions are
  // contiguous in their tiles, through a bounded staging buffer otherwise.
  absl::Status CopyBetweenRegions() {
    const Box& from = SendRegion(step_);
    const Box& to = ReceiveRegion(step_);
    TileBuffer* destination = destinations_[1];
    if (destination == sender_ && from == to) return absl::OkStatus();
    const int64_t from_offset = ContiguousOffset(*sender_, from);
    const int64_t to_offset = ContiguousOffset(*destination, to);
    const int64_t piece =
        std::max<int64_t>(1, env_.slicing.elements(element_size_));
    std::vector<uint8_t> staging;
    if (from_offset < 0 || to_offset < 0) {
      staging.resize(std::min(piece, elements_) * element_size_);
    }
    for (int64_t first = 0; first < elements_; first += piece) {
      RETURN_IF_ERROR(env_.slicing.Next(*env_.cancellation));
      const int64_t last = std::min(elements_, first + piece);
      const size_t bytes = (last - first) * element_size_;
      if (staging.empty()) {
        std::memcpy(
            destination->bytes().data() + (to_offset + first) * element_size_,
            sender_->bytes().data() + (from_offset + first) * element_size_,
            bytes);
        continue;
      }
      const absl::Span<uint8_t> data = absl::MakeSpan(staging.data(), bytes);
      RETURN_IF_ERROR(sender_->PackSlice(from, first, last, data));
      RETURN_IF_ERROR(destination->UnpackSlice(to, first, last, data));
    }
    HopDone(1);
    return absl::OkStatus();
  }

  absl::Status Pipeline() {
    const ChunkLayout layout =
        LayoutOf(step_, elements_, element_size_, env_.options);
    chunk_elements_ = layout.chunk_elements;
    chunks_ = layout.chunks;
    if (chunks_ > kMaxChunksPerStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice needs ", chunks_, " chunks of ",
          RelayChunkBytes(step_, env_.options.chunk_bytes), " bytes; at most ",
          kMaxChunksPerStep, " fit in a message tag"));
    }
    depth_ = layout.depth;
    const int64_t slot_bytes = layout.slot_bytes;

    BuildSegments();
    for (Segment& segment : segments_) {
      // The tile chunks land in (the root receiver) or leave from (the
      // sender); the sender's tile is only read.
      TileBuffer* tile = segment.source_rank >= 0
                             ? destinations_[segment.root]
                             : const_cast<TileBuffer*>(sender_);
      const int64_t offset =
          tile == nullptr ? -1
                          : ContiguousOffset(*tile, segment.source_rank >= 0
                                                        ? ReceiveRegion(step_)
                                                        : SendRegion(step_));
      if (offset >= 0) {
        segment.tile = tile;
        segment.offset = offset;
        segment.window = static_cast<int>(std::min<int64_t>(
            chunks_, std::max(2 * depth_, kDirectWindow)));
      } else {
        segment.window = depth_;
        segment.slots.clear();
        for (int k = 0; k < depth_; ++k) {
          segment.slots.push_back(env_.staging_pool().Take(slot_bytes));
        }
      }
      segment.receives.resize(segment.window);
      segment.sends.resize(segment.window);
      for (auto& sends : segment.sends) sends.resize(segment.children.size());
      if (segment.source_rank >= 0) {
        for (int64_t c = 0; c < segment.window; ++c) {
          RETURN_IF_ERROR(PostReceive(segment, c));
        }
      }
    }

    for (int64_t c = 0; c < chunks_; ++c) {
      RETURN_IF_ERROR(env_.slicing.Next(*env_.cancellation));
      for (Segment& segment : segments_) {
        RETURN_IF_ERROR(ProcessChunk(segment, c));
      }
    }
    for (Segment& segment : segments_) {
      for (int slot = 0; slot < segment.window; ++slot) {
        RETURN_IF_ERROR(WaitSends(segment, slot));
      }
    }
    return absl::OkStatus();
  }

  // One pass in position order (parents come first): a local position joins
  // its parent's segment, or roots a new one fed by its parent's worker; a
  // remote position whose parent is local is a child of that segment.
  void BuildSegments() {
    const ParsedProgram& program = *env_.program;
    const int length = static_cast<int>(step_.chain.size());
    std::vector<int> segment_of(length, -1);  // -1: another worker's
    for (int p = 0; p < length; ++p) {
      const int parent = RelayParentOf(step_, p);
      const int joined = parent >= 0 ? segment_of[parent] : -1;
      if (!program.IsLocal(step_.chain[p])) {
        if (joined >= 0) {
          segments_[joined].children.push_back(
              {p, program.RankOf(step_.chain[p])});
        }
        continue;
      }
      if (joined >= 0) {
        segments_[joined].positions.push_back(p);
        segment_of[p] = joined;
        continue;
      }
      Segment segment;
      segment.root = p;
      segment.positions = {p};
      if (parent >= 0) {
        segment.source_rank = program.RankOf(step_.chain[parent]);
      }
      segment_of[p] = static_cast<int>(segments_.size());
      segments_.push_back(std::move(segment));
    }
  }

  // ProcessChunk for a direct segment: the chunk is in the tile already
  // (sender) or arrives there; the receive of chunk c + window is posted
  // as soon as chunk c is in, before anything else, so the peer always has
  // `window` receives to write into.
  absl::Status ProcessDirectChunk(Segment& segment, int64_t c) {
    const int index = static_cast<int>(c % segment.window);
    const absl::Span<uint8_t> data = SlotSpan(segment, c);
    if (segment.source_rank >= 0) {
      std::unique_ptr<CommRequest> receive = std::move(segment.receives[index]);
      RETURN_IF_ERROR(receive->Wait());
      if (c + segment.window < chunks_) {
        RETURN_IF_ERROR(PostReceive(segment, c + segment.window));
      }
    }
    if (!segment.children.empty()) {
      RETURN_IF_ERROR(WaitSends(segment, index));
      RETURN_IF_ERROR(StartSends(segment, index, data, c));
    }
    // Every local receiver but the root: the chunk is in the root's tile
    // (the sender's, or the receiver's it landed in).
    for (size_t i = 1; i < segment.positions.size(); ++i) {
      RETURN_IF_ERROR(destinations_[segment.positions[i]]->UnpackSlice(
          ReceiveRegion(step_), ChunkBegin(c), ChunkEnd(c), data));
    }
    if (c == chunks_ - 1) {
      for (int p : segment.positions) {
        if (p > 0) HopDone(p);
      }
    }
    return absl::OkStatus();
  }

  void HopDone(int position) const {
    if (env_.on_hop_done) {
      env_.on_hop_done(step_, position,
                       absl::ToDoubleSeconds(absl::Now() - start_));
    }
  }

  int64_t ChunkBegin(int64_t c) const { return c * chunk_elements_; }
  int64_t ChunkEnd(int64_t c) const {
    return std::min(elements_, (c + 1) * chunk_elements_);
  }
  // Where chunk c lives on this segment: its range of the tile (direct)
  // or its staging slot.
  absl::Span<uint8_t> SlotSpan(Segment& segment, int64_t c) {
    const size_t bytes = (ChunkEnd(c) - ChunkBegin(c)) * element_size_;
    if (segment.tile != nullptr) {
      return segment.tile->bytes().subspan(
          (segment.offset + ChunkBegin(c)) * element_size_, bytes);
    }
    return absl::MakeSpan(segment.slots[c % depth_].data(), bytes);
  }

  absl::Status PostReceive(Segment& segment, int64_t c) {
    ASSIGN_OR_RETURN(
        segment.receives[c % segment.window],
        env_.comm->StartRecv(SlotSpan(segment, c), segment.source_rank,
                             MessageTag(step_.id, segment.root, c)));
    return absl::OkStatus();
  }

  // Sends chunk c (`data`) to every remote child of the segment from
  // window entry `index`, whose previous sends are done.
  absl::Status StartSends(Segment& segment, int index,
                          absl::Span<const uint8_t> data, int64_t c) {
    std::vector<std::unique_ptr<CommRequest>>& sends = segment.sends[index];
    for (size_t k = 0; k < segment.children.size(); ++k) {
      const RemoteChild& child = segment.children[k];
      ASSIGN_OR_RETURN(sends[k], env_.comm->StartSend(
                                     data, child.rank,
                                     MessageTag(step_.id, child.position, c)));
    }
    return absl::OkStatus();
  }

  // Waits for every send of window entry `index`, which frees its slot.
  absl::Status WaitSends(Segment& segment, int index) {
    for (std::unique_ptr<CommRequest>& entry : segment.sends[index]) {
      std::unique_ptr<CommRequest> send = std::move(entry);
      if (send) RETURN_IF_ERROR(send->Wait());
    }
    return absl::OkStatus();
  }

  absl::Status ProcessChunk(Segment& segment, int64_t c) {
    if (segment.tile != nullptr) return ProcessDirectChunk(segment, c);
    const int slot = static_cast<int>(c % depth_);
    const absl::Span<uint8_t> data = SlotSpan(segment, c);
    // 1. Get chunk c into its slot; the slot's previous sends must be done.
    if (segment.source_rank >= 0) {
      if (!segment.receives[slot]) {
        RETURN_IF_ERROR(WaitSends(segment, slot));
        RETURN_IF_ERROR(PostReceive(segment, c));
      }
      std::unique_ptr<CommRequest> receive = std::move(segment.receives[slot]);
      RETURN_IF_ERROR(receive->Wait());
    } else {
      RETURN_IF_ERROR(WaitSends(segment, slot));
      RETURN_IF_ERROR(sender_->PackSlice(SendRegion(step_), ChunkBegin(c),
                                         ChunkEnd(c), data));
    }
    // 2. Forward before the local copies, to keep the relay moving.
    RETURN_IF_ERROR(StartSends(segment, slot, data, c));
    // 3. Local receivers (position 0 is the sender, not a receiver).
    for (int p : segment.positions) {
      if (p == 0) continue;
      RETURN_IF_ERROR(destinations_[p]->UnpackSlice(
          ReceiveRegion(step_), ChunkBegin(c), ChunkEnd(c), data));
      if (c == chunks_ - 1) HopDone(p);
    }
    // 4. Keep `depth_` receives posted: re-post into the slot freed last
    // (a forwarding segment frees a slot only when all its sends are done).
    if (segment.source_rank >= 0) {
      const int64_t next = c + depth_ - (segment.children.empty() ? 0 : 1);
      if (next > c && next < chunks_ && !segment.receives[next % depth_]) {
        RETURN_IF_ERROR(WaitSends(segment, next % depth_));
        RETURN_IF_ERROR(PostReceive(segment, next));
      }
    }
    return absl::OkStatus();
  }

  const StepDesc& step_;
  const RelayEnvironment& env_;
  const absl::Time start_;
  int element_size_ = 1;
  int64_t elements_ = 0;
  int64_t chunk_elements_ = 1;
  int64_t chunks_ = 0;
  int depth_ = 1;
  const TileBuffer* sender_ = nullptr;
  std::vector<TileBuffer*> destinations_;  // by chain position
  // Declared last: destroyed first, so no transfer outlives its slot.
  std::vector<Segment> segments_;
};

}  // namespace

int64_t RelayStagingBytes(const StepDesc& step, const ParsedProgram& program,
                          const RelayOptions& options) {
  const int64_t elements = RelayElements(step);
  if (elements == 0) return 0;
  // Segments, as ExecuteRelayStep builds them: one per local position
  // without a local parent; none if all positions are local.
  int segments = 0;
  bool all_local = true;
  for (int p = 0; p < static_cast<int>(step.chain.size()); ++p) {
    const int parent = RelayParentOf(step, p);
    if (!program.IsLocal(step.chain[p])) {
      all_local = false;
    } else if (parent < 0 || !program.IsLocal(step.chain[parent])) {
      ++segments;
    }
  }
  if (all_local) return 0;
  const ChunkLayout layout =
      LayoutOf(step, elements, RelayElementSize(step, program), options);
  return segments * layout.depth * layout.slot_bytes;
}

absl::Status ExecuteRelayStep(const StepDesc& step,
                              const RelayEnvironment& env) {
  absl::Status status = RelayRun(step, env).Run();
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(DescribeRelayStep(step),
                                                  ": ", status.message()));
}

}  // namespace meshcast::worker
