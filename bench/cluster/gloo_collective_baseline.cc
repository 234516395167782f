// gloo_collective_baseline: the baseline of cluster_bench's `collective`
// section. Gloo's own collectives (the library torch.distributed's Gloo
// backend runs) between --ranks processes on this machine over loopback TCP,
// on float32 buffers of the sizes nccl-tests (and the `collective` job kind)
// count, so meshcast's figure can be read as a ratio of what a stock
// framework gets on the same machine in the same run.
//
//   gloo_collective_baseline --ranks=4 --ops=all_reduce,broadcast
//       --sizes=1MiB,16MiB --iters=10 --warmup=2
//
// It forks --ranks processes (before any thread exists), which meet through
// a gloo::rendezvous::FileStore in a fresh temporary directory and connect a
// full mesh of gloo::transport::tcp pairs on --host. Per op and size, every
// rank runs --warmup untimed iterations, then --iters timed ones, each after
// a barrier; an iteration's time is its slowest rank's (the same rule the
// `collective` kind applies to a step). The last iteration's output is
// checked on every rank against the exact expected values (the inputs are
// small integers, so float32 sums are exact). Rank 0 prints one
// `gloo_baseline` line per op and size (baseline_report.h) to stdout.
//
// Ops and the Gloo algorithm each runs (all Debian's libgloo provides):
//   all_reduce      gloo::allreduce, AllreduceOptions::RING, out of place
//   all_gather      gloo::allgather (a ring), each rank's count/n elements
//   reduce_scatter  gloo::ReduceScatterHalvingDoubling (in place; Gloo has
//                   no ring reduce-scatter), count/n elements to each rank
//   all_to_all      gloo::alltoall (pairwise), count/n elements per pair
//   broadcast       gloo::broadcast (binomial tree) from rank 0, in place
//
// Exit status: 0 when every op ran and verified, 1 when a rank failed (its
// message on stderr) or an output was wrong, 2 on bad flags.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/cluster/baseline_report.h"
#include "bench/cluster/collective_cases.h"
#include "bench/cluster/sample_stats.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "util/status_macros.h"

ABSL_FLAG(int, ranks, 4, "processes (ranks) to run, >= 2");
ABSL_FLAG(std::string, ops, "all",
          "comma-separated: all_reduce, all_gather, reduce_scatter, "
          "all_to_all, broadcast, or all");
ABSL_FLAG(std::string, sizes, "1MiB",
          "comma-separated sizes as nccl-tests counts them, e.g. 1MiB,16MiB");
ABSL_FLAG(int, iters, 10, "timed iterations per op and size (>= 1)");
ABSL_FLAG(int, warmup, 2, "untimed iterations per op and size (>= 0)");
ABSL_FLAG(double, timeout_s, 120,
          "seconds a rank waits for a peer in one operation; the whole run "
          "is killed after (ops x sizes x (iters + warmup) + 1) times this");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the ranks listen on");
ABSL_FLAG(bool, inject_error_for_test, false,
          "corrupt one output element on the last rank before the check (the "
          "test of the check itself)");

namespace meshcast::bench {
namespace {

// Input element i of rank r: small integers, so that sums over up to a few
// thousand ranks stay exact in float32 and every rank and position differs.
float Value(int rank, int64_t i) {
  return static_cast<float>(i % 1021 + 1024 * (rank % 4096));
}

// One op at one size on one rank: buffers set up once, `run` is the timed
// call, `prepare` restores in-place inputs before it (untimed), `verify`
// counts wrong output elements after it.
struct OpRun {
  std::string algorithm;
  std::function<void()> prepare = [] {};
  std::function<void()> run;
  std::function<int64_t()> verify;
};

// Buffers outlive the closures that point into them.
struct Buffers {
  std::vector<float> in, out, pristine;
};

absl::StatusOr<OpRun> MakeOp(const std::string& op,
                             const std::shared_ptr<gloo::Context>& context,
                             int64_t count, uint32_t tag,
                             std::chrono::milliseconds timeout, Buffers& b) {
  const int n = context->size;
  const int rank = context->rank;
  const int64_t chunk = count / n;  // for the ops that split the buffer
  OpRun r;
  if (op == "all_reduce") {
    b.in.resize(count);
    b.out.assign(count, 0);
    for (int64_t i = 0; i < count; ++i) b.in[i] = Value(rank, i);
    r.algorithm = "ring";
    r.run = [&b, context, count, tag, timeout] {
      gloo::AllreduceOptions opts(context);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setInput(b.in.data(), count);
      opts.setOutput(b.out.data(), count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(
              &gloo::sum<float>));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    };
    r.verify = [&b, n, count] {
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int s = 0; s < n; ++s) expected += Value(s, i);
        wrong += b.out[i] != expected;
      }
      return wrong;
    };
  } else if (op == "all_gather") {
    b.in.resize(chunk);
    b.out.assign(count, 0);
    for (int64_t j = 0; j < chunk; ++j) b.in[j] = Value(rank, rank * chunk + j);
    r.algorithm = "ring";
    r.run = [&b, context, chunk, count, tag, timeout] {
      gloo::AllgatherOptions opts(context);
      opts.setInput(b.in.data(), chunk);
      opts.setOutput(b.out.data(), count);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    };
    r.verify = [&b, chunk, count] {
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) {
        wrong += b.out[i] != Value(static_cast<int>(i / chunk), i);
      }
      return wrong;
    };
  } else if (op == "reduce_scatter") {
    b.pristine.resize(count);
    for (int64_t i = 0; i < count; ++i) b.pristine[i] = Value(rank, i);
    b.out = b.pristine;
    if (count > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_scatter: Gloo's ReduceScatterHalvingDoubling "
                       "takes an int count; ",
                       count, " elements is too many"));
    }
    // Built once, run many times: it sets up its pair buffers up front.
    auto algorithm =
        std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
            context, std::vector<float*>{b.out.data()}, static_cast<int>(count),
            std::vector<int>(n, static_cast<int>(chunk)));
    r.algorithm = "halving_doubling";
    r.prepare = [&b] {
      std::copy(b.pristine.begin(), b.pristine.end(), b.out.begin());
    };
    r.run = [algorithm] { algorithm->run(); };
    // The result for this rank lands at the start of its buffer.
    r.verify = [&b, n, rank, chunk] {
      int64_t wrong = 0;
      for (int64_t j = 0; j < chunk; ++j) {
        float expected = 0;
        for (int s = 0; s < n; ++s) expected += Value(s, rank * chunk + j);
        wrong += b.out[j] != expected;
      }
      return wrong;
    };
  } else if (op == "all_to_all") {
    b.in.resize(count);
    b.out.assign(count, 0);
    for (int64_t i = 0; i < count; ++i) b.in[i] = Value(rank, i);
    r.algorithm = "pairwise";
    r.run = [&b, context, count, tag, timeout] {
      gloo::AlltoallOptions opts(context);
      opts.setInput(b.in.data(), count);
      opts.setOutput(b.out.data(), count);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::alltoall(opts);
    };
    // Block s of rank d's output is block d of rank s's input.
    r.verify = [&b, n, rank, chunk] {
      int64_t wrong = 0;
      for (int s = 0; s < n; ++s) {
        for (int64_t j = 0; j < chunk; ++j) {
          wrong += b.out[s * chunk + j] != Value(s, rank * chunk + j);
        }
      }
      return wrong;
    };
  } else if (op == "broadcast") {
    b.out.resize(count);
    for (int64_t i = 0; i < count; ++i) {
      b.out[i] = rank == 0 ? Value(0, i) : -1.0f;
    }
    r.algorithm = "binomial_tree";
    // Receivers get a poisoned buffer before every iteration, so the last
    // one's output is its own.
    r.prepare = [&b, rank] {
      if (rank != 0) std::fill(b.out.begin(), b.out.end(), -1.0f);
    };
    r.run = [&b, context, count, tag, timeout] {
      gloo::BroadcastOptions opts(context);
      opts.setOutput(b.out.data(), count);
      opts.setRoot(0);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    };
    r.verify = [&b, count] {
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) wrong += b.out[i] != Value(0, i);
      return wrong;
    };
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown op ", op));
  }
  return r;
}

struct Config {
  int ranks = 0;
  std::vector<std::string> ops;
  std::vector<int64_t> sizes;
  int iters = 0;
  int warmup = 0;
  std::chrono::milliseconds timeout{0};
  std::string host;
  std::string store_dir;
  bool inject_error = false;
};

void Barrier(const std::shared_ptr<gloo::Context>& context,
             std::chrono::milliseconds timeout) {
  gloo::BarrierOptions opts(context);
  opts.setTag(1);
  opts.setTimeout(timeout);
  gloo::barrier(opts);
}

// Element-wise max (or sum) of `values` over all ranks, in place.
void AllreduceDoubles(const std::shared_ptr<gloo::Context>& context,
                      std::vector<double>& values, bool max,
                      std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(values.data(), values.size());
  using Func = void (*)(void*, const void*, const void*, size_t);
  opts.setReduceFunction(max ? static_cast<Func>(&gloo::max<double>)
                             : static_cast<Func>(&gloo::sum<double>));
  opts.setTag(2);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// One rank's whole run. Gloo reports errors by throwing; they stop here.
absl::Status RunRank(int rank, const Config& config) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = config.host;
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(rank, config.ranks);
    context->setTimeout(config.timeout);
    gloo::rendezvous::FileStore store(config.store_dir);
    context->connectFullMesh(store, device);

    bool all_verified = true;
    uint32_t tag = 100;
    for (const std::string& op : config.ops) {
      for (int64_t size : config.sizes) {
        const int64_t count =
            CollectiveCount(op, size, sizeof(float), config.ranks);
        BaselineResult result;
        result.op = op;
        result.ranks = config.ranks;
        result.count = count;
        result.bytes = count * static_cast<int64_t>(sizeof(float));
        result.iters = config.iters;
        if (count <
            (op == "all_reduce" || op == "broadcast" ? 1 : config.ranks)) {
          return absl::InvalidArgumentError(absl::StrCat(
              op, ": size ", size, " B is below one float32 per rank"));
        }
        Buffers buffers;
        ASSIGN_OR_RETURN(OpRun run, MakeOp(op, context, count, ++tag,
                                           config.timeout, buffers));
        result.algorithm = run.algorithm;
        std::vector<double> times;
        for (int it = 0; it < config.warmup + config.iters; ++it) {
          run.prepare();
          Barrier(context, config.timeout);
          const auto start = std::chrono::steady_clock::now();
          run.run();
          const double seconds = std::chrono::duration<double>(
                                     std::chrono::steady_clock::now() - start)
                                     .count();
          if (it >= config.warmup) times.push_back(seconds);
        }
        AllreduceDoubles(context, times, /*max=*/true, config.timeout);
        if (config.inject_error && rank == config.ranks - 1) {
          std::vector<float>& output =
              buffers.out.empty() ? buffers.in : buffers.out;
          output[0] += 1;
        }
        std::vector<double> wrong = {static_cast<double>(run.verify())};
        AllreduceDoubles(context, wrong, /*max=*/false, config.timeout);
        const SampleSummary summary = Summarize(times);
        result.median_seconds = summary.p50;
        result.min_seconds = summary.min;
        result.max_seconds = summary.max;
        if (wrong[0] != 0) {
          result.status = "mismatch";
          all_verified = false;
        }
        if (rank == 0) {
          std::cout << FormatBaselineLine(result) << std::endl;
          if (wrong[0] != 0) {
            std::cerr << absl::StrFormat(
                "gloo_collective_baseline: %s %d B: %.0f wrong elements over "
                "all ranks\n",
                op, result.bytes, wrong[0]);
          }
        }
      }
    }
    Barrier(context, config.timeout);
    if (!all_verified) {
      return absl::DataLossError("an output did not match its expected values");
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo: ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config config;
  config.ranks = absl::GetFlag(FLAGS_ranks);
  if (config.ranks < 2 || config.ranks > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks must be in 2..4096, got ", config.ranks));
  }
  ASSIGN_OR_RETURN(config.ops, ParseCollectiveOps(absl::GetFlag(FLAGS_ops)));
  ASSIGN_OR_RETURN(config.sizes,
                   ParseSizeList(absl::GetFlag(FLAGS_sizes), "sizes"));
  config.iters = absl::GetFlag(FLAGS_iters);
  config.warmup = absl::GetFlag(FLAGS_warmup);
  if (config.iters < 1 || config.warmup < 0) {
    return absl::InvalidArgumentError("--iters must be >= 1 and --warmup >= 0");
  }
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout_s > 0)) {
    return absl::InvalidArgumentError("--timeout_s must be > 0");
  }
  config.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  config.host = absl::GetFlag(FLAGS_host);
  config.inject_error = absl::GetFlag(FLAGS_inject_error_for_test);
  return config;
}

// Forks the ranks, waits for them all, and kills the rest as soon as one
// fails or the run overstays its deadline, so no rank is left waiting on a
// dead peer.
int RunAll(Config config) {
  char store_template[] = "/tmp/gloo-baseline.XXXXXX";
  if (mkdtemp(store_template) == nullptr) {
    std::perror("gloo_collective_baseline: mkdtemp");
    return 1;
  }
  config.store_dir = store_template;
  std::cout << absl::StrFormat(
                   "# gloo_collective_baseline: %d ranks (processes) over "
                   "loopback TCP on %s, float32, %d warm-up + %d timed "
                   "iterations per op and size",
                   config.ranks, config.host, config.warmup, config.iters)
            << std::endl;  // flushed: the children inherit the buffer
  std::vector<pid_t> children;
  for (int rank = 0; rank < config.ranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_collective_baseline: fork");
      for (pid_t child : children) kill(child, SIGKILL);
      for (pid_t child : children) waitpid(child, nullptr, 0);
      std::filesystem::remove_all(config.store_dir);
      return 1;
    }
    if (pid == 0) {
      const absl::Status status = RunRank(rank, config);
      if (!status.ok()) {
        std::cerr << "gloo_collective_baseline: rank " << rank << ": "
                  << status.message() << std::endl;
      }
      std::cout.flush();
      std::_Exit(status.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      config.timeout *
          (1 + config.ops.size() * config.sizes.size() *
                   static_cast<size_t>(config.iters + config.warmup));
  int failed = 0;
  size_t running = children.size();
  while (running > 0) {
    int wstatus = 0;
    const pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0) {
      for (pid_t& child : children) {
        if (child == pid) child = -1;
      }
      --running;
      if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) ++failed;
    } else if (pid < 0) {
      break;  // no children left to wait for
    }
    const bool overdue = std::chrono::steady_clock::now() > deadline;
    if ((failed > 0 || overdue) && running > 0) {
      if (overdue) {
        std::cerr << "gloo_collective_baseline: deadline passed; stopping the "
                     "ranks\n";
        ++failed;
      }
      for (pid_t child : children) {
        if (child > 0) kill(child, SIGKILL);
      }
      for (pid_t& child : children) {
        if (child > 0) waitpid(child, nullptr, 0);
        child = -1;
      }
      running = 0;
    }
    if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::error_code ignored;
  std::filesystem::remove_all(config.store_dir, ignored);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Gloo's collectives between N local processes over loopback TCP, the "
      "baseline of cluster_bench's collective section\n"
      "  gloo_collective_baseline --ranks=4 --ops=all_reduce "
      "--sizes=1MiB,16MiB "
      "--iters=10 --warmup=2");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<meshcast::bench::Config> config =
      meshcast::bench::ConfigFromFlags();
  if (!config.ok()) {
    std::cerr << "gloo_collective_baseline: " << config.status().message()
              << "\n";
    return 2;
  }
  return meshcast::bench::RunAll(*std::move(config));
}
