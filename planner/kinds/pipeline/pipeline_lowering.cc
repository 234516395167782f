#include "planner/kinds/pipeline/pipeline_lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/ir/plan_building.h"
#include "planner/ir/spec_convert.h"
#include "util/status_macros.h"

namespace meshcast {
namespace {

using PerDevice = std::vector<int>;  // a buffer id per device of a stage

// One tensor of a stage's data as the blocks read it: whole on every
// device of the stage (`whole`), and the step that made it so (-1: ready
// as soon as the block may start).
struct Whole {
  PerDevice whole;
  int ready = -1;
};

class Lowering {
 public:
  Lowering(const PipelineShape& shape,
           const std::vector<PipelineStageLayout>& stages,
           const std::vector<PipelineHop>& hops)
      : s_(shape), stages_(stages), hops_(hops),
        count_(static_cast<int>(stages.size())) {}

  absl::StatusOr<LoweredPipeline> Run(PipelineSchedule schedule) {
    RETURN_IF_ERROR(Check());
    AddModel();
    const int m_count = s_.microbatches;
    a_.assign(count_, std::vector<MicrobatchState>(m_count));
    sent_.assign(count_, std::vector<int>());
    tails_.assign(count_, std::vector<int>());
    const auto order = PipelineOrder(schedule, count_, m_count);
    // Lower blocks in an order that respects the data: a stage's next
    // block waits until what it reads has been sent to it.
    std::vector<size_t> next(count_, 0);
    size_t left = 0;
    for (const auto& stage : order) left += stage.size();
    while (left > 0) {
      bool progressed = false;
      for (int s = 0; s < count_; ++s) {
        while (next[s] < order[s].size() && Ready(s, order[s][next[s]])) {
          RETURN_IF_ERROR(Block(s, order[s][next[s]]));
          ++next[s];
          --left;
          progressed = true;
        }
      }
      if (!progressed) {
        return absl::InternalError("pipeline order deadlocks (a planner bug)");
      }
    }
    LoweredPipeline out;
    out.plan = std::move(plan_);
    out.tensors = std::move(tensors_);
    return out;
  }

 private:
  // What one stage knows of one micro-batch.
  struct MicrobatchState {
    int in_tensor = -1;     // A_{s-1,m} (X_m on stage 0)
    PerDevice in_tiles;     // its input_spec tiles here
    std::vector<int> in_sent;  // the steps delivering them (hop)
    int grad_tensor = -1;   // dA_{s,m}
    PerDevice grad_tiles;   // its output_spec tiles here
    std::vector<int> grad_sent;
    bool forward_done = false;
    // Forward activations, per block l: the input X_l (whole), Z and H.
    std::vector<PerDevice> x, z, h;
    int out_tensor = -1;    // A_{s,m}
    PerDevice out_whole;
    int out_ready = -1;
    int dx_tensor = -1;     // dA_{s-1,m} (s > 0)
    PerDevice dx_whole;
    int dx_ready = -1;
  };

  int Tp(int s) const { return stages_[s].mesh.num_devices(); }
  int Device(int s, int r) const { return stages_[s].mesh.devices[r]; }
  int64_t Fs(int s) const { return s_.ffn / Tp(s); }
  int64_t Size() const { return DTypeSize(s_.dtype); }
  TensorSpec Activation() const {
    return TensorSpec{{s_.microbatch_size, s_.hidden}, s_.dtype};
  }

  absl::Status Check() const {
    if (count_ < 1) return absl::InvalidArgumentError("no stages");
    if (static_cast<int>(hops_.size()) != count_ - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          hops_.size(), " hops for ", count_, " stages; expected ",
          count_ - 1));
    }
    if (s_.microbatches < 1 || s_.layers < 1 || s_.microbatch_size < 1 ||
        s_.hidden < 1 || s_.ffn < 1) {
      return absl::InvalidArgumentError(
          "microbatches, layers, microbatch_size, hidden and ffn must be >= 1");
    }
    for (int s = 0; s < count_; ++s) {
      if (s_.ffn % Tp(s) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ffn ", s_.ffn, " is not divisible by stage ", s, "'s ", Tp(s),
            " devices"));
      }
      for (const ShardingSpec* spec :
           {&stages_[s].input_spec, &stages_[s].output_spec}) {
        for (int r = 0; r < Tp(s); ++r) {
          if (IsEmpty(DeviceBox(Activation(), stages_[s].mesh, *spec, r))) {
            return absl::InvalidArgumentError(absl::StrCat(
                "stage ", s, " layout ", spec->ToString(),
                " leaves device ", Device(s, r), " no part of the [",
                s_.microbatch_size, ", ", s_.hidden, "] activation"));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  void AddModel() {
    const int64_t h = s_.hidden, f = s_.ffn;
    uint64_t seed = s_.seed * 1000003;
    tensors_.w1.assign(count_, {});
    tensors_.w2.assign(count_, {});
    tensors_.dw1.assign(count_, {});
    tensors_.dw2.assign(count_, {});
    w1_.assign(count_, {});
    w2_.assign(count_, {});
    dw1_.assign(count_, {});
    dw2_.assign(count_, {});
    for (int s = 0; s < count_; ++s) {
      const int64_t fs = Fs(s);
      for (int l = 0; l < s_.layers; ++l) {
        const int w1 = AddPlanTensor(plan_, {h, f}, s_.dtype,
                                     v1::Initializer::KIND_RANDOM, ++seed);
        const int w2 = AddPlanTensor(plan_, {f, h}, s_.dtype,
                                     v1::Initializer::KIND_RANDOM, ++seed);
        const int dw1 = AddPlanTensor(plan_, {h, f}, s_.dtype,
                                      v1::Initializer::KIND_ZEROS);
        const int dw2 = AddPlanTensor(plan_, {f, h}, s_.dtype,
                                      v1::Initializer::KIND_ZEROS);
        tensors_.w1[s].push_back(w1);
        tensors_.w2[s].push_back(w2);
        tensors_.dw1[s].push_back(dw1);
        tensors_.dw2[s].push_back(dw2);
        PerDevice b1, b2, d1, d2;
        for (int r = 0; r < Tp(s); ++r) {
          const Box cols = {{0, h}, {r * fs, (r + 1) * fs}};
          const Box rows = {{r * fs, (r + 1) * fs}, {0, h}};
          b1.push_back(Buffer(w1, s, r, cols, v1::Buffer::ROLE_SOURCE));
          b2.push_back(Buffer(w2, s, r, rows, v1::Buffer::ROLE_SOURCE));
          d1.push_back(Buffer(dw1, s, r, cols, v1::Buffer::ROLE_DESTINATION));
          d2.push_back(Buffer(dw2, s, r, rows, v1::Buffer::ROLE_DESTINATION));
        }
        w1_[s].push_back(b1);
        w2_[s].push_back(b2);
        dw1_[s].push_back(d1);
        dw2_[s].push_back(d2);
      }
    }
    // The job's data: each micro-batch's input on stage 0 and output
    // gradient on the last stage, in those stages' layouts.
    const int last = count_ - 1;
    for (int m = 0; m < s_.microbatches; ++m) {
      const int x = AddPlanTensor(plan_, {s_.microbatch_size, h}, s_.dtype,
                                  v1::Initializer::KIND_RANDOM, ++seed);
      const int dy = AddPlanTensor(plan_, {s_.microbatch_size, h}, s_.dtype,
                                   v1::Initializer::KIND_RANDOM, ++seed);
      tensors_.input.push_back(x);
      tensors_.output_grad.push_back(dy);
      pending_inputs_.push_back(
          {x, Tiles(x, 0, stages_[0].input_spec, v1::Buffer::ROLE_SOURCE)});
      pending_grads_.push_back(
          {dy,
           Tiles(dy, last, stages_[last].output_spec, v1::Buffer::ROLE_SOURCE)});
    }
  }

  int Buffer(int tensor, int s, int r, const Box& box, v1::Buffer::Role role) {
    return AddPlanBuffer(plan_, tensor, Device(s, r), box, role);
  }
  PerDevice Tiles(int tensor, int s, const ShardingSpec& spec,
                  v1::Buffer::Role role) {
    PerDevice out;
    for (int r = 0; r < Tp(s); ++r) {
      out.push_back(Buffer(tensor, s, r,
                           DeviceBox(Activation(), stages_[s].mesh, spec, r),
                           role));
    }
    return out;
  }
  PerDevice WholeBuffers(int tensor, int s, v1::Buffer::Role role) {
    PerDevice out;
    for (int r = 0; r < Tp(s); ++r) {
      out.push_back(Buffer(tensor, s, r, Activation().full_box(), role));
    }
    return out;
  }

  int StageGroup(int s) {
    auto [it, fresh] = stage_groups_.try_emplace(s, -1);
    if (fresh) it->second = Group(stages_[s].mesh.devices);
    return it->second;
  }
  int Group(const std::vector<int>& devices) {
    return groups_.Find(plan_, devices);
  }

  v1::Step& AddStep(v1::Step::Op op, int s, std::vector<int> deps,
                    const std::string& label) {
    v1::Step& step = *plan_.add_steps();
    step.set_id(plan_.steps_size() - 1);
    step.set_op(op);
    step.set_stage(s);
    step.set_label(label);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (int dep : deps) {
      if (dep >= 0) step.add_deps(dep);
    }
    return step;
  }
  v1::Step& Gemm(int s, int r, std::vector<int> deps, const std::string& label,
                 int a, int b, int c, int64_t m, int64_t n, int64_t k,
                 double alpha, bool trans_a, bool trans_b, bool accumulate) {
    v1::Step& step = AddStep(v1::Step::OP_COMPUTE, s, std::move(deps), label);
    step.set_device(Device(s, r));
    step.set_flops(2.0 * m * n * k);
    step.add_inputs()->set_buffer(a);
    step.add_inputs()->set_buffer(b);
    step.add_outputs()->set_buffer(c);
    v1::GemmAttrs& g = *step.mutable_compute()->mutable_gemm();
    g.set_m(m);
    g.set_n(n);
    g.set_k(k);
    g.set_alpha(alpha);
    g.set_trans_a(trans_a);
    g.set_trans_b(trans_b);
    g.set_accumulate(accumulate);
    return step;
  }
  v1::Step& Elementwise(int s, int r, std::vector<int> deps,
                        const std::string& label,
                        v1::ElementwiseAttrs::Kind kind,
                        std::vector<int> inputs, int output, int64_t elements) {
    v1::Step& step = AddStep(v1::Step::OP_COMPUTE, s, std::move(deps), label);
    step.set_device(Device(s, r));
    step.set_flops(static_cast<double>(elements));
    for (int in : inputs) step.add_inputs()->set_buffer(in);
    step.add_outputs()->set_buffer(output);
    step.mutable_compute()->mutable_elementwise()->set_kind(kind);
    return step;
  }
  // The all-reduce over stage s of the partials `in` ([tp, b, h], row r on
  // device r) into `out` (whole on every device).
  int AllReduce(int s, const std::vector<int>& deps, const std::string& label,
                const PerDevice& in, const PerDevice& out) {
    v1::Step& step = AddStep(v1::Step::OP_ALL_REDUCE, s, deps, label);
    step.set_group(StageGroup(s));
    for (int r = 0; r < Tp(s); ++r) {
      step.add_inputs()->set_buffer(in[r]);
      step.add_outputs()->set_buffer(out[r]);
    }
    step.set_bytes(s_.microbatch_size * s_.hidden * Size());
    return step.id();
  }
  // `tiles` of `tensor` made whole on every device of stage s: the tiles
  // themselves when each is already whole, else an all-gather into new
  // scratch buffers after `deps`.
  Whole MakeWhole(int tensor, int s, const PerDevice& tiles,
                  const std::vector<int>& deps, const std::string& label) {
    const Box full = Activation().full_box();
    bool whole = true;
    for (int r = 0; r < Tp(s); ++r) {
      whole &= plan_.buffers(tiles[r]).box_size() == 2 &&
               BoxFromProto(plan_.buffers(tiles[r]).box()) == full;
    }
    if (whole) return {tiles, -1};
    Whole out;
    out.whole = WholeBuffers(tensor, s, v1::Buffer::ROLE_SCRATCH);
    v1::Step& step = AddStep(v1::Step::OP_ALL_GATHER, s, deps, label);
    step.set_group(StageGroup(s));
    for (int r = 0; r < Tp(s); ++r) {
      step.add_inputs()->set_buffer(tiles[r]);
      step.add_outputs()->set_buffer(out.whole[r]);
    }
    step.set_bytes(s_.microbatch_size * s_.hidden * Size());
    out.ready = step.id();
    return out;
  }

  bool Ready(int s, const PipelineBlock& block) const {
    const MicrobatchState& st = a_[s][block.microbatch];
    if (!block.backward) return s == 0 || st.in_tensor >= 0;
    return st.forward_done && (s == count_ - 1 || st.grad_tensor >= 0);
  }

  // The deps of a block's first steps: the previous block's last steps on
  // the stage (and, without overlap, the sends it made).
  std::vector<int> ChainDeps(int s) const {
    std::vector<int> deps = tails_[s];
    if (!s_.overlap) deps.insert(deps.end(), sent_[s].begin(), sent_[s].end());
    return deps;
  }

  absl::Status Block(int s, const PipelineBlock& block) {
    return block.backward ? Backward(s, block) : Forward(s, block);
  }

  absl::Status Forward(int s, const PipelineBlock& block) {
    const int m = block.microbatch;
    const std::string label = block.Name();
    MicrobatchState& st = a_[s][m];
    if (s == 0) {
      st.in_tensor = pending_inputs_[m].first;
      st.in_tiles = pending_inputs_[m].second;
    }
    std::vector<int> entry = ChainDeps(s);
    entry.insert(entry.end(), st.in_sent.begin(), st.in_sent.end());
    Whole x = MakeWhole(st.in_tensor, s, st.in_tiles, entry, label);
    std::vector<int> ready = entry;
    if (x.ready >= 0) ready = {x.ready};
    const int64_t b = s_.microbatch_size, h = s_.hidden, fs = Fs(s);
    const int tp = Tp(s);
    const double a1 = 1.0 / std::sqrt(static_cast<double>(h));
    const double a2 = 1.0 / std::sqrt(static_cast<double>(s_.ffn));
    st.x.clear();
    st.z.clear();
    st.h.clear();
    for (int l = 0; l < s_.layers; ++l) {
      st.x.push_back(x.whole);
      const int z = AddPlanTensor(plan_, {b, s_.ffn}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
      const int hh = AddPlanTensor(plan_, {b, s_.ffn}, s_.dtype,
                                   v1::Initializer::KIND_ZEROS);
      const int p = AddPlanTensor(plan_, {tp, b, h}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
      const bool last = l + 1 == s_.layers;
      const int y = AddPlanTensor(plan_, {b, h}, s_.dtype,
                                  v1::Initializer::KIND_ZEROS);
      PerDevice zb, hb, pb;
      std::vector<int> partials;
      for (int r = 0; r < tp; ++r) {
        const Box cols = {{0, b}, {r * fs, (r + 1) * fs}};
        zb.push_back(Buffer(z, s, r, cols, v1::Buffer::ROLE_SCRATCH));
        hb.push_back(Buffer(hh, s, r, cols, v1::Buffer::ROLE_SCRATCH));
        pb.push_back(Buffer(p, s, r, {{r, r + 1}, {0, b}, {0, h}},
                            v1::Buffer::ROLE_SCRATCH));
        const int fc1 = Gemm(s, r, ready, label, x.whole[r], w1_[s][l][r],
                             zb[r], b, fs, h, a1, false, false, false)
                            .id();
        const int relu =
            Elementwise(s, r, {fc1}, label, v1::ElementwiseAttrs::KIND_RELU,
                        {zb[r]}, hb[r], b * fs)
                .id();
        partials.push_back(Gemm(s, r, {relu}, label, hb[r], w2_[s][l][r],
                                pb[r], b, h, fs, a2, false, false, false)
                               .id());
      }
      st.z.push_back(zb);
      st.h.push_back(hb);
      Whole next;
      next.whole = WholeBuffers(y, s,
                                last ? v1::Buffer::ROLE_DESTINATION
                                     : v1::Buffer::ROLE_SCRATCH);
      next.ready = AllReduce(s, partials, label, pb, next.whole);
      if (last) {
        st.out_tensor = y;
        st.out_whole = next.whole;
        st.out_ready = next.ready;
      }
      x = next;
      ready = {x.ready};
    }
    st.forward_done = true;
    tails_[s] = {st.out_ready};
    sent_[s].clear();
    if (s == count_ - 1) {
      tensors_.output.push_back(st.out_tensor);
      return absl::OkStatus();
    }
    // The output to the next stage.
    MicrobatchState& next = a_[s + 1][m];
    next.in_tensor = st.out_tensor;
    next.in_tiles = Tiles(st.out_tensor, s + 1, stages_[s + 1].input_spec,
                          v1::Buffer::ROLE_DESTINATION);
    next.in_sent =
        Hop(hops_[s].forward, st.out_tensor, s, st.out_ready,
            absl::StrCat(label, ">"));
    sent_[s] = next.in_sent;
    return absl::OkStatus();
  }

  absl::Status Backward(int s, const PipelineBlock& block) {
    const int m = block.microbatch;
    const std::string label = block.Name();
    MicrobatchState& st = a_[s][m];
    if (s == count_ - 1) {
      st.grad_tensor = pending_grads_[m].first;
      st.grad_tiles = pending_grads_[m].second;
    }
    std::vector<int> entry = ChainDeps(s);
    entry.insert(entry.end(), st.grad_sent.begin(), st.grad_sent.end());
    Whole dy = MakeWhole(st.grad_tensor, s, st.grad_tiles, entry, label);
    std::vector<int> ready = entry;
    if (dy.ready >= 0) ready = {dy.ready};
    const int64_t b = s_.microbatch_size, h = s_.hidden, fs = Fs(s);
    const int tp = Tp(s);
    const double a1 = 1.0 / std::sqrt(static_cast<double>(h));
    const double a2 = 1.0 / std::sqrt(static_cast<double>(s_.ffn));
    const bool accumulate = accumulated_.count(s) > 0;
    accumulated_.insert(s);
    std::vector<int> tails;
    for (int l = s_.layers - 1; l >= 0; --l) {
      const int dh = AddPlanTensor(plan_, {b, s_.ffn}, s_.dtype,
                                   v1::Initializer::KIND_ZEROS);
      const int dz = AddPlanTensor(plan_, {b, s_.ffn}, s_.dtype,
                                   v1::Initializer::KIND_ZEROS);
      const bool wants_dx = !(s == 0 && l == 0);
      const int dxp = wants_dx ? AddPlanTensor(plan_, {tp, b, h}, s_.dtype,
                                               v1::Initializer::KIND_ZEROS)
                               : -1;
      PerDevice dxpb;
      std::vector<int> partials;
      for (int r = 0; r < tp; ++r) {
        const Box cols = {{0, b}, {r * fs, (r + 1) * fs}};
        const int dhb = Buffer(dh, s, r, cols, v1::Buffer::ROLE_SCRATCH);
        const int dzb = Buffer(dz, s, r, cols, v1::Buffer::ROLE_SCRATCH);
        const int g1 = Gemm(s, r, ready, label, dy.whole[r], w2_[s][l][r],
                            dhb, b, fs, h, a2, false, true, false)
                           .id();
        const int mask = Elementwise(s, r, {g1}, label,
                                     v1::ElementwiseAttrs::KIND_RELU_GRAD,
                                     {dhb, st.z[l][r]}, dzb, b * fs)
                             .id();
        tails.push_back(Gemm(s, r, ready, label, st.h[l][r], dy.whole[r],
                             dw2_[s][l][r], fs, h, b, a2, true, false,
                             accumulate)
                            .id());
        tails.push_back(Gemm(s, r, {mask}, label, st.x[l][r], dzb,
                             dw1_[s][l][r], h, fs, b, a1, true, false,
                             accumulate)
                            .id());
        if (wants_dx) {
          dxpb.push_back(Buffer(dxp, s, r, {{r, r + 1}, {0, b}, {0, h}},
                                v1::Buffer::ROLE_SCRATCH));
          partials.push_back(Gemm(s, r, {mask}, label, dzb, w1_[s][l][r],
                                  dxpb[r], b, h, fs, a1, false, true, false)
                                 .id());
        }
      }
      if (!wants_dx) break;
      const int dx = AddPlanTensor(plan_, {b, h}, s_.dtype,
                                   v1::Initializer::KIND_ZEROS);
      Whole next;
      next.whole = WholeBuffers(dx, s,
                                l == 0 ? v1::Buffer::ROLE_DESTINATION
                                       : v1::Buffer::ROLE_SCRATCH);
      next.ready = AllReduce(s, partials, label, dxpb, next.whole);
      if (l == 0) {
        st.dx_tensor = dx;
        st.dx_whole = next.whole;
        st.dx_ready = next.ready;
        tails.push_back(next.ready);
      }
      dy = next;
      ready = {dy.ready};
    }
    tails_[s] = tails;
    sent_[s].clear();
    if (s == 0) return absl::OkStatus();
    // The input's gradient back to the previous stage.
    MicrobatchState& prev = a_[s - 1][m];
    prev.grad_tensor = st.dx_tensor;
    prev.grad_tiles = Tiles(st.dx_tensor, s - 1, stages_[s - 1].output_spec,
                            v1::Buffer::ROLE_DESTINATION);
    prev.grad_sent = Hop(hops_[s - 1].backward, st.dx_tensor, s, st.dx_ready,
                         absl::StrCat("<", label));
    sent_[s] = prev.grad_sent;
    return absl::OkStatus();
  }

  // One micro-batch's instance of a boundary's resharding plan, moving
  // `tensor` after step `after`; returns its step ids.
  std::vector<int> Hop(const ReshardPlan& hop, int tensor, int s, int after,
                       const std::string& label) {
    std::vector<int> ids;
    for (const Transfer& t : hop.transfers) {
      // A stage's sends go out in order, one micro-batch after the other,
      // as on one communication stream: sharing the link among several
      // would delay the first one the next stage waits for.
      std::vector<int> deps = sending_[s];
      deps.push_back(after);
      for (int dep : t.deps) deps.push_back(ids[dep]);
      v1::Step& step = AddStep(t.dst_devices.size() == 1
                                   ? v1::Step::OP_SEND_RECV
                                   : v1::Step::OP_BROADCAST,
                               s, deps, label);
      step.set_group(groups_.FindRelay(plan_, t));
      step.set_tensor(tensor);
      BoxToProto(t.slice, step.mutable_slice());
      step.set_bytes(t.bytes);
      step.set_chunk_bytes(t.chunk_bytes);
      ids.push_back(step.id());
    }
    sending_[s] = ids;
    return ids;
  }

  const PipelineShape& s_;
  const std::vector<PipelineStageLayout>& stages_;
  const std::vector<PipelineHop>& hops_;
  const int count_;
  v1::Plan plan_;
  PipelineTensors tensors_;
  std::vector<std::vector<PerDevice>> w1_, w2_, dw1_, dw2_;
  std::vector<std::pair<int, PerDevice>> pending_inputs_, pending_grads_;
  std::vector<std::vector<MicrobatchState>> a_;  // [stage][micro-batch]
  std::vector<std::vector<int>> tails_;  // per stage: the last block's ends
  std::vector<std::vector<int>> sent_;   // per stage: its last block's sends
  std::map<int, std::vector<int>> sending_;  // per stage: its last hop
  std::map<int, int> stage_groups_;
  PlanGroups groups_;
  std::set<int> accumulated_;  // stages whose weight gradients have a value
};

}  // namespace

int64_t PipelineActivationBytes(const PipelineShape& shape, int tp) {
  const int64_t b = shape.microbatch_size;
  return shape.layers *
         (b * shape.hidden + 2 * b * (shape.ffn / std::max(1, tp))) *
         DTypeSize(shape.dtype);
}

absl::StatusOr<std::vector<PipelineHop>> PlanPipelineHops(
    const PipelineShape& shape, const std::vector<PipelineStageLayout>& stages,
    const Topology& topology, Strategy strategy) {
  const TensorSpec activation{{shape.microbatch_size, shape.hidden},
                              shape.dtype};
  std::vector<PipelineHop> hops;
  for (size_t s = 0; s + 1 < stages.size(); ++s) {
    const ReshardProblem forward{activation, stages[s].mesh,
                                 stages[s].output_spec, stages[s + 1].mesh,
                                 stages[s + 1].input_spec};
    const ReshardProblem backward{activation, stages[s + 1].mesh,
                                  stages[s + 1].input_spec, stages[s].mesh,
                                  stages[s].output_spec};
    PipelineHop hop;
    ASSIGN_OR_RETURN(hop.forward, PlanReshard({forward}, topology, strategy));
    ASSIGN_OR_RETURN(hop.backward, PlanReshard({backward}, topology, strategy));
    hops.push_back(std::move(hop));
  }
  return hops;
}

absl::StatusOr<LoweredPipeline> LowerPipeline(
    const PipelineShape& shape, const std::vector<PipelineStageLayout>& stages,
    const std::vector<PipelineHop>& hops, PipelineSchedule schedule) {
  if (schedule == PipelineSchedule::kAuto) {
    return absl::InvalidArgumentError("LowerPipeline needs a concrete schedule");
  }
  Lowering lowering(shape, stages, hops);
  ASSIGN_OR_RETURN(LoweredPipeline lowered, lowering.Run(schedule));
  lowered.plan.set_kind("pipeline");
  lowered.plan.set_strategy(PipelineScheduleName(schedule));
  return lowered;
}

}  // namespace meshcast
