#include "worker/cuda/device_executor.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"
#include "worker/cuda/collective_exchange.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_buffer_set.h"
#include "worker/cuda/device_compute.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_kernels.h"
#include "worker/cuda/device_pattern.h"
#include "worker/cuda/device_relay.h"
#include "worker/cuda/device_step.h"
#include "util/log.h"

namespace meshcast::worker::cuda {
namespace {

constexpr absl::Duration kPollInterval = absl::Microseconds(100);

using StepKey = std::pair<int, int>;  // (stage, id): the agreed order

StepKey KeyOf(const StepDesc& step) { return {step.stage, step.id}; }

// Indices of program.steps in the order every lane enqueues them: (stage,
// id) order, which must be a topological order when the job spans workers
// (every worker derives it alone, so it must not depend on what a worker
// sees); a single worker may take any topological order, lowest key first.
absl::StatusOr<std::vector<int>> EnqueueOrder(const ParsedProgram& program) {
  const int n = static_cast<int>(program.steps.size());
  absl::flat_hash_map<int, int> index_of;
  for (int i = 0; i < n; ++i) index_of[program.steps[i].id] = i;
  if (program.world_size > 1) {
    for (const StepDesc& step : program.steps) {
      for (int dep : step.deps) {
        const StepDesc& before = program.steps[index_of.at(dep)];
        if (!(KeyOf(before) < KeyOf(step))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "plan.steps: step ", step.id, " (stage ", step.stage,
              ") depends on step ", dep, " (stage ", before.stage,
              "), which is not earlier in (stage, id) order; the GPU "
              "backend needs deps on earlier stages or lower ids when a "
              "job spans workers"));
        }
      }
    }
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return KeyOf(program.steps[a]) < KeyOf(program.steps[b]);
    });
    return order;
  }
  std::vector<int> missing(n);
  std::vector<std::vector<int>> dependents(n);
  std::set<std::pair<StepKey, int>> ready;
  for (int i = 0; i < n; ++i) {
    missing[i] = static_cast<int>(program.steps[i].deps.size());
    for (int dep : program.steps[i].deps) {
      dependents[index_of.at(dep)].push_back(i);
    }
    if (missing[i] == 0) ready.insert({KeyOf(program.steps[i]), i});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(i);
    for (int j : dependents[i]) {
      if (--missing[j] == 0) ready.insert({KeyOf(program.steps[j]), j});
    }
  }
  if (static_cast<int>(order.size()) != n) {
    return absl::InvalidArgumentError("plan.steps: dependency cycle");
  }
  return order;
}

// The timing events of one step: start and done on the primary GPU, and
// with metrics, one event per local hop plus a start event on every other
// GPU that records hops (StepEvents).
struct TimedStep {
  CudaEvent start, done;
  std::vector<int> hop_gpu;      // HopEventGpus; empty without metrics
  std::vector<CudaEvent> hop;    // by chain position
  absl::flat_hash_map<int, CudaEvent> gpu_start;
  StepEvents events;             // the raw handles of the above
};

absl::Status CreateTimedStep(const StepDesc& step, int primary_gpu,
                             const ParsedProgram& program,
                             const absl::flat_hash_map<int, int>& device_gpu,
                             bool hops, TimedStep& timed) {
  ASSIGN_OR_RETURN(timed.start, CudaEvent::Create(primary_gpu));
  ASSIGN_OR_RETURN(timed.done, CudaEvent::Create(primary_gpu));
  timed.events.start = timed.start.get();
  timed.events.done = timed.done.get();
  if (!hops) return absl::OkStatus();
  ASSIGN_OR_RETURN(timed.hop_gpu, HopEventGpus(step, program, device_gpu));
  timed.hop.resize(timed.hop_gpu.size());
  timed.events.hop.assign(timed.hop_gpu.size(), nullptr);
  for (size_t p = 0; p < timed.hop_gpu.size(); ++p) {
    const int gpu = timed.hop_gpu[p];
    if (gpu < 0) continue;
    ASSIGN_OR_RETURN(timed.hop[p], CudaEvent::Create(gpu));
    timed.events.hop[p] = timed.hop[p].get();
    if (gpu != primary_gpu && !timed.gpu_start.contains(gpu)) {
      ASSIGN_OR_RETURN(CudaEvent own_start, CudaEvent::Create(gpu));
      timed.events.gpu_start[gpu] = own_start.get();
      timed.gpu_start.emplace(gpu, std::move(own_start));
    }
  }
  return absl::OkStatus();
}

std::string GatherBoxesKey(const ParsedProgram& program, int rank) {
  return absl::StrCat("job/", program.job_id, "/gpu/gather_inputs/", rank);
}

// This worker's all-gather inputs that name whole buffers, published for
// the other workers of the job (collective_exchange.h's encoding).
absl::Status PublishGatherBoxes(const ParsedProgram& program, KvStore& kv) {
  std::vector<std::pair<int, Box>> boxes;
  bool gathers = false;
  for (const StepDesc& step : program.steps) {
    if (step.op != v1::Step::OP_ALL_GATHER) continue;
    gathers = true;
    for (const OperandDesc& input : step.inputs) {
      if (input.local && input.whole_buffer) {
        boxes.emplace_back(input.buffer, input.box);
      }
    }
  }
  if (!gathers) return absl::OkStatus();
  return kv.Set(GatherBoxesKey(program, program.rank),
                EncodeBufferBoxes(boxes));
}

// The boxes of other workers' whole-buffer all-gather inputs that the
// program does not hold, from the workers that own them (which published
// them before the NCCL barrier this follows).
absl::StatusOr<absl::flat_hash_map<int, Box>> ReadGatherBoxes(
    const ParsedProgram& program, KvStore& kv, absl::Duration timeout,
    const Cancellation& cancellation) {
  absl::flat_hash_map<int, Box> boxes;
  std::set<int> owners;
  absl::flat_hash_set<int> held;
  for (const BufferDesc& buffer : program.other_buffers) held.insert(buffer.id);
  for (const StepDesc& step : program.steps) {
    if (step.op != v1::Step::OP_ALL_GATHER) continue;
    for (size_t r = 0; r < step.inputs.size() && r < step.chain.size(); ++r) {
      const OperandDesc& input = step.inputs[r];
      if (input.known() || !input.box.empty() || held.contains(input.buffer)) {
        continue;
      }
      owners.insert(program.RankOf(step.chain[r]));
    }
  }
  for (int owner : owners) {
    RETURN_IF_ERROR(cancellation.status());
    const std::string key = GatherBoxesKey(program, owner);
    absl::StatusOr<std::string> text = kv.Get(key, timeout);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("reading the all-gather input boxes of "
                                       "worker rank ",
                                       owner, " (", key,
                                       "): ", text.status().message()));
    }
    ASSIGN_OR_RETURN(const auto decoded, DecodeBufferBoxes(*text));
    for (const auto& [id, box] : decoded) boxes[id] = box;
  }
  return boxes;
}

// Seconds of every timed hop of a completed step (-1 where not timed or
// unreadable: metrics must never fail a job).
std::vector<double> HopSeconds(const TimedStep& timed, int primary_gpu) {
  std::vector<double> seconds(timed.hop.size(), -1);
  for (size_t p = 0; p < timed.hop.size(); ++p) {
    if (timed.hop[p].get() == nullptr) continue;
    const int gpu = timed.hop_gpu[p];
    const CudaEvent* from = &timed.start;
    if (gpu != primary_gpu) {
      auto it = timed.gpu_start.find(gpu);
      if (it == timed.gpu_start.end()) continue;
      from = &it->second;
    }
    absl::StatusOr<double> elapsed = ElapsedSeconds(*from, timed.hop[p]);
    if (elapsed.ok()) {
      seconds[p] = std::max(0.0, *elapsed);
    } else {
      cudaGetLastError();
    }
  }
  return seconds;
}

}  // namespace

void ReportDeviceStep(WorkerMetrics& metrics, const ParsedProgram& program,
                      const StepDesc& step, double step_seconds,
                      absl::Span<const double> hop_seconds) {
  metrics.StepFinished(program, step, step_seconds);
  for (size_t p = 1; p < hop_seconds.size() && p < step.chain.size(); ++p) {
    if (hop_seconds[p] < 0 || !program.IsLocal(step.chain[p])) continue;
    metrics.HopFinished(program, step, static_cast<int>(p), hop_seconds[p]);
  }
}

DeviceExecutor::DeviceExecutor(DeviceSpec spec, CudaBackendOptions options)
    : spec_(std::move(spec)), options_(options) {}

DeviceExecutor::~DeviceExecutor() = default;

void DeviceExecutor::Abort(absl::string_view reason) {
  aborted_.store(true);
  cancellation_.Cancel(reason);
  absl::MutexLock lock(&mu_);
  if (nccl_ != nullptr) nccl_->Abort(std::string(reason));
}

void DeviceExecutor::Fail(const absl::Status& status) {
  cancellation_.Cancel(status.message());
  absl::MutexLock lock(&mu_);
  if (nccl_ != nullptr) nccl_->Abort(std::string(status.message()));
}

StepProgress DeviceExecutor::progress() const {
  StepProgress progress;
  progress.steps_done = steps_done_.load(std::memory_order_relaxed);
  progress.bytes_done = bytes_done_.load(std::memory_order_relaxed);
  return progress;
}

ExecutorTimings DeviceExecutor::timings() const {
  absl::MutexLock lock(&mu_);
  return timings_;
}

absl::StatusOr<v1::JobResult> DeviceExecutor::Run(const ParsedProgram& program,
                                                  KvStore* kv) {
  RETURN_IF_ERROR(cancellation_.status());
  if (spec_.kind != "cuda" || spec_.all_visible_gpus ||
      static_cast<int>(spec_.gpus.size()) != spec_.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("the GPU executor needs a resolved cuda device spec, got ",
                     DeviceSpecToString(spec_)));
  }
  if (options_.lanes < 1 || options_.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        "GPU executor options: lanes and chunk_bytes must be >= 1");
  }
  // Every step's kernel, before any set-up: an op without a GPU kernel
  // fails the job at once.
  std::vector<const DeviceStepKernel*> kernels;
  for (const StepDesc& step : program.steps) {
    absl::StatusOr<const DeviceStepKernel*> kernel =
        CudaKernels().Find(step.op);
    if (!kernel.ok()) {
      return absl::Status(kernel.status().code(),
                          absl::StrCat("step ", step.id, ": ",
                                       kernel.status().message()));
    }
    kernels.push_back(*kernel);
  }

  // 1. Local devices, ascending, onto the logical devices of the spec.
  std::vector<int> local = program.local_devices;
  std::sort(local.begin(), local.end());
  if (local.size() > spec_.gpus.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the program uses ", local.size(), " devices on this worker but ",
        "--devices=", DeviceSpecToString(spec_), " gives ", spec_.gpus.size()));
  }
  absl::flat_hash_map<int, int> device_gpu;
  std::vector<int> gpus;  // distinct, in order of first use
  std::vector<std::pair<int, int>> device_gpu_index;
  for (size_t i = 0; i < local.size(); ++i) {
    const int gpu = spec_.gpus[i];
    device_gpu[local[i]] = gpu;
    auto it = std::find(gpus.begin(), gpus.end(), gpu);
    if (it == gpus.end()) it = gpus.insert(gpus.end(), gpu);
    device_gpu_index.emplace_back(local[i],
                                  static_cast<int>(it - gpus.begin()));
  }
  if (gpus.empty()) gpus.push_back(spec_.gpus.front());
  if (gpus.size() > 1) RETURN_IF_ERROR(EnablePeerAccess(gpus));
  ASSIGN_OR_RETURN(const std::vector<int> order, EnqueueOrder(program));

  // 2. Tiles.
  const absl::Time setup_start = absl::Now();
  ASSIGN_OR_RETURN(DeviceBufferSet buffers,
                   DeviceBufferSet::Create(program, device_gpu, cancellation_));
  WorkerMetrics* const metrics = options_.metrics;
  const ScopedBufferMemory memory(metrics, program);
  const absl::Time setup_end = absl::Now();

  // 3. NCCL, when the job spans workers (its creation is the barrier).
  std::unique_ptr<NcclCommunicator> nccl;
  absl::flat_hash_map<int, Box> gather_boxes;
  if (program.world_size > 1) {
    if (kv == nullptr) {
      return absl::FailedPreconditionError(
          "the job spans workers but this worker has no rendezvous store");
    }
    // All-gather inputs named without a slice: a program holds only its own
    // buffers, so every worker publishes its inputs' boxes before the
    // barrier and reads the ones it lacks after it.
    RETURN_IF_ERROR(PublishGatherBoxes(program, *kv));
    NcclWorkerSetup setup;
    setup.worker_rank = program.rank;
    setup.world_size = program.world_size;
    setup.gpus = gpus;
    setup.devices = device_gpu_index;
    setup.chunk_bytes = options_.chunk_bytes;
    NcclOptions nccl_options;
    nccl_options.init_timeout = options_.rendezvous_timeout;
    nccl_options.op_timeout = options_.op_timeout;
    nccl_options.lanes = options_.lanes;
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> created =
        NcclCommunicator::Create(
            *kv, absl::StrCat("job/", program.job_id, "/nccl/"), setup,
            nccl_options, [this] { return cancellation_.cancelled(); });
    RETURN_IF_ERROR(cancellation_.status());
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat("creating the job's NCCL communicators: ",
                       created.status().message()));
    }
    nccl = *std::move(created);
    // On failure the communicators' destructor aborts them.
    ASSIGN_OR_RETURN(gather_boxes,
                     ReadGatherBoxes(program, *kv, options_.rendezvous_timeout,
                                     cancellation_));
    absl::MutexLock lock(&mu_);
    nccl_ = nccl.get();
  }
  // An Abort before nccl_ was set has cancelled already.
  absl::Status failure = cancellation_.status();

  // 4. Lanes of streams, events, and the lane threads.
  std::vector<DeviceLane> lanes(options_.lanes);
  std::vector<CudaStream> streams;
  for (int l = 0; l < options_.lanes && failure.ok(); ++l) {
    lanes[l].index = l;
    lanes[l].blas = std::make_shared<BlasHandles>();
    for (int gpu : gpus) {
      absl::StatusOr<CudaStream> stream = CudaStream::Create(gpu);
      if (!stream.ok()) {
        failure = stream.status();
        break;
      }
      lanes[l].streams[gpu] = stream->get();
      streams.push_back(*std::move(stream));
    }
  }
  const int n = static_cast<int>(program.steps.size());
  DeviceRelayEnvironment env;
  env.program = &program;
  env.buffers = &buffers;
  env.nccl = nccl.get();
  env.chunk_bytes = options_.chunk_bytes;
  env.gather_boxes = &gather_boxes;
  // cuBLAS's first use of a GEMM shape costs far more than the GEMM; it
  // happens here, before any step is timed.
  if (failure.ok()) failure = WarmUpGemms(program, env, lanes);
  std::vector<TimedStep> timed(n);
  std::vector<int> primary_gpu(n, -1);
  for (int i = 0; i < n && failure.ok(); ++i) {
    absl::StatusOr<int> gpu = StepPrimaryGpu(program.steps[i], env);
    if (!gpu.ok()) {
      failure = gpu.status();
      break;
    }
    primary_gpu[i] = *gpu;
    // Hops are a relay chain's; other ops report the step alone.
    failure = CreateTimedStep(
        program.steps[i], *gpu, program, device_gpu,
        /*hops=*/metrics != nullptr && IsRelayOp(program.steps[i].op),
        timed[i]);
  }
  absl::flat_hash_map<int, int> index_of;
  for (int i = 0; i < n; ++i) index_of[program.steps[i].id] = i;
  std::vector<std::vector<int>> lane_steps(options_.lanes);
  for (int i : order) {
    lane_steps[program.steps[i].id % options_.lanes].push_back(i);
  }

  absl::Mutex mu;
  absl::CondVar changed;
  std::vector<bool> enqueued(n, false);
  absl::Status first_error = failure;
  auto lane_main = [&](int l) {
    for (int i : lane_steps[l]) {
      const StepDesc& step = program.steps[i];
      std::vector<cudaEvent_t> waits;
      {
        absl::MutexLock lock(&mu);
        while (true) {
          if (!first_error.ok() || cancellation_.cancelled()) return;
          bool ready = true;
          for (int dep : step.deps) ready &= enqueued[index_of.at(dep)];
          if (ready) break;
          changed.WaitWithTimeout(&mu, absl::Milliseconds(50));
        }
      }
      for (int dep : step.deps) {
        waits.push_back(timed[index_of.at(dep)].done.get());
      }
      absl::Status status =
          (*kernels[i])(step, env, lanes[l], waits, timed[i].events);
      if (!status.ok()) Fail(status);
      absl::MutexLock lock(&mu);
      if (!status.ok()) {
        if (first_error.ok()) first_error = status;
      } else {
        enqueued[i] = true;
        // Running from here until its done event completes (or the job
        // ends): on the GPU it may wait behind its dependencies.
        if (metrics != nullptr) metrics->StepStarted();
      }
      changed.SignalAll();
      if (!status.ok()) return;
    }
  };
  // Each GPU's time origin: an event on an idle stream of that GPU (the
  // warm-ups above were waited for), recorded just before the first step
  // is enqueued, so that every step's start and end read against it as the
  // CPU executor's read against its start barrier. The GPUs' origins are
  // recorded within microseconds of each other.
  absl::flat_hash_map<int, CudaEvent> origin;
  for (int gpu : gpus) {
    if (!failure.ok() || lanes.empty()) break;
    absl::StatusOr<CudaEvent> event = CudaEvent::Create(gpu);
    if (!event.ok()) {
      failure = event.status();
      break;
    }
    ScopedCudaDevice on(gpu);
    failure = on.status();
    if (failure.ok()) {
      failure = CudaStatus(cudaEventRecord(event->get(), lanes[0].streams[gpu]),
                           "recording the GPU's time origin");
    }
    origin.emplace(gpu, *std::move(event));
  }
  if (!failure.ok()) first_error = failure;
  const absl::Time steps_start = absl::Now();
  std::vector<std::thread> threads;
  if (failure.ok()) {
    for (int l = 0; l < options_.lanes; ++l) {
      if (!lane_steps[l].empty()) threads.emplace_back(lane_main, l);
    }
  }

  // 5. Wait for the done events.
  std::vector<bool> complete(n, false);
  int completed = 0;
  absl::Time last_progress = absl::Now();
  while (failure.ok()) {
    std::vector<int> to_poll;
    {
      absl::MutexLock lock(&mu);
      if (!first_error.ok()) {
        failure = first_error;
        break;
      }
      for (int i = 0; i < n; ++i) {
        if (enqueued[i] && !complete[i]) to_poll.push_back(i);
      }
    }
    if (cancellation_.cancelled()) {
      failure = cancellation_.status();
      break;
    }
    for (int i : to_poll) {
      const cudaError_t query = cudaEventQuery(timed[i].done.get());
      if (query == cudaSuccess) {
        complete[i] = true;
        ++completed;
        last_progress = absl::Now();
        steps_done_.fetch_add(1, std::memory_order_relaxed);
        bytes_done_.fetch_add(program.steps[i].bytes, std::memory_order_relaxed);
        if (metrics != nullptr) {
          metrics->StepEnded();
          // Both events are complete (start precedes done on its stream).
          absl::StatusOr<double> seconds =
              ElapsedSeconds(timed[i].start, timed[i].done);
          if (seconds.ok()) {
            ReportDeviceStep(*metrics, program, program.steps[i], *seconds,
                             HopSeconds(timed[i], primary_gpu[i]));
          } else {
            cudaGetLastError();
          }
        }
      } else if (query == cudaErrorNotReady) {
        cudaGetLastError();  // not an error; keep it out of later checks
      } else {
        failure = CudaStatus(
            query, absl::StrCat("step ", program.steps[i].id, " on the GPU"));
        break;
      }
    }
    if (!failure.ok() || completed == n) break;
    if (nccl != nullptr) {
      failure = nccl->CheckAsyncErrors();
      if (!failure.ok()) break;
    }
    if (absl::Now() - last_progress > options_.op_timeout) {
      failure = absl::DeadlineExceededError(absl::StrCat(
          "no step finished for ", absl::FormatDuration(options_.op_timeout),
          " (", completed, " of ", n,
          " done); a peer worker may be dead or stuck"));
      break;
    }
    absl::SleepFor(kPollInterval);
  }
  if (!failure.ok()) Fail(failure);
  for (std::thread& thread : threads) thread.join();
  if (metrics != nullptr) {
    // Steps that were enqueued but did not complete (a failure or abort).
    for (int i = 0; i < n; ++i) {
      if (enqueued[i] && !complete[i]) metrics->StepEnded();
    }
  }
  // A lane thread calls Fail (which cancels) before it records its error,
  // so the loop above may have seen only the cancellation: prefer the
  // error itself.
  if (!failure.ok() && !first_error.ok() && absl::IsCancelled(failure)) {
    failure = first_error;
  }
  // Drain the streams: after an NCCL abort its kernels return, so this
  // does not hang on a dead peer; memory is freed only after it.
  for (CudaStream& stream : streams) {
    ScopedCudaDevice on(stream.gpu());
    const absl::Status drained = CudaStatus(cudaStreamSynchronize(stream.get()),
                                            "draining a step stream");
    if (failure.ok() && !drained.ok()) failure = drained;
  }
  // cuBLAS handles go before the streams they are bound to.
  for (DeviceLane& lane : lanes) lane.blas.reset();
  const absl::Time steps_end = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    nccl_ = nullptr;
  }
  if (!failure.ok()) {
    if (nccl != nullptr) nccl->Abort(std::string(failure.message()));
    // Fail() cancels too, so the cancellation alone does not tell an Abort
    // from a failure: only an Abort answers CANCELLED; a failure keeps its
    // own code (FAILED_PRECONDITION for a bad sender, DEADLINE_EXCEEDED for
    // a dead peer, ...).
    if (aborted_.load()) RETURN_IF_ERROR(cancellation_.status());
    return failure;
  }

  // 6. Timings, verification, teardown.
  v1::JobResult result;
  result.set_predicted_seconds(program.predicted_seconds);
  result.set_lower_bound_seconds(program.lower_bound_seconds);
  result.set_seconds(absl::ToDoubleSeconds(steps_end - steps_start));
  int64_t received_bytes = 0;
  for (int i = 0; i < n; ++i) {
    const StepDesc& step = program.steps[i];
    ASSIGN_OR_RETURN(const double seconds,
                     ElapsedSeconds(timed[i].start, timed[i].done));
    v1::StepResult* step_result = result.add_steps();
    step_result->set_step(step.id);
    step_result->set_worker(program.worker);
    step_result->set_bytes(step.bytes);
    step_result->set_seconds(seconds);
    if (auto it = origin.find(primary_gpu[i]); it != origin.end()) {
      ASSIGN_OR_RETURN(const double start,
                       ElapsedSeconds(it->second, timed[i].start));
      step_result->set_start_seconds(start);
      step_result->set_end_seconds(start + seconds);
    }
    step_result->set_device(program.FirstLocalDevice(step));
    received_bytes += LocalDeliveredBytes(program, step);
  }
  result.set_bytes_moved(received_bytes);
  ASSIGN_OR_RETURN(const VerificationSummary verification,
                   buffers.VerifyDestinations(cancellation_));
  result.set_elements_verified(verification.elements);
  result.set_mismatches(verification.mismatches);
  result.set_max_abs_error(verification.max_abs_error);
  const absl::Time verify_end = absl::Now();
  if (nccl != nullptr) {
    const absl::Status finalized = nccl->Finalize();
    if (!finalized.ok()) {
      // The data is verified; a peer that left early only costs the
      // graceful teardown (Finalize aborted the communicators instead).
      JobLogWarning(program.job_id, "NCCL finalize failed: ",
                    finalized.ToString());
    }
  }
  {
    absl::MutexLock lock(&mu_);
    timings_.setup_seconds = absl::ToDoubleSeconds(setup_end - setup_start);
    timings_.barrier_seconds = absl::ToDoubleSeconds(steps_start - setup_end);
    timings_.steps_seconds = result.seconds();
    timings_.verify_seconds = absl::ToDoubleSeconds(verify_end - steps_end);
    timings_.tile_bytes = buffers.total_bytes();
    timings_.first_mismatch = verification.first_mismatch;
  }
  return result;
}

int64_t CudaBackend::MemoryBytes() const {
  int64_t total = 0;
  // Virtual devices share their GPU: count each GPU once.
  for (int gpu : std::set<int>(spec_.gpus.begin(), spec_.gpus.end())) {
    cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, gpu) != cudaSuccess) return 0;
    total += static_cast<int64_t>(properties.totalGlobalMem);
  }
  return total;
}

}  // namespace meshcast::worker::cuda
