#include "worker/executor.h"

#include <time.h>

#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "util/status_macros.h"
#include "worker/buffer_set.h"
#include "worker/engine/kernel_registry.h"
#include "worker/staging_pool.h"

namespace meshcast::worker {
namespace {

// CPU time the calling thread has used: what a step's own thread spent on
// it, apart from the time the core ran something else (another worker's
// process, the kernel's network on a shared machine). 0 where the clock is
// missing.
double ThreadCpuSeconds() {
  timespec now{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) return 0;
  return static_cast<double>(now.tv_sec) + 1e-9 * now.tv_nsec;
}

}  // namespace

void Executor::Abort(absl::string_view reason) {
  cancellation_.Cancel(reason);
  absl::MutexLock lock(&mu_);
  if (comm_ != nullptr) comm_->Abort(reason);
}

void Executor::Fail(const absl::Status& status) {
  // Peers blocked on this worker learn about it from the closed
  // connections; local steps from the cancellation.
  cancellation_.Cancel(status.message());
  absl::MutexLock lock(&mu_);
  if (comm_ != nullptr) comm_->Abort(status.message());
}

AvailableMemoryFn Executor::AvailableMemory() const {
  return options_.available_memory ? options_.available_memory
                                   : AvailableMemoryFn(ReadMemAvailable);
}

HostMemoryNeed Executor::NeedOf(const ParsedProgram& program) const {
  return HostMemoryNeedOf(program, options_.relay,
                          options_.max_concurrent_steps);
}

absl::Status Executor::CheckMemory(const ParsedProgram& program) const {
  absl::Status status =
      CheckHostMemory(program, NeedOf(program), AvailableMemory());
  // Staging buffers cached from earlier jobs count as used; give them back
  // before refusing a job for want of memory.
  if (absl::IsResourceExhausted(status) && staging_pool().Release() > 0) {
    status = CheckHostMemory(program, NeedOf(program), AvailableMemory());
  }
  return status;
}

ExecutorTimings Executor::timings() const {
  absl::MutexLock lock(&mu_);
  return timings_;
}

absl::string_view JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kSetup:
      return "setup";
    case JobPhase::kConnect:
      return "connect";
    case JobPhase::kData:
      return "data";
    case JobPhase::kVerify:
      return "verify";
    case JobPhase::kUnknown:
      break;
  }
  return "";
}

StepProgress Executor::progress() const {
  StepProgress progress;
  progress.steps_done = steps_done_.load(std::memory_order_relaxed);
  progress.bytes_done = bytes_done_.load(std::memory_order_relaxed);
  progress.phase = phase_.load(std::memory_order_relaxed);
  progress.verify_done = verify_.done.load(std::memory_order_relaxed);
  progress.verify_total = verify_.total.load(std::memory_order_relaxed);
  return progress;
}

absl::StatusOr<v1::JobResult> Executor::Run(const ParsedProgram& program,
                                            Communicator* comm) {
  {
    absl::MutexLock lock(&mu_);
    comm_ = comm;
  }
  // Forget the communicator on every return path: the caller destroys it
  // once Run returns, and a later Abort must not reach freed memory.
  absl::Cleanup forget_comm = [this] {
    absl::MutexLock lock(&mu_);
    comm_ = nullptr;
  };
  // An Abort that came before `comm_` was set did not reach the
  // communicator; it does not need to, as nothing was posted yet.
  RETURN_IF_ERROR(cancellation_.status());

  const absl::Time setup_start = absl::Now();
  phase_.store(JobPhase::kSetup, std::memory_order_relaxed);
  RETURN_IF_ERROR(CheckMemory(program));
  BufferSetOptions buffer_options;
  buffer_options.threads = options_.fill_threads;
  buffer_options.slicing = options_.slicing;
  buffer_options.user_buffers = options_.user_buffers;
  buffer_options.devices_per_worker = options_.devices_per_worker;
  absl::StatusOr<BufferSet> created =
      BufferSet::Create(program, cancellation_, buffer_options);
  if (absl::IsResourceExhausted(created.status())) {
    return OutOfHostMemoryError(program, NeedOf(program), AvailableMemory(),
                                created.status().message());
  }
  if (!created.ok()) return created.status();
  BufferSet buffers = *std::move(created);
  const ScopedBufferMemory memory(options_.metrics, program);
  const absl::Time setup_end = absl::Now();
  if (comm != nullptr && comm->size() > 1) {
    phase_.store(JobPhase::kConnect, std::memory_order_relaxed);
    absl::Status barrier = Barrier(*comm);
    if (!barrier.ok()) {
      RETURN_IF_ERROR(cancellation_.status());
      return absl::Status(barrier.code(),
                          absl::StrCat("waiting for the job's other workers "
                                       "to finish set-up: ",
                                       barrier.message()));
    }
  }
  const absl::Time steps_start = absl::Now();
  phase_.store(JobPhase::kData, std::memory_order_relaxed);

  RelayEnvironment env;
  env.program = &program;
  env.buffers = &buffers;
  env.comm = comm;
  env.cancellation = &cancellation_;
  env.options = options_.relay;
  env.slicing = options_.slicing;
  env.staging = &staging_pool();
  if (options_.metrics != nullptr) {
    env.on_hop_done = [this, &program](const StepDesc& step, int position,
                                       double seconds) {
      options_.metrics->HopFinished(program, step, position, seconds);
    };
  }
  v1::JobResult result;
  result.set_predicted_seconds(program.predicted_seconds);
  result.set_lower_bound_seconds(program.lower_bound_seconds);
  absl::Status steps = RunSteps(program, env, steps_start, result);
  const absl::Time steps_end = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    comm_ = nullptr;
  }
  RETURN_IF_ERROR(steps);
  result.set_seconds(absl::ToDoubleSeconds(steps_end - steps_start));

  phase_.store(JobPhase::kVerify, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(VerificationSummary verification,
                   buffers.VerifyDestinations(cancellation_, &verify_));
  result.set_elements_verified(verification.elements);
  result.set_mismatches(verification.mismatches);
  result.set_max_abs_error(verification.max_abs_error);
  for (const auto& [buffer, checksum] : verification.checksums) {
    v1::TileChecksum* tile = result.add_tile_checksums();
    tile->set_buffer(buffer);
    tile->set_checksum(checksum);
  }
  {
    absl::MutexLock lock(&mu_);
    timings_.setup_seconds = absl::ToDoubleSeconds(setup_end - setup_start);
    timings_.barrier_seconds = absl::ToDoubleSeconds(steps_start - setup_end);
    timings_.steps_seconds = result.seconds();
    timings_.verify_seconds = absl::ToDoubleSeconds(absl::Now() - steps_end);
    timings_.tile_bytes = buffers.total_bytes();
    timings_.first_mismatch = verification.first_mismatch;
  }
  return result;
}

absl::Status Executor::Barrier(Communicator& comm) {
  uint8_t outgoing = 1;
  std::vector<uint8_t> incoming(comm.size());
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    ASSIGN_OR_RETURN(
        requests.emplace_back(),
        comm.StartRecv(absl::MakeSpan(&incoming[peer], 1), peer, kBarrierTag));
    ASSIGN_OR_RETURN(
        requests.emplace_back(),
        comm.StartSend(absl::MakeConstSpan(&outgoing, 1), peer, kBarrierTag));
  }
  for (auto& request : requests) RETURN_IF_ERROR(request->Wait());
  return absl::OkStatus();
}

absl::Status Executor::RunSteps(const ParsedProgram& program,
                                const RelayEnvironment& env,
                                absl::Time steps_start, v1::JobResult& result) {
  const int n = static_cast<int>(program.steps.size());
  // Every step's kernel before any runs: an op the backend lacks fails the
  // job before its peers wait on this worker.
  std::vector<const StepKernel*> kernels(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<const StepKernel*> kernel =
        CpuKernels().Find(program.steps[i].op, kCpuBackend);
    if (!kernel.ok()) {
      return absl::Status(kernel.status().code(),
                          absl::StrCat("step ", program.steps[i].id, ": ",
                                       kernel.status().message()));
    }
    kernels[i] = *kernel;
  }
  absl::flat_hash_map<int, int> index_of;
  for (int i = 0; i < n; ++i) index_of[program.steps[i].id] = i;
  std::vector<int> missing_deps(n);
  std::vector<std::vector<int>> dependents(n);
  // Ready steps by (stage, id): every worker starts shared steps in the
  // same order.
  std::set<std::pair<int, int>> ready;
  for (int i = 0; i < n; ++i) {
    const StepDesc& step = program.steps[i];
    missing_deps[i] = step.deps.size();
    for (int dep : step.deps) dependents[index_of.at(dep)].push_back(i);
    if (missing_deps[i] == 0) ready.insert({step.stage, i});
  }

  absl::Mutex mu;
  absl::CondVar changed;  // a step finished (for the dispatcher)
  absl::CondVar queued;   // a step was queued (for idle pool threads)
  int running = 0;        // dispatched and not finished
  int finished = 0;
  bool shutdown = false;
  std::deque<int> queue;  // dispatched, not yet picked up by a thread
  absl::Status first_error;
  std::vector<double> starts(n, 0), ends(n, 0), cpu(n, 0);
  std::vector<std::thread> pool;

  WorkerMetrics* const metrics = options_.metrics;
  auto run_step = [&](int i) {
    if (metrics != nullptr) metrics->StepStarted();
    const absl::Time start = absl::Now();
    const double cpu_start = ThreadCpuSeconds();
    absl::Status status;
    // An exception escaping a std::thread ends the process; the
    // communicator turns Gloo's into Statuses, this catches the rest and
    // fails the job: std::bad_alloc (staging) as RESOURCE_EXHAUSTED,
    // anything else as INTERNAL.
    try {
      status = (*kernels[i])(program.steps[i], env);
    } catch (const std::bad_alloc&) {
      status = OutOfHostMemoryError(
          program, NeedOf(program), AvailableMemory(),
          absl::StrCat("std::bad_alloc in step ", program.steps[i].id,
                       ", allocating its staging"));
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat("step ", program.steps[i].id, ": ", e.what()));
    }
    const absl::Time end = absl::Now();
    const double cpu_used = ThreadCpuSeconds() - cpu_start;
    const double elapsed = absl::ToDoubleSeconds(end - start);
    if (metrics != nullptr) {
      metrics->StepEnded();
      if (status.ok()) {
        metrics->StepFinished(program, program.steps[i], elapsed);
      }
    }
    if (!status.ok()) {
      Fail(status);
    } else {
      steps_done_.fetch_add(1, std::memory_order_relaxed);
      bytes_done_.fetch_add(program.steps[i].bytes, std::memory_order_relaxed);
    }
    absl::MutexLock lock(&mu);
    --running;
    ++finished;
    starts[i] = absl::ToDoubleSeconds(start - steps_start);
    ends[i] = absl::ToDoubleSeconds(end - steps_start);
    cpu[i] = cpu_used;
    if (!status.ok()) {
      if (first_error.ok()) first_error = status;
    } else {
      for (int j : dependents[i]) {
        if (--missing_deps[j] == 0) {
          ready.insert({program.steps[j].stage, j});
        }
      }
    }
    changed.SignalAll();
  };
  // A pool thread: runs queued steps until shut down.
  auto serve = [&] {
    absl::MutexLock lock(&mu);
    while (true) {
      while (queue.empty() && !shutdown) queued.Wait(&mu);
      if (queue.empty()) return;
      const int i = queue.front();
      queue.pop_front();
      mu.Unlock();
      run_step(i);
      mu.Lock();
    }
  };

  {
    absl::MutexLock lock(&mu);
    while (finished < n) {
      const bool stopping = !first_error.ok() || cancellation_.cancelled();
      if (stopping && running == 0) break;
      while (!stopping && !ready.empty() &&
             running < options_.max_concurrent_steps) {
        const int i = ready.begin()->second;
        ready.erase(ready.begin());
        // Every dispatched step gets a thread at once: an idle one, or a
        // new one when all are busy (see the header: why never wait).
        ++running;
        queue.push_back(i);
        if (running > static_cast<int>(pool.size())) {
          pool.emplace_back(serve);
        } else {
          queued.Signal();
        }
      }
      if (running == 0 && ready.empty()) {
        // Unreachable for an acyclic program (ParseProgram checks it).
        first_error = absl::InternalError("no step can start");
        break;
      }
      // Wakes on step completion; the timeout re-checks cancellation.
      changed.WaitWithTimeout(&mu, absl::Milliseconds(100));
    }
    shutdown = true;
    queued.SignalAll();
  }
  for (std::thread& thread : pool) thread.join();
  peak_threads_ = static_cast<int>(pool.size());

  if (!first_error.ok()) return first_error;
  RETURN_IF_ERROR(cancellation_.status());

  int64_t received_bytes = 0;
  for (int i = 0; i < n; ++i) {
    const StepDesc& step = program.steps[i];
    v1::StepResult* step_result = result.add_steps();
    step_result->set_step(step.id);
    step_result->set_worker(program.worker);
    step_result->set_bytes(step.bytes);
    step_result->set_seconds(ends[i] - starts[i]);
    step_result->set_start_seconds(starts[i]);
    step_result->set_end_seconds(ends[i]);
    step_result->set_cpu_seconds(cpu[i]);
    step_result->set_device(program.FirstLocalDevice(step));
    received_bytes += LocalDeliveredBytes(program, step);
  }
  result.set_bytes_moved(received_bytes);
  return absl::OkStatus();
}

}  // namespace meshcast::worker
