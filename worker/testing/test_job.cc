#include "worker/testing/test_job.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proto/dtype_convert.h"
#include "util/status_macros.h"
#include "worker/gloo_communicator.h"
#include "worker/in_memory_kv_store.h"

namespace meshcast::worker::testing {
namespace {

void SetBox(const Box& box,
            google::protobuf::RepeatedPtrField<v1::Interval>* out) {
  for (const Interval& interval : box) {
    v1::Interval* proto = out->Add();
    proto->set_begin(interval.begin);
    proto->set_end(interval.end);
  }
}

Box FromProto(const google::protobuf::RepeatedPtrField<v1::Interval>& in) {
  Box box;
  for (const v1::Interval& interval : in) {
    box.push_back({interval.begin(), interval.end()});
  }
  return box;
}

}  // namespace

TestJob::TestJob(int workers, int devices_per_worker, std::string job_id)
    : workers_(workers),
      devices_per_worker_(devices_per_worker),
      job_id_(std::move(job_id)) {}

int TestJob::AddTensor(const TensorSpec& spec) {
  v1::TensorSpec* tensor = plan_.add_tensors();
  for (int64_t extent : spec.shape) tensor->add_shape(extent);
  tensor->set_dtype(DTypeToProto(spec.dtype));
  return plan_.tensors_size() - 1;
}

void TestJob::SetInitializer(int tensor, const v1::Initializer& init) {
  while (plan_.tensor_inits_size() <= tensor) plan_.add_tensor_inits();
  *plan_.mutable_tensor_inits(tensor) = init;
}

int TestJob::AddBuffer(int device, int tensor, const Box& box,
                       BufferRole role) {
  v1::Buffer* buffer = plan_.add_buffers();
  buffer->set_id(plan_.buffers_size() - 1);
  buffer->set_tensor(tensor);
  buffer->set_device(device);
  SetBox(box, buffer->mutable_box());
  buffer->set_role(role == BufferRole::kSource ? v1::Buffer::ROLE_SOURCE
                   : role == BufferRole::kDestination
                       ? v1::Buffer::ROLE_DESTINATION
                       : v1::Buffer::ROLE_SCRATCH);
  return buffer->id();
}

int TestJob::AddStep(v1::Step step, std::vector<int> group) {
  step.set_id(plan_.steps_size());
  std::vector<int> devices = group;
  if (!group.empty()) {
    v1::CommGroup* comm_group = plan_.add_groups();
    comm_group->set_id(plan_.groups_size() - 1);
    for (int device : group) comm_group->add_devices(device);
    step.set_group(comm_group->id());
  } else if (step.op() == v1::Step::OP_LOCAL_COPY) {
    devices = {plan_.buffers(step.outputs(0).buffer()).device()};
  } else {
    devices = {step.device()};
  }
  *plan_.add_steps() = std::move(step);
  step_chains_.push_back(std::move(devices));
  return plan_.steps_size() - 1;
}

v1::Operand TestJob::Operand(int buffer, const Box& slice) {
  v1::Operand operand;
  operand.set_buffer(buffer);
  SetBox(slice, operand.mutable_slice());
  return operand;
}

int TestJob::AddTransfer(int tensor, const Box& slice, std::vector<int> chain,
                         std::vector<int> deps, int stage) {
  v1::CommGroup* group = plan_.add_groups();
  group->set_id(plan_.groups_size() - 1);
  for (int device : chain) group->add_devices(device);
  v1::Step* step = plan_.add_steps();
  step->set_id(plan_.steps_size() - 1);
  step->set_op(chain.size() == 2 ? v1::Step::OP_SEND_RECV
                                 : v1::Step::OP_BROADCAST);
  step->set_group(group->id());
  step->set_tensor(tensor);
  SetBox(slice, step->mutable_slice());
  step->set_stage(stage);
  for (int dep : deps) step->add_deps(dep);
  step_chains_.push_back(std::move(chain));
  return step->id();
}

int TestJob::AddRelayTree(int tensor, const Box& slice,
                          std::vector<int> devices, std::vector<int> parents,
                          std::vector<int> deps, int stage) {
  const int id =
      AddTransfer(tensor, slice, std::move(devices), std::move(deps), stage);
  v1::Step& step = *plan_.mutable_steps(id);
  step.set_op(v1::Step::OP_BROADCAST);
  v1::CommGroup& group = *plan_.mutable_groups(step.group());
  for (int parent : parents) group.add_parents(parent);
  return id;
}

void TestJob::AddSendRecvTransfers(int tensor) {
  const v1::Plan snapshot = plan_;
  for (const v1::Buffer& dst : snapshot.buffers()) {
    if (dst.tensor() != tensor || dst.role() != v1::Buffer::ROLE_DESTINATION) {
      continue;
    }
    for (const v1::Buffer& src : snapshot.buffers()) {
      if (src.tensor() != tensor || src.role() != v1::Buffer::ROLE_SOURCE ||
          src.device() == dst.device()) {
        continue;
      }
      Box overlap = Intersect(FromProto(src.box()), FromProto(dst.box()));
      // Covered by the destination device's own source tile?
      bool held_locally = false;
      for (const v1::Buffer& own : snapshot.buffers()) {
        if (own.tensor() == tensor && own.device() == dst.device() &&
            own.role() == v1::Buffer::ROLE_SOURCE &&
            Contains(FromProto(own.box()), overlap)) {
          held_locally = true;
        }
      }
      if (IsEmpty(overlap) || held_locally) continue;
      // Source layouts here are disjoint shards: one sender per element.
      AddTransfer(tensor, overlap, {src.device(), dst.device()});
    }
  }
}

Box TestJob::ShardBox(const std::vector<int64_t>& shape, int dim, int parts,
                      int k) {
  Box box;
  for (int64_t extent : shape) box.push_back({0, extent});
  const int64_t chunk = (shape[dim] + parts - 1) / parts;
  box[dim].begin = std::min(shape[dim], k * chunk);
  box[dim].end = std::min(shape[dim], (k + 1) * chunk);
  return box;
}

Box TestJob::FullBox(int tensor) const {
  Box box;
  for (int64_t extent : plan_.tensors(tensor).shape())
    box.push_back({0, extent});
  return box;
}

v1::WorkerProgram TestJob::ProgramFor(int worker) const {
  v1::WorkerProgram program;
  program.set_job_id(job_id_);
  program.set_worker(absl::StrCat("worker", worker));
  program.set_world_size(workers_);
  program.set_rank(worker);
  for (int w = 0; w < workers_; ++w) {
    program.add_rank_workers(absl::StrCat("worker", w));
  }
  for (int d = 0; d < workers_ * devices_per_worker_; ++d) {
    (*program.mutable_device_rank())[d] = WorkerOf(d);
    if (WorkerOf(d) == worker) program.add_local_devices(d);
  }
  program.set_verify(verify_);
  v1::Plan* plan = program.mutable_plan();
  *plan->mutable_tensors() = plan_.tensors();
  *plan->mutable_tensor_inits() = plan_.tensor_inits();
  plan->set_strategy(plan_.strategy());
  std::vector<bool> buffers(plan_.buffers_size(), false);
  for (const v1::Buffer& buffer : plan_.buffers()) {
    if (WorkerOf(buffer.device()) == worker) buffers[buffer.id()] = true;
  }
  for (int s = 0; s < plan_.steps_size(); ++s) {
    const v1::Step& step = plan_.steps(s);
    bool touches = false;
    for (int device : step_chains_[s]) touches |= WorkerOf(device) == worker;
    if (!touches && !DefinesValues(step)) continue;
    *plan->add_steps() = step;
    if (step.op() != v1::Step::OP_LOCAL_COPY &&
        step.op() != v1::Step::OP_COMPUTE) {
      *plan->add_groups() = plan_.groups(step.group());
    }
    // The reference closure: operands of value-defining steps only (a
    // worker learns other operands' extents at run time).
    if (!DefinesValues(step)) continue;
    for (const v1::Operand& operand : step.inputs()) {
      buffers[operand.buffer()] = true;
    }
    for (const v1::Operand& operand : step.outputs()) {
      buffers[operand.buffer()] = true;
    }
  }
  for (const v1::Buffer& buffer : plan_.buffers()) {
    if (buffers[buffer.id()]) *plan->add_buffers() = buffer;
  }
  return program;
}

TestJobOutcome RunTestJob(const TestJob& job, const ExecutorOptions& options) {
  const int n = job.workers();
  InMemoryKvStore kv;
  TestJobOutcome outcome;
  outcome.results.resize(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      const v1::WorkerProgram proto = job.ProgramFor(w);
      absl::StatusOr<ParsedProgram> program = ParseProgram(proto);
      if (!program.ok()) {
        outcome.results[w] = program.status();
        return;
      }
      std::unique_ptr<GlooCommunicator> comm;
      if (n > 1) {
        GlooOptions gloo;
        gloo.rendezvous_timeout = absl::Seconds(20);
        gloo.op_timeout = absl::Seconds(20);
        auto created = GlooCommunicator::Create(
            kv, absl::StrCat("job/", proto.job_id(), "/gloo/"), w, n, gloo);
        if (!created.ok()) {
          outcome.results[w] = created.status();
          return;
        }
        comm = *std::move(created);
      }
      Executor executor(options);
      outcome.results[w] = executor.Run(*program, comm.get());
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& result : outcome.results) {
    if (!result.ok()) {
      outcome.all_ok = false;
      continue;
    }
    outcome.mismatches += result->mismatches();
    outcome.elements_verified += result->elements_verified();
    outcome.max_abs_error =
        std::max(outcome.max_abs_error, result->max_abs_error());
  }
  return outcome;
}

absl::StatusOr<TestJob> TestJobOfPlan(const v1::Plan& plan, int workers,
                                      int devices_per_worker) {
  TestJob job(workers, devices_per_worker);
  auto same = [](int got, int want, const char* what) {
    return got == want ? absl::OkStatus()
                       : absl::InternalError(absl::StrCat(
                             what, " ", want, " became ", got));
  };
  for (int t = 0; t < plan.tensors_size(); ++t) {
    TensorSpec spec;
    spec.shape.assign(plan.tensors(t).shape().begin(),
                      plan.tensors(t).shape().end());
    spec.dtype = DType::kFloat32;
    RETURN_IF_ERROR(same(job.AddTensor(spec), t, "tensor"));
    job.SetInitializer(t, plan.tensor_inits(t));
  }
  for (const v1::Buffer& b : plan.buffers()) {
    Box box;
    for (const v1::Interval& i : b.box()) box.push_back({i.begin(), i.end()});
    const BufferRole role =
        b.role() == v1::Buffer::ROLE_SOURCE        ? BufferRole::kSource
        : b.role() == v1::Buffer::ROLE_DESTINATION ? BufferRole::kDestination
                                                   : BufferRole::kScratch;
    RETURN_IF_ERROR(
        same(job.AddBuffer(b.device(), b.tensor(), box, role), b.id(),
             "buffer"));
  }
  for (const v1::Step& step : plan.steps()) {
    std::vector<int> group;
    if (step.op() != v1::Step::OP_COMPUTE) {
      const v1::CommGroup& g = plan.groups(step.group());
      group.assign(g.devices().begin(), g.devices().end());
    }
    v1::Step copy = step;
    copy.clear_group();
    RETURN_IF_ERROR(same(job.AddStep(copy, group), step.id(), "step"));
  }
  return job;
}

int64_t AddWholeBufferAllToAll(TestJob& job, const std::vector<int>& group) {
  const int n = static_cast<int>(group.size());
  std::vector<int64_t> counts(n * n);
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) counts[r * n + s] = (r * 5 + s * 3 + 2) % 7;
  }
  std::vector<int64_t> out_row(n + 1, 0);
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    out_row[r + 1] = out_row[r];
    for (int s = 0; s < n; ++s) {
      out_row[r + 1] += counts[s * n + r];
      total += counts[r * n + s];
    }
  }
  const int in = job.AddTensor({{total}, DType::kFloat32});
  v1::Initializer random;
  random.set_kind(v1::Initializer::KIND_RANDOM);
  random.set_seed(33);
  job.SetInitializer(in, random);
  const int out = job.AddTensor({{total}, DType::kFloat32});
  v1::Step step;
  step.set_op(v1::Step::OP_ALL_TO_ALL);
  for (int64_t c : counts) step.add_counts(c);
  std::vector<int> scratch(n);
  for (int r = 0; r < n; ++r) {
    *step.add_inputs() = TestJob::Operand(
        job.AddBuffer(group[r], in, job.FullBox(in), BufferRole::kSource));
  }
  for (int r = 0; r < n; ++r) {
    scratch[r] = job.AddBuffer(group[r], out, job.FullBox(out),
                               BufferRole::kScratch);
    *step.add_outputs() = TestJob::Operand(scratch[r]);
  }
  const int exchange = job.AddStep(step, group);
  for (int r = 0; r < n; ++r) {
    const Box part = {{out_row[r], out_row[r + 1]}};
    v1::Step copy;
    copy.set_op(v1::Step::OP_LOCAL_COPY);
    copy.add_deps(exchange);
    *copy.add_inputs() = TestJob::Operand(scratch[r], part);
    *copy.add_outputs() = TestJob::Operand(
        job.AddBuffer(group[r], out, part, BufferRole::kDestination), part);
    job.AddStep(copy);
  }
  return total;
}

}  // namespace meshcast::worker::testing
