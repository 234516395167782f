#include "worker/engine/collectives.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "worker/box_runs.h"
#include "worker/kernels/reduce.h"

namespace meshcast::worker {
namespace {

// The group's workers in ring order (first appearance in the group) and
// the group ranks each of them drives.
struct GroupLayout {
  std::vector<int> workers;             // worker ranks
  std::vector<std::vector<int>> ranks;  // group ranks, by index in workers
  int me = -1;                          // this worker's index
  int m() const { return static_cast<int>(workers.size()); }
  int next() const { return workers[(me + 1) % m()]; }
  int prev() const { return workers[(me + m() - 1) % m()]; }
  int At(int k) const { return ((me + k) % m() + m()) % m(); }
};

GroupLayout LayoutOf(const StepDesc& step, const ParsedProgram& program) {
  GroupLayout layout;
  for (int r = 0; r < static_cast<int>(step.chain.size()); ++r) {
    const int worker = program.RankOf(step.chain[r]);
    auto it = std::find(layout.workers.begin(), layout.workers.end(), worker);
    if (it == layout.workers.end()) {
      layout.workers.push_back(worker);
      layout.ranks.emplace_back();
      it = layout.workers.end() - 1;
    }
    layout.ranks[it - layout.workers.begin()].push_back(r);
    if (worker == program.rank) layout.me = it - layout.workers.begin();
  }
  return layout;
}

absl::StatusOr<TileBuffer*> LocalTile(const StepEnvironment& env,
                                      const OperandDesc& operand,
                                      absl::string_view what, int rank) {
  TileBuffer* tile = env.buffers->ById(operand.buffer);
  if (tile == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "[", rank, "]: buffer ", operand.buffer,
                     " has no tile on this worker"));
  }
  return tile;
}

absl::Status NeedCommunicator(const StepEnvironment& env) {
  if (env.comm != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the group spans workers but this job has no communicator");
}

// Sends `out` to worker `to` and receives `in` from worker `from` in chunks
// of about chunk_bytes (whole elements), up to pipeline_depth chunks in
// flight each way; calls on_chunk(first_byte, bytes) for each received
// chunk, in order, as it lands. Tags: MessageTag(step, phase, chunk).
absl::Status Exchange(
    const StepEnvironment& env, const StepDesc& step, int phase, int to,
    absl::Span<const uint8_t> out, int from, absl::Span<uint8_t> in,
    int element_size,
    absl::FunctionRef<absl::Status(int64_t, int64_t)> on_chunk) {
  if (phase >= kMaxChainLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "phase ", phase, " does not fit in a message tag (at most ",
        kMaxChainLength - 1, ")"));
  }
  const int64_t chunk =
      std::max<int64_t>(1, env.options.chunk_bytes / element_size) *
      element_size;
  const int64_t send_chunks =
      (static_cast<int64_t>(out.size()) + chunk - 1) / chunk;
  const int64_t recv_chunks =
      (static_cast<int64_t>(in.size()) + chunk - 1) / chunk;
  if (std::max(send_chunks, recv_chunks) > kMaxChunksPerStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("a phase of ", std::max(out.size(), in.size()),
                     " bytes needs more "
                     "than ",
                     kMaxChunksPerStep, " chunks of ", chunk, " bytes"));
  }
  const int depth = std::max(1, env.options.pipeline_depth);
  auto span_of = [chunk](auto data, int64_t c) {
    const int64_t begin = c * chunk;
    return data.subspan(begin, std::min<int64_t>(chunk, data.size() - begin));
  };
  std::deque<std::unique_ptr<CommRequest>> receives;  // chunks posted - done
  std::deque<std::unique_ptr<CommRequest>> sends;
  int64_t posted = 0;
  auto post = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(receives.emplace_back(),
                     env.comm->StartRecv(span_of(in, posted), from,
                                         MessageTag(step.id, phase, posted)));
    ++posted;
    return absl::OkStatus();
  };
  while (posted < std::min<int64_t>(depth, recv_chunks))
    RETURN_IF_ERROR(post());
  for (int64_t c = 0; c < std::max(send_chunks, recv_chunks); ++c) {
    RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
    if (c < send_chunks) {
      if (static_cast<int>(sends.size()) >= depth) {
        std::unique_ptr<CommRequest> done = std::move(sends.front());
        sends.pop_front();
        RETURN_IF_ERROR(done->Wait());
      }
      ASSIGN_OR_RETURN(sends.emplace_back(),
                       env.comm->StartSend(span_of(out, c), to,
                                           MessageTag(step.id, phase, c)));
    }
    if (c < recv_chunks) {
      std::unique_ptr<CommRequest> done = std::move(receives.front());
      receives.pop_front();
      RETURN_IF_ERROR(done->Wait());
      if (posted < recv_chunks) RETURN_IF_ERROR(post());
      const absl::Span<uint8_t> data = span_of(in, c);
      RETURN_IF_ERROR(on_chunk(c * chunk, data.size()));
    }
  }
  while (!sends.empty()) {
    std::unique_ptr<CommRequest> done = std::move(sends.front());
    sends.pop_front();
    RETURN_IF_ERROR(done->Wait());
  }
  return absl::OkStatus();
}

// Element ranges [begin, end) of a flat accumulator, in order: the part of
// it one worker owns in a ring.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
};
using Piece = std::vector<Range>;

int64_t PieceElements(const Piece& piece) {
  int64_t total = 0;
  for (const Range& range : piece) total += range.end - range.begin;
  return total;
}

// Calls fn(accumulator element, packed element, length) for the runs of
// packed elements [first, first + length) of `piece`.
template <typename Fn>
absl::Status ForEachPieceRun(const Piece& piece, int64_t first, int64_t length,
                             Fn fn) {
  int64_t packed = 0;
  for (const Range& range : piece) {
    const int64_t size = range.end - range.begin;
    const int64_t lo = std::max(first, packed);
    const int64_t hi = std::min(first + length, packed + size);
    if (lo < hi) RETURN_IF_ERROR(fn(range.begin + lo - packed, lo, hi - lo));
    packed += size;
  }
  return absl::OkStatus();
}

// Copies the local work of a step in slices, checking for an abort.
absl::Status Sliced(const StepEnvironment& env, int64_t elements,
                    int element_size,
                    absl::FunctionRef<absl::Status(int64_t, int64_t)> fn) {
  const int64_t slice = env.slicing.elements(element_size);
  for (int64_t first = 0; first < elements; first += slice) {
    RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
    RETURN_IF_ERROR(fn(first, std::min(elements, first + slice)));
  }
  return absl::OkStatus();
}

// The reduction of the local ranks' inputs (each `elements` long) into a
// new accumulator (staged; every byte written here).
absl::StatusOr<StagingBuffer> ReduceLocalInputs(const StepDesc& step,
                                                const StepEnvironment& env,
                                                const GroupLayout& layout,
                                                DType dtype, int64_t elements) {
  const int size = DTypeSize(dtype);
  StagingBuffer acc = env.staging_pool().Take(elements * size);
  StagingBuffer scratch;
  bool first = true;
  for (int r : layout.ranks[layout.me]) {
    const OperandDesc& input = step.inputs[r];
    if (NumElements(input.box) != elements) {
      return absl::FailedPreconditionError(
          absl::StrCat("inputs[", r, "] (buffer ", input.buffer, ") ",
                       BoxToString(input.box), " has ", NumElements(input.box),
                       " elements; the output tensor has ", elements));
    }
    ASSIGN_OR_RETURN(const TileBuffer* tile,
                     LocalTile(env, input, "inputs", r));
    if (tile->dtype() != dtype) {
      return absl::FailedPreconditionError(absl::StrCat(
          "inputs[", r, "] (buffer ", input.buffer, ") is ",
          DTypeName(tile->dtype()), "; the output is ", DTypeName(dtype)));
    }
    if (first) {
      RETURN_IF_ERROR(Sliced(env, elements, size, [&](int64_t a, int64_t b) {
        return tile->PackSlice(input.box, a, b,
                               acc.span().subspan(a * size, (b - a) * size));
      }));
      first = false;
      continue;
    }
    if (scratch.size() == 0) scratch = env.staging_pool().Take(acc.size());
    RETURN_IF_ERROR(Sliced(env, elements, size, [&](int64_t a, int64_t b) {
      const absl::Span<uint8_t> part =
          scratch.span().subspan(a * size, (b - a) * size);
      RETURN_IF_ERROR(tile->PackSlice(input.box, a, b, part));
      return ReduceInto(step.reduction, dtype, part,
                        acc.span().subspan(a * size, (b - a) * size));
    }));
  }
  return acc;
}

// Ring reduce-scatter over the workers' pieces of `acc` (worker index w
// ends with the full reduction of pieces[w]), then, when `gather`, a ring
// all-gather of the reduced pieces.
absl::Status ReduceRing(const StepDesc& step, const StepEnvironment& env,
                        const GroupLayout& layout,
                        const std::vector<Piece>& pieces, DType dtype,
                        absl::Span<uint8_t> acc, bool gather) {
  const int m = layout.m();
  if (m == 1) return absl::OkStatus();
  RETURN_IF_ERROR(NeedCommunicator(env));
  const int size = DTypeSize(dtype);
  int64_t largest = 0;
  for (const Piece& piece : pieces) {
    largest = std::max(largest, PieceElements(piece));
  }
  StagingBuffer out = env.staging_pool().Take(largest * size);
  StagingBuffer in = env.staging_pool().Take(largest * size);
  auto pack = [&](const Piece& piece) -> absl::Span<const uint8_t> {
    int64_t packed = 0;
    for (const Range& range : piece) {
      std::memcpy(out.data() + packed * size, acc.data() + range.begin * size,
                  (range.end - range.begin) * size);
      packed += range.end - range.begin;
    }
    return out.span().subspan(0, packed * size);
  };
  for (int k = 0; k < m - 1; ++k) {
    const Piece& send = pieces[layout.At(-k - 1)];
    const Piece& receive = pieces[layout.At(-k - 2)];
    const absl::Span<uint8_t> into =
        in.span().subspan(0, PieceElements(receive) * size);
    RETURN_IF_ERROR(Exchange(
        env, step, k, layout.next(), pack(send), layout.prev(), into, size,
        [&](int64_t first_byte, int64_t bytes) {
          return ForEachPieceRun(
              receive, first_byte / size, bytes / size,
              [&](int64_t at, int64_t packed, int64_t length) {
                return ReduceInto(step.reduction, dtype,
                                  into.subspan(packed * size, length * size),
                                  acc.subspan(at * size, length * size));
              });
        }));
  }
  if (!gather) return absl::OkStatus();
  for (int k = 0; k < m - 1; ++k) {
    const Piece& send = pieces[layout.At(-k)];
    const Piece& receive = pieces[layout.At(-k - 1)];
    const absl::Span<uint8_t> into =
        in.span().subspan(0, PieceElements(receive) * size);
    RETURN_IF_ERROR(Exchange(
        env, step, m - 1 + k, layout.next(), pack(send), layout.prev(), into,
        size, [&](int64_t first_byte, int64_t bytes) {
          return ForEachPieceRun(
              receive, first_byte / size, bytes / size,
              [&](int64_t at, int64_t packed, int64_t length) {
                std::memcpy(acc.data() + at * size, into.data() + packed * size,
                            length * size);
                return absl::OkStatus();
              });
        }));
  }
  return absl::OkStatus();
}

// The output tensor of a reduction (from this worker's outputs; they all
// name buffers of the same tensor).
absl::StatusOr<int> OutputTensor(const StepDesc& step,
                                 const GroupLayout& layout) {
  int tensor = -1;
  for (int r : layout.ranks[layout.me]) {
    const OperandDesc& output = step.outputs[r];
    if (tensor >= 0 && output.tensor != tensor) {
      return absl::FailedPreconditionError(absl::StrCat(
          "outputs[", r, "] (buffer ", output.buffer, ") is of tensor ",
          output.tensor, ", the other outputs of tensor ", tensor));
    }
    tensor = output.tensor;
  }
  return tensor;
}

// Copies `region` from `src` (row-major over src_box) into `dst` (row-major
// over dst_box).
void CopyRegion(const uint8_t* src, const Box& src_box, uint8_t* dst,
                const Box& dst_box, const Box& region, int size) {
  ForEachRun(region, src_box, dst_box, 0, NumElements(region),
             [&](int64_t a, int64_t b, int64_t length) {
               std::memcpy(dst + b * size, src + a * size, length * size);
             });
}

}  // namespace

absl::Status RunAllReduce(const StepDesc& step, const StepEnvironment& env) {
  const ParsedProgram& program = *env.program;
  const GroupLayout layout = LayoutOf(step, program);
  ASSIGN_OR_RETURN(const int tensor, OutputTensor(step, layout));
  const TensorSpec& spec = program.tensors[tensor];
  const int size = DTypeSize(spec.dtype);
  const int64_t elements = NumElements(spec.full_box());
  ASSIGN_OR_RETURN(StagingBuffer acc,
                   ReduceLocalInputs(step, env, layout, spec.dtype, elements));
  const int m = layout.m();
  std::vector<Piece> pieces(m);
  for (int w = 0; w < m; ++w) {
    pieces[w] = {{elements * w / m, elements * (w + 1) / m}};
  }
  RETURN_IF_ERROR(ReduceRing(step, env, layout, pieces, spec.dtype, acc.span(),
                             /*gather=*/true));
  for (int r : layout.ranks[layout.me]) {
    const OperandDesc& output = step.outputs[r];
    if (NumElements(output.box) != elements) {
      return absl::FailedPreconditionError(absl::StrCat(
          "outputs[", r, "] (buffer ", output.buffer, ") ",
          BoxToString(output.box), " is not the whole output tensor ", tensor));
    }
    ASSIGN_OR_RETURN(TileBuffer * tile, LocalTile(env, output, "outputs", r));
    RETURN_IF_ERROR(Sliced(env, elements, size, [&](int64_t a, int64_t b) {
      return tile->UnpackSlice(
          output.box, a, b,
          std::as_const(acc).span().subspan(a * size, (b - a) * size));
    }));
  }
  return absl::OkStatus();
}

absl::Status RunReduceScatter(const StepDesc& step,
                              const StepEnvironment& env) {
  const ParsedProgram& program = *env.program;
  const GroupLayout layout = LayoutOf(step, program);
  ASSIGN_OR_RETURN(const int tensor, OutputTensor(step, layout));
  const TensorSpec& spec = program.tensors[tensor];
  if (spec.shape.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the output tensor ", tensor,
                     " is a scalar; reduce-scatter chunks "
                     "its dimension 0"));
  }
  const int size = DTypeSize(spec.dtype);
  const int64_t elements = NumElements(spec.full_box());
  const int n = static_cast<int>(step.chain.size());
  const int64_t rows = spec.shape[0];
  const int64_t inner = elements / rows;
  const int64_t chunk_rows = (rows + n - 1) / n;
  auto chunk_of = [&](int r) {
    return Range{std::min(rows, r * chunk_rows) * inner,
                 std::min(rows, (r + 1) * chunk_rows) * inner};
  };
  ASSIGN_OR_RETURN(StagingBuffer acc,
                   ReduceLocalInputs(step, env, layout, spec.dtype, elements));
  std::vector<Piece> pieces(layout.m());
  for (int w = 0; w < layout.m(); ++w) {
    for (int r : layout.ranks[w]) pieces[w].push_back(chunk_of(r));
  }
  RETURN_IF_ERROR(ReduceRing(step, env, layout, pieces, spec.dtype, acc.span(),
                             /*gather=*/false));
  for (int r : layout.ranks[layout.me]) {
    const OperandDesc& output = step.outputs[r];
    const Range chunk = chunk_of(r);
    const int64_t length = chunk.end - chunk.begin;
    if (NumElements(output.box) != length) {
      return absl::FailedPreconditionError(
          absl::StrCat("outputs[", r, "] (buffer ", output.buffer, ") ",
                       BoxToString(output.box), " has ",
                       NumElements(output.box), " elements; chunk ", r, " of ",
                       n, " of tensor ", tensor, " has ", length));
    }
    ASSIGN_OR_RETURN(TileBuffer * tile, LocalTile(env, output, "outputs", r));
    RETURN_IF_ERROR(Sliced(env, length, size, [&](int64_t a, int64_t b) {
      return tile->UnpackSlice(output.box, a, b,
                               std::as_const(acc).span().subspan(
                                   (chunk.begin + a) * size, (b - a) * size));
    }));
  }
  return absl::OkStatus();
}

absl::Status RunAllGather(const StepDesc& step, const StepEnvironment& env) {
  const ParsedProgram& program = *env.program;
  const GroupLayout layout = LayoutOf(step, program);
  const int n = static_cast<int>(step.chain.size());
  const int m = layout.m();
  const int tensor = step.inputs[layout.ranks[layout.me][0]].tensor;
  const TensorSpec& spec = program.tensors[tensor];
  const int size = DTypeSize(spec.dtype);
  // The input boxes of every rank: a worker's program holds only its own
  // buffers, so when the step names whole buffers the workers first tell
  // each other their ranks' boxes (a ring of tiny messages, phases
  // [0, m - 1); the data uses [m - 1, 2m - 2)).
  std::vector<Box> boxes(n);
  bool whole_buffers = false;
  for (int r = 0; r < n; ++r) {
    boxes[r] = step.inputs[r].box;
    whole_buffers |= step.inputs[r].whole_buffer;
  }
  if (whole_buffers && m > 1) {
    RETURN_IF_ERROR(NeedCommunicator(env));
    const int dims = static_cast<int>(spec.shape.size());
    std::vector<std::vector<int64_t>> extents(m);
    for (int w = 0; w < m; ++w) {
      extents[w].resize(layout.ranks[w].size() * 2 * dims);
    }
    int64_t* mine = extents[layout.me].data();
    for (int r : layout.ranks[layout.me]) {
      for (const Interval& interval : boxes[r]) {
        *mine++ = interval.begin;
        *mine++ = interval.end;
      }
    }
    auto bytes_of = [](std::vector<int64_t>& v) {
      return absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()),
                            v.size() * sizeof(int64_t));
    };
    for (int k = 0; k < m - 1; ++k) {
      const int send = layout.At(-k);
      const int receive = layout.At(-k - 1);
      RETURN_IF_ERROR(
          Exchange(env, step, k, layout.next(), bytes_of(extents[send]),
                   layout.prev(), bytes_of(extents[receive]), sizeof(int64_t),
                   [](int64_t, int64_t) { return absl::OkStatus(); }));
      const int64_t* theirs = extents[receive].data();
      for (int r : layout.ranks[receive]) {
        boxes[r].assign(dims, Interval{});
        for (Interval& interval : boxes[r]) {
          interval.begin = *theirs++;
          interval.end = *theirs++;
        }
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    if (boxes[r].size() != spec.shape.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "inputs[", r, "] (buffer ", step.inputs[r].buffer, ") has box ",
          BoxToString(boxes[r]), ", not a box of tensor ", tensor, " ",
          BoxToString(spec.full_box())));
    }
  }
  struct Output {
    TileBuffer* tile;
    Box box;
  };
  std::vector<Output> outputs;
  for (int r : layout.ranks[layout.me]) {
    ASSIGN_OR_RETURN(TileBuffer * tile,
                     LocalTile(env, step.outputs[r], "outputs", r));
    outputs.push_back({tile, step.outputs[r].box});
  }
  // 1. Local inputs into local outputs.
  for (int r : layout.ranks[layout.me]) {
    ASSIGN_OR_RETURN(const TileBuffer* from,
                     LocalTile(env, step.inputs[r], "inputs", r));
    for (const Output& output : outputs) {
      if (output.tile == from) continue;
      const Box region = Intersect(boxes[r], output.box);
      if (IsEmpty(region)) continue;
      for (const BoxPiece& piece :
           SplitBox(region, env.slicing.elements(size))) {
        RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
        RETURN_IF_ERROR(output.tile->CopyRegionFrom(*from, piece.box));
      }
    }
  }
  if (m == 1) return absl::OkStatus();
  RETURN_IF_ERROR(NeedCommunicator(env));
  // 2. Every worker's inputs as one bundle, around the ring.
  std::vector<StagingBuffer> bundles(m);
  for (int w = 0; w < m; ++w) {
    int64_t bytes = 0;
    for (int r : layout.ranks[w]) bytes += NumElements(boxes[r]);
    bundles[w] = env.staging_pool().Take(bytes * size);
  }
  int64_t packed = 0;
  for (int r : layout.ranks[layout.me]) {
    ASSIGN_OR_RETURN(const TileBuffer* from,
                     LocalTile(env, step.inputs[r], "inputs", r));
    const int64_t count = NumElements(step.inputs[r].box);
    RETURN_IF_ERROR(from->PackSlice(
        step.inputs[r].box, 0, count,
        bundles[layout.me].span().subspan(packed * size, count * size)));
    packed += count;
  }
  for (int k = 0; k < m - 1; ++k) {
    const int send = layout.At(-k);
    const int receive = layout.At(-k - 1);
    RETURN_IF_ERROR(
        Exchange(env, step, m - 1 + k, layout.next(), bundles[send].span(),
                 layout.prev(), bundles[receive].span(), size,
                 [](int64_t, int64_t) { return absl::OkStatus(); }));
    int64_t offset = 0;
    for (int r : layout.ranks[receive]) {
      const Box& box = boxes[r];
      for (const Output& output : outputs) {
        RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
        const Box region = Intersect(box, output.box);
        if (IsEmpty(region)) continue;
        CopyRegion(bundles[receive].data() + offset * size, box,
                   output.tile->bytes().data(), output.tile->box(), region,
                   size);
      }
      offset += NumElements(box);
    }
  }
  return absl::OkStatus();
}

absl::Status RunAllToAll(const StepDesc& step, const StepEnvironment& env) {
  const ParsedProgram& program = *env.program;
  const GroupLayout layout = LayoutOf(step, program);
  const int n = static_cast<int>(step.chain.size());
  auto count = [&](int r, int s) { return step.counts[r * n + s]; };
  // IN is sender-major, OUT receiver-major (plan.proto).
  std::vector<int64_t> in_row(n + 1, 0), out_row(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    in_row[r + 1] = in_row[r];
    out_row[r + 1] = out_row[r];
    for (int s = 0; s < n; ++s) {
      in_row[r + 1] += count(r, s);
      out_row[r + 1] += count(s, r);
    }
  }
  auto in_offset = [&](int r, int s) {
    int64_t offset = in_row[r];
    for (int k = 0; k < s; ++k) offset += count(r, k);
    return offset;
  };
  auto out_offset = [&](int s, int r) {
    int64_t offset = out_row[s];
    for (int k = 0; k < r; ++k) offset += count(k, s);
    return offset;
  };
  int size = 0;
  std::vector<TileBuffer*> in_tiles(n, nullptr), out_tiles(n, nullptr);
  for (int r : layout.ranks[layout.me]) {
    ASSIGN_OR_RETURN(in_tiles[r], LocalTile(env, step.inputs[r], "inputs", r));
    ASSIGN_OR_RETURN(out_tiles[r],
                     LocalTile(env, step.outputs[r], "outputs", r));
    if (in_tiles[r]->box().size() != 1 || out_tiles[r]->box().size() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, ": all-to-all needs 1-D tensors; buffers ",
                       step.inputs[r].buffer, " and ", step.outputs[r].buffer,
                       " are ", BoxToString(in_tiles[r]->box()), " and ",
                       BoxToString(out_tiles[r]->box())));
    }
    size = in_tiles[r]->element_size();
  }
  auto in_block = [&](int r, int s) {
    const int64_t begin = in_offset(r, s);
    return Box{{begin, begin + count(r, s)}};
  };
  auto out_block = [&](int s, int r) {
    const int64_t begin = out_offset(s, r);
    return Box{{begin, begin + count(r, s)}};
  };
  // 1. Blocks between local ranks.
  std::vector<uint8_t> staging;
  for (int r : layout.ranks[layout.me]) {
    for (int s : layout.ranks[layout.me]) {
      const int64_t c = count(r, s);
      if (c == 0) continue;
      RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
      staging.resize(c * size);
      RETURN_IF_ERROR(in_tiles[r]->PackSlice(in_block(r, s), 0, c,
                                             absl::MakeSpan(staging)));
      RETURN_IF_ERROR(
          out_tiles[s]->UnpackSlice(out_block(s, r), 0, c, staging));
    }
  }
  const int m = layout.m();
  if (m == 1) return absl::OkStatus();
  RETURN_IF_ERROR(NeedCommunicator(env));
  // 2. Pairwise exchange: phase k sends to worker me + k, receives from
  // me - k; each message is the blocks between the two workers' ranks, in
  // (sender rank, receiver rank) order.
  for (int k = 1; k < m; ++k) {
    const int to = layout.At(k);
    const int from = layout.At(-k);
    int64_t send_elements = 0, recv_elements = 0;
    for (int r : layout.ranks[layout.me]) {
      for (int s : layout.ranks[to]) send_elements += count(r, s);
    }
    for (int r : layout.ranks[from]) {
      for (int s : layout.ranks[layout.me]) recv_elements += count(r, s);
    }
    StagingBuffer out = env.staging_pool().Take(send_elements * size);
    StagingBuffer in = env.staging_pool().Take(recv_elements * size);
    int64_t packed = 0;
    for (int r : layout.ranks[layout.me]) {
      for (int s : layout.ranks[to]) {
        const int64_t c = count(r, s);
        RETURN_IF_ERROR(in_tiles[r]->PackSlice(
            in_block(r, s), 0, c, out.span().subspan(packed * size, c * size)));
        packed += c;
      }
    }
    RETURN_IF_ERROR(
        Exchange(env, step, k - 1, layout.workers[to],
                 std::as_const(out).span(), layout.workers[from], in.span(),
                 size, [](int64_t, int64_t) { return absl::OkStatus(); }));
    packed = 0;
    for (int r : layout.ranks[from]) {
      for (int s : layout.ranks[layout.me]) {
        const int64_t c = count(r, s);
        RETURN_IF_ERROR(out_tiles[s]->UnpackSlice(
            out_block(s, r), 0, c,
            std::as_const(in).span().subspan(packed * size, c * size)));
        packed += c;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RunLocalCopy(const StepDesc& step, const StepEnvironment& env) {
  ASSIGN_OR_RETURN(const TileBuffer* from,
                   LocalTile(env, step.inputs[0], "inputs", 0));
  ASSIGN_OR_RETURN(TileBuffer * to,
                   LocalTile(env, step.outputs[0], "outputs", 0));
  if (from == to) return absl::OkStatus();
  for (const BoxPiece& piece : SplitBox(
           step.outputs[0].box, env.slicing.elements(to->element_size()))) {
    RETURN_IF_ERROR(env.slicing.Next(*env.cancellation));
    RETURN_IF_ERROR(to->CopyRegionFrom(*from, piece.box));
  }
  return absl::OkStatus();
}

int64_t CollectiveStagingBytes(const StepDesc& step,
                               const ParsedProgram& program) {
  auto bytes_of = [&](const OperandDesc& operand) {
    return operand.known()
               ? NumElements(operand.box) *
                     DTypeSize(program.tensors[operand.tensor].dtype)
               : 0;
  };
  int64_t largest = 0;
  switch (step.op) {
    case v1::Step::OP_ALL_REDUCE:
    case v1::Step::OP_REDUCE_SCATTER:
      // Accumulator, a scratch copy and two ring staging buffers: at most
      // four times one rank's input.
      for (const OperandDesc& input : step.inputs) {
        if (input.local) return 4 * bytes_of(input);
      }
      return 0;
    case v1::Step::OP_ALL_GATHER:
      // The bundles: every rank's input once, at most a whole output (the
      // inputs of other workers may be unknown here).
      for (const OperandDesc& output : step.outputs) {
        if (output.local) largest = std::max(largest, bytes_of(output));
      }
      return largest;
    case v1::Step::OP_ALL_TO_ALL: {
      // One message each way per peer worker, at most what the local ranks
      // send plus what they receive.
      const int n = static_cast<int>(step.chain.size());
      if (static_cast<int>(step.counts.size()) != n * n) return 0;
      int64_t elements = 0;
      int size = 0;
      for (int r = 0; r < n; ++r) {
        if (!program.IsLocal(step.chain[r])) continue;
        for (int s = 0; s < n; ++s) {
          elements += step.counts[r * n + s] + step.counts[s * n + r];
        }
        if (step.inputs[r].known()) {
          size = DTypeSize(program.tensors[step.inputs[r].tensor].dtype);
        }
      }
      return elements * size;
    }
    default:
      return 0;
  }
}

}  // namespace meshcast::worker
