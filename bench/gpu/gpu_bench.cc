// gpu_bench: the GPU data plane's bandwidth, in tables shaped like
// nccl-tests' output, each with a summary line.
//
//   gpu_bench [--sections=copy,reshard,nccl,collective,attention]
//             [--max_bytes=1073741824] [--reshard_bytes=268435456]
//             [--iters=20] [--collective_max_bytes=268435456]
//             [--collective_ranks=4]
//
// copy     cudaMemcpyAsync device to device on GPU 0, and the strided pack
//          kernel, for growing sizes: copy rate (bytes / time), memory
//          traffic (read + write = 2 x bytes / time) and its share of the
//          GPU's peak memory bandwidth. The peak comes from the device
//          attributes (memory clock x bus width x 2) where CUDA reports
//          them, and is printed beside a table of published peaks by device
//          name (H100 SXM 3.35 TB/s, H200 4.8 TB/s).
// reshard  the cross-mesh resharding suite's specs (the cases tagged gpu in
//          bench/workloads/public_suite.txt, --public_suite) on (2,2) -> (2,2)
//          meshes, planned by the planner (meshcast strategy), projected like
//          the controller does, and run by the GPU executor on 8 virtual
//          devices of GPU 0 (cuda:0x8): best of 3 runs, every element
//          verified.
// nccl     with 2+ GPUs: ncclBroadcast over all GPUs (algbw = bytes / time,
//          busbw = algbw, nccl-tests' broadcast factor 1), then a 1-to-m
//          reshard (one relay chain from GPU 0 to all others, one worker
//          thread per GPU, NCCL between them) against that busbw.
// collective  every op of the `collective` job kind (all_reduce, all_gather,
//          reduce_scatter, all_to_all, broadcast) planned by CollectiveKind,
//          projected like the controller does and run by the GPU executor
//          (the engine's GPU kernels, device_kernels.h): with 2+ GPUs one
//          worker thread per GPU and NCCL between them, else
//          --collective_ranks virtual devices of GPU 0. Sizes 1 MiB to
//          --collective_max_bytes (x4), sized as nccl-tests sizes them; per
//          size the mean step time over the iterations after the first (the
//          slowest worker's CUDA-event time of each step), algbw = size /
//          time and busbw = algbw x nccl-tests' factor (BusBandwidthFactor:
//          all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
//          (n-1)/n; broadcast 1), and the verification's mismatches
//          (VERIFY_MODE_SAMPLE for computed outputs, every moved element).
// attention  the attention block op's GPU kernels (compute_kernels.h) on
//          GPU 0: batch 1, 16 heads, head_dim 128, bfloat16, 1024 tokens to
//          --attention_max_tokens (x4), not causal and causal (the query
//          and key positions 0..n-1), one block over all keys. FLOPs = 4 x
//          head_dim x heads x the (query, key) pairs kept; TFLOP/s of the
//          tiled kernel (what LaunchAttentionBlock runs) beside the row
//          kernel (one thread block per query row, the baseline) and the
//          GPU's fp32 CUDA-core peak (SMs x 128 FMA x 2 x clock: the bound
//          of kernels without tensor cores, as both are), the largest
//          difference of the two kernels' outputs o = acc / l, and the
//          backward pass (the dQ then the dK / dV kernel; its work counted
//          as 2.5 x the forward's, a fused backward's).
//
// Without a GPU it still plans the reshard cases (checking that code path)
// and exits 0 with a message; errors exit 1.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/workloads/public_suite.h"
#include "controller/program_builder.h"
#include "planner/kinds/collective/collective_kind.h"
#include "planner/kinds/reshard/reshard_lowering.h"
#include "planner/mesh.h"
#include "planner/plan.h"
#include "planner/sharding.h"
#include "planner/strategy.h"
#include "planner/topology.h"
#include "planner/unit_task.h"
#include "util/status_macros.h"
#include "worker/cuda/compute_kernels.h"
#include "worker/cuda/copy_kernels.h"
#include "worker/cuda/cuda_handles.h"
#include "worker/cuda/device_copy.h"
#include "worker/cuda/device_executor.h"
#include "worker/cuda/device_pattern.h"
#include "worker/in_memory_kv_store.h"
#include "worker/kernels/element_core.h"
#include "worker/kv_store.h"
#include "worker/nccl_communicator.h"
#include "worker/program.h"

ABSL_FLAG(std::string, sections, "copy,reshard,nccl,collective,attention",
          "comma-separated sections to run: copy, reshard, nccl, collective, "
          "attention");
ABSL_FLAG(int64_t, attention_max_tokens, 4096,
          "longest sequence of the attention section (from 1024, x4)");
ABSL_FLAG(int64_t, collective_max_bytes, int64_t{256} << 20,
          "largest size of the collective sweep, bytes (nccl-tests' size)");
ABSL_FLAG(int, collective_ranks, 4,
          "ranks of the collective section on a machine with one GPU "
          "(virtual devices of GPU 0); with 2+ GPUs, one rank per GPU");
ABSL_FLAG(int64_t, max_bytes, int64_t{1} << 30,
          "largest buffer of the copy and NCCL sweeps, bytes");
ABSL_FLAG(int64_t, reshard_bytes, int64_t{256} << 20,
          "tensor size of the reshard cases, bytes (int32 elements)");
ABSL_FLAG(int, iters, 20, "timed iterations per size (after 3 warm-ups)");
ABSL_FLAG(std::string, public_suite, "",
          "the public suite's file, for the reshard section's cases "
          "(default: $MESHCAST_PUBLIC_SUITE, else "
          "bench/workloads/public_suite.txt of the source tree)");

namespace meshcast::bench {
namespace {

using worker::PatternType;
using worker::cuda::CudaStatus;
using worker::cuda::CudaStream;
using worker::cuda::DeviceMemory;
using worker::cuda::GpuCount;
using worker::cuda::ScopedCudaDevice;

constexpr double kGB = 1e9;

// Published peak memory bandwidths (bytes/s), matched on the device name.
struct KnownPeak {
  const char* name_part;
  double bytes_per_second;
};
constexpr KnownPeak kKnownPeaks[] = {
    {"H200", 4.8e12},   {"H100 NVL", 3.9e12},         {"H100 PCIe", 2.0e12},
    {"H100", 3.35e12},  {"A100-SXM4-80GB", 2.039e12}, {"A100 80GB", 1.935e12},
    {"A100", 1.555e12},
};

double KnownPeakFor(const std::string& name) {
  for (const KnownPeak& peak : kKnownPeaks) {
    if (absl::StrContains(name, peak.name_part)) return peak.bytes_per_second;
  }
  return 0;
}

struct GpuInfo {
  std::string name;
  int sms = 0;
  double memory_bytes = 0;
  double attribute_peak = 0;  // from clock x bus width, 0 if unknown
  double table_peak = 0;      // from kKnownPeaks, 0 if unknown
  double peak() const {
    return attribute_peak > 0 ? attribute_peak : table_peak;
  }
};

absl::StatusOr<GpuInfo> DescribeGpu(int gpu) {
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, gpu),
                             "cudaGetDeviceProperties"));
  GpuInfo info;
  info.name = prop.name;
  info.sms = prop.multiProcessorCount;
  info.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  int clock_khz = 0, bus_bits = 0;
  // The cudaDeviceProp fields for these are gone in CUDA 13; the attributes
  // remain (and may read 0 on some devices).
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, gpu) ==
          cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, gpu) ==
          cudaSuccess) {
    info.attribute_peak = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);
  }
  cudaGetLastError();
  info.table_peak = KnownPeakFor(info.name);
  return info;
}

std::string Peak(double bytes_per_second) {
  return bytes_per_second > 0
             ? absl::StrFormat("%.2f TB/s", bytes_per_second / 1e12)
             : std::string("unknown");
}

std::vector<int64_t> Sizes(int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t b = min_bytes; b <= max_bytes; b *= 4) sizes.push_back(b);
  return sizes;
}

// Mean seconds of `iters` calls of `issue` on `stream` after 3 warm-ups.
absl::StatusOr<double> TimeOnStream(
    cudaStream_t stream, int iters,
    const std::function<absl::Status()>& issue) {
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(issue());
  cudaEvent_t start, end;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&end), "cudaEventCreate"));
  absl::Status status = CudaStatus(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < iters && status.ok(); ++i) status = issue();
  if (status.ok()) status = CudaStatus(cudaEventRecord(end, stream), "record");
  if (status.ok()) {
    status = CudaStatus(cudaEventSynchronize(end), "cudaEventSynchronize");
  }
  float ms = 0;
  if (status.ok()) {
    status = CudaStatus(cudaEventElapsedTime(&ms, start, end), "elapsed");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  RETURN_IF_ERROR(status);
  return ms / 1e3 / iters;
}

absl::Status CopySection(const GpuInfo& info) {
  const int iters = absl::GetFlag(FLAGS_iters);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  ScopedCudaDevice on(0);
  RETURN_IF_ERROR(on.status());
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(0));
  // The source is twice as large: the pack reads a half-width slice of a
  // tile of 2 x size.
  ASSIGN_OR_RETURN(DeviceMemory a, DeviceMemory::Allocate(0, 2 * max_bytes));
  ASSIGN_OR_RETURN(DeviceMemory b, DeviceMemory::Allocate(0, max_bytes));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(a.data(), 1, 2 * max_bytes), "memset"));

  std::printf(
      "#\n# Device-to-device copy on GPU 0 (%s); traffic = read + "
      "write = 2 x size / time; peak %s\n",
      info.name.c_str(), Peak(info.peak()).c_str());
  std::printf("# %12s %10s %12s %12s %8s   %12s %12s %8s\n", "size(B)",
              "time(us)", "copy(GB/s)", "traffic(GB/s)", "%peak",
              "pack time(us)", "pack(GB/s)", "%peak");
  double best_copy = 0, best_pack = 0;
  for (int64_t bytes : Sizes(int64_t{1} << 20, max_bytes)) {
    ASSIGN_OR_RETURN(
        const double copy_seconds,
        TimeOnStream(stream.get(), iters, [&]() -> absl::Status {
          return CudaStatus(
              cudaMemcpyAsync(b.data(), a.data(), bytes,
                              cudaMemcpyDeviceToDevice, stream.get()),
              "cudaMemcpyAsync");
        }));
    // The pack kernel on a strided slice of the same size: every other
    // 4 KiB row of a tile twice as large (int32 elements).
    const int64_t row = 1024;  // elements
    const int64_t rows = std::max<int64_t>(1, bytes / 4 / row / 2);
    const Box tile = {{0, 2 * rows}, {0, 2 * row}};
    const Box slice = {{0, 2 * rows}, {0, row}};
    double pack_seconds = 0;
    if (NumElements(tile) * 4 <= 2 * max_bytes) {
      ASSIGN_OR_RETURN(
          const worker::cuda::RegionCopy pack,
          worker::cuda::MakePackCopy(slice, tile, 0, NumElements(slice), 4));
      ASSIGN_OR_RETURN(pack_seconds,
                       TimeOnStream(stream.get(), iters, [&]() -> absl::Status {
                         return CudaStatus(
                             worker::cuda::LaunchRegionCopy(
                                 b.bytes(), a.bytes(), pack, stream.get()),
                             "pack kernel");
                       }));
    }
    const double copy_traffic = 2.0 * bytes / copy_seconds;
    best_copy = std::max(best_copy, copy_traffic);
    const int64_t pack_bytes = NumElements(slice) * 4;
    const double pack_traffic =
        pack_seconds > 0 ? 2.0 * pack_bytes / pack_seconds : 0;
    best_pack = std::max(best_pack, pack_traffic);
    std::printf(
        "  %12lld %10.1f %12.1f %12.1f %7.1f%%   %12.1f %12.1f %7.1f%%\n",
        static_cast<long long>(bytes), copy_seconds * 1e6,
        bytes / copy_seconds / kGB, copy_traffic / kGB,
        info.peak() > 0 ? 100 * copy_traffic / info.peak() : 0.0,
        pack_seconds * 1e6,
        pack_seconds > 0 ? pack_bytes / pack_seconds / kGB : 0.0,
        info.peak() > 0 ? 100 * pack_traffic / info.peak() : 0.0);
  }
  std::printf(
      "# copy summary: best memory traffic %.1f GB/s (copy), %.1f "
      "GB/s (strided pack) = %.1f%% / %.1f%% of peak %s\n",
      best_copy / kGB, best_pack / kGB,
      info.peak() > 0 ? 100 * best_copy / info.peak() : 0.0,
      info.peak() > 0 ? 100 * best_pack / info.peak() : 0.0,
      Peak(info.peak()).c_str());
  return absl::OkStatus();
}

struct ReshardCase {
  std::string name;
  std::string src_spec;
  std::string dst_spec;
};

// The spec pairs of the public suite's cases tagged "gpu"
// (bench/workloads/public_suite.txt: cases 1-5, 9) on (2,2) -> (2,2) meshes
// of 8 virtual devices: 4 "hosts" of 2, source mesh on hosts 0-1,
// destination on 2-3.
absl::StatusOr<std::vector<ReshardCase>> SuiteCases() {
  const std::string path = absl::GetFlag(FLAGS_public_suite);
  ASSIGN_OR_RETURN(std::vector<PublicSuiteCase> suite,
                   LoadPublicSuite(path.empty() ? DefaultPublicSuitePath()
                                                : path));
  std::vector<ReshardCase> cases;
  for (const PublicSuiteCase& c : CasesTagged(suite, "gpu")) {
    cases.push_back({c.name, c.src_spec, c.dst_spec});
  }
  if (cases.empty()) {
    return absl::InvalidArgumentError(
        "the public suite has no case tagged gpu");
  }
  return cases;
}

struct PlannedCase {
  ReshardCase c;
  int64_t tensor_bytes = 0;
  int steps = 0;
  v1::WorkerProgram program;
};

absl::StatusOr<PlannedCase> PlanCase(const ReshardCase& c,
                                     int64_t tensor_bytes) {
  const Topology topology = Topology::FromGbps(4, 2, 400, 3600);
  ReshardProblem problem;
  // int32 elements, shape (2^k, 1024, 64)-like so every spec divides it.
  const int64_t rows = std::max<int64_t>(8, tensor_bytes / 4 / 1024 / 64);
  problem.tensor = TensorSpec{{rows, 1024, 64}, DType::kInt32};
  ASSIGN_OR_RETURN(problem.src_mesh, ParseMesh("2x2@0", topology, "src"));
  ASSIGN_OR_RETURN(problem.dst_mesh, ParseMesh("2x2@2", topology, "dst"));
  ASSIGN_OR_RETURN(problem.src_spec, ShardingSpec::Parse(c.src_spec));
  ASSIGN_OR_RETURN(problem.dst_spec, ShardingSpec::Parse(c.dst_spec));
  RETURN_IF_ERROR(problem.Validate(topology));
  ASSIGN_OR_RETURN(const ReshardPlan plan,
                   PlanReshard({problem}, topology, Strategy::kMeshcast));
  ASSIGN_OR_RETURN(const v1::Plan proto, LowerReshardPlan(plan));
  WorkerSlot slot;
  slot.name = "gpu0";
  slot.host_index = 0;
  for (int d = 0; d < topology.num_devices(); ++d) slot.devices.push_back(d);
  ASSIGN_OR_RETURN(std::vector<v1::WorkerProgram> programs,
                   ProjectPlan(proto, absl::StrCat("bench-", c.name), {slot}));
  if (programs.size() != 1) {
    return absl::InternalError("expected one program for one worker");
  }
  PlannedCase planned;
  planned.c = c;
  planned.tensor_bytes = problem.tensor.num_bytes();
  planned.steps = static_cast<int>(plan.transfers.size());
  planned.program = programs[0];
  return planned;
}

absl::Status ReshardSection(const GpuInfo* info) {
  std::vector<PlannedCase> cases;
  ASSIGN_OR_RETURN(const std::vector<ReshardCase> suite, SuiteCases());
  for (const ReshardCase& c : suite) {
    ASSIGN_OR_RETURN(PlannedCase planned,
                     PlanCase(c, absl::GetFlag(FLAGS_reshard_bytes)));
    cases.push_back(std::move(planned));
  }
  if (info == nullptr) {
    std::printf("# reshard: planned %zu cases (no GPU: not run)\n",
                cases.size());
    return absl::OkStatus();
  }
  std::printf(
      "#\n# Reshard on one GPU: 8 virtual devices (cuda:0x8), (2,2) -> (2,2) "
      "meshes, meshcast plans, GPU executor, best of 3; tensor GB/s = tensor "
      "bytes / time, traffic = 2 x bytes received / time\n");
  std::printf("# %-6s %-12s %10s %6s %10s %12s %14s %8s %10s\n", "case",
              "specs", "tensor(B)", "steps", "time(ms)", "tensor(GB/s)",
              "traffic(GB/s)", "%peak", "mismatches");
  double best_traffic = 0;
  int64_t total_mismatches = 0;
  for (const PlannedCase& planned : cases) {
    ASSIGN_OR_RETURN(const worker::ParsedProgram program,
                     worker::ParseProgram(planned.program));
    ASSIGN_OR_RETURN(worker::DeviceSpec spec,
                     worker::ParseDeviceSpec("cuda:0x8"));
    double best = 0;
    int64_t received = 0, mismatches = 0;
    for (int run = 0; run < 3; ++run) {
      worker::cuda::DeviceExecutor executor(spec,
                                            worker::cuda::CudaBackendOptions());
      ASSIGN_OR_RETURN(const v1::JobResult result,
                       executor.Run(program, nullptr));
      if (best == 0 || result.seconds() < best) best = result.seconds();
      received = result.bytes_moved();
      mismatches += result.mismatches();
    }
    total_mismatches += mismatches;
    const double traffic = best > 0 ? 2.0 * received / best : 0;
    best_traffic = std::max(best_traffic, traffic);
    std::printf(
        "  %-6s %-12s %10lld %6d %10.3f %12.1f %14.1f %7.1f%% %10lld\n",
        planned.c.name.c_str(),
        absl::StrCat(planned.c.src_spec, "->", planned.c.dst_spec).c_str(),
        static_cast<long long>(planned.tensor_bytes), planned.steps, best * 1e3,
        best > 0 ? planned.tensor_bytes / best / kGB : 0.0, traffic / kGB,
        info->peak() > 0 ? 100 * traffic / info->peak() : 0.0,
        static_cast<long long>(mismatches));
  }
  std::printf(
      "# reshard summary: %zu cases, best memory traffic %.1f GB/s "
      "(%.1f%% of peak %s), %lld mismatches\n",
      cases.size(), best_traffic / kGB,
      info->peak() > 0 ? 100 * best_traffic / info->peak() : 0.0,
      Peak(info->peak()).c_str(), static_cast<long long>(total_mismatches));
  if (total_mismatches != 0) {
    return absl::DataLossError("reshard delivered wrong data");
  }
  return absl::OkStatus();
}

absl::Status NcclStatusOf(ncclResult_t result, const char* what) {
  return worker::NcclStatus(result, what);
}

// ncclBroadcast from GPU 0 over all GPUs; returns busbw (bytes/s) per size.
absl::StatusOr<std::vector<std::pair<int64_t, double>>> BroadcastSweep(
    int gpus) {
  const int iters = absl::GetFlag(FLAGS_iters);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  std::vector<ncclComm_t> comms(gpus, nullptr);
  RETURN_IF_ERROR(NcclStatusOf(ncclCommInitAll(comms.data(), gpus, nullptr),
                               "ncclCommInitAll"));
  std::vector<CudaStream> streams;
  std::vector<DeviceMemory> buffers;
  for (int g = 0; g < gpus; ++g) {
    ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(g));
    streams.push_back(std::move(stream));
    ASSIGN_OR_RETURN(DeviceMemory buffer, DeviceMemory::Allocate(g, max_bytes));
    ScopedCudaDevice on(g);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemset(buffer.data(), g == 0 ? 0x5A : 0, max_bytes), "memset"));
    buffers.push_back(std::move(buffer));
  }
  auto broadcast = [&](int64_t bytes) -> absl::Status {
    RETURN_IF_ERROR(NcclStatusOf(ncclGroupStart(), "ncclGroupStart"));
    absl::Status status;
    for (int g = 0; g < gpus && status.ok(); ++g) {
      status = NcclStatusOf(
          ncclBroadcast(buffers[g].data(), buffers[g].data(), bytes, ncclUint8,
                        0, comms[g], streams[g].get()),
          "ncclBroadcast");
    }
    const absl::Status ended = NcclStatusOf(ncclGroupEnd(), "ncclGroupEnd");
    RETURN_IF_ERROR(status);
    return ended;
  };
  auto sync = [&]() -> absl::Status {
    for (int g = 0; g < gpus; ++g) {
      ScopedCudaDevice on(g);
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(streams[g].get()),
                                 "cudaStreamSynchronize"));
    }
    return absl::OkStatus();
  };
  std::printf(
      "#\n# ncclBroadcast from GPU 0 over %d GPUs (busbw = algbw, "
      "nccl-tests' broadcast factor 1)\n",
      gpus);
  std::printf("# %12s %12s %6s %6s %10s %12s %12s %7s\n", "size(B)", "count",
              "type", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
              "#wrong");
  std::vector<std::pair<int64_t, double>> rows;
  double sum_busbw = 0;
  absl::Status status;
  for (int64_t bytes : Sizes(int64_t{1} << 20, max_bytes)) {
    for (int i = 0; i < 3 && status.ok(); ++i) status = broadcast(bytes);
    if (status.ok()) status = sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters && status.ok(); ++i) status = broadcast(bytes);
    if (status.ok()) status = sync();
    if (!status.ok()) break;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() /
        iters;
    int wrong = 0;
    for (int g = 1; g < gpus; ++g) {
      uint8_t ends[2] = {0, 0};
      cudaMemcpy(&ends[0], buffers[g].bytes(), 1, cudaMemcpyDeviceToHost);
      cudaMemcpy(&ends[1], buffers[g].bytes() + bytes - 1, 1,
                 cudaMemcpyDeviceToHost);
      if (ends[0] != 0x5A || ends[1] != 0x5A) ++wrong;
    }
    const double algbw = bytes / seconds;
    sum_busbw += algbw;
    rows.emplace_back(bytes, algbw);
    std::printf("  %12lld %12lld %6s %6d %10.1f %12.2f %12.2f %7d\n",
                static_cast<long long>(bytes), static_cast<long long>(bytes),
                "uint8", 0, seconds * 1e6, algbw / kGB, algbw / kGB, wrong);
  }
  for (ncclComm_t comm : comms) {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
  RETURN_IF_ERROR(status);
  std::printf("# Avg bus bandwidth    : %.3f GB/s\n",
              rows.empty() ? 0.0 : sum_busbw / rows.size() / kGB);
  return rows;
}

// One relay chain of `bytes` from GPU 0 through GPUs 1..n-1, one worker
// thread per GPU with NCCL between them: the executor's multi-worker path.
absl::StatusOr<double> ChainReshardSeconds(int gpus, int64_t bytes) {
  const Topology topology = Topology::FromGbps(gpus, 1, 400, 3600);
  ReshardProblem problem;
  problem.tensor =
      TensorSpec{{std::max<int64_t>(1, bytes / 4 / 1024), 1024}, DType::kInt32};
  ASSIGN_OR_RETURN(problem.src_mesh, ParseMesh("1x1@0", topology, "src"));
  ASSIGN_OR_RETURN(problem.dst_mesh,
                   ParseMesh(absl::StrCat(gpus - 1, "x1@1"), topology, "dst"));
  ASSIGN_OR_RETURN(problem.src_spec, ShardingSpec::Parse("RR"));
  ASSIGN_OR_RETURN(problem.dst_spec, ShardingSpec::Parse("RR"));
  RETURN_IF_ERROR(problem.Validate(topology));
  ASSIGN_OR_RETURN(const ReshardPlan plan,
                   PlanReshard({problem}, topology, Strategy::kMeshcast));
  ASSIGN_OR_RETURN(const v1::Plan proto, LowerReshardPlan(plan));
  std::vector<WorkerSlot> slots;
  for (int g = 0; g < gpus; ++g) {
    slots.push_back(WorkerSlot{absl::StrCat("gpu", g), g, {g}});
  }
  ASSIGN_OR_RETURN(std::vector<v1::WorkerProgram> programs,
                   ProjectPlan(proto, "bench-chain", slots));
  worker::InMemoryKvStore kv;
  std::vector<absl::StatusOr<v1::JobResult>> results(
      programs.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < programs.size(); ++w) {
    threads.emplace_back([&, w] {
      absl::StatusOr<worker::ParsedProgram> program =
          worker::ParseProgram(programs[w]);
      if (!program.ok()) {
        results[w] = program.status();
        return;
      }
      const int gpu = programs[w].local_devices(0);
      worker::cuda::DeviceExecutor executor(
          *worker::ParseDeviceSpec(absl::StrCat("cuda:", gpu)),
          worker::cuda::CudaBackendOptions());
      results[w] = executor.Run(*program, &kv);
    });
  }
  for (std::thread& thread : threads) thread.join();
  double seconds = 0;
  for (const auto& result : results) {
    RETURN_IF_ERROR(result.status());
    if (result->mismatches() != 0) {
      return absl::DataLossError("chain reshard delivered wrong data");
    }
    seconds = std::max(seconds, result->seconds());
  }
  return seconds;
}

absl::Status NcclSection(int gpus) {
  if (gpus < 2) {
    std::printf("#\n# nccl: skipped, needs 2+ GPUs (%d visible)\n", gpus);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const auto rows, BroadcastSweep(gpus));
  std::printf(
      "#\n# 1-to-%d reshard over NCCL (one relay chain, one worker per "
      "GPU) vs ncclBroadcast busbw at the same size\n",
      gpus - 1);
  std::printf("# %12s %10s %12s %16s %8s\n", "size(B)", "time(us)",
              "busbw(GB/s)", "ncclBcast(GB/s)", "ratio");
  double sum_ratio = 0;
  int count = 0;
  for (const auto& [bytes, bcast] : rows) {
    if (bytes < (int64_t{16} << 20)) continue;  // set-up dominates below
    ASSIGN_OR_RETURN(const double seconds, ChainReshardSeconds(gpus, bytes));
    const double busbw = seconds > 0 ? bytes / seconds : 0;
    std::printf("  %12lld %10.1f %12.2f %16.2f %8.2f\n",
                static_cast<long long>(bytes), seconds * 1e6, busbw / kGB,
                bcast / kGB, bcast > 0 ? busbw / bcast : 0.0);
    sum_ratio += bcast > 0 ? busbw / bcast : 0;
    ++count;
  }
  std::printf(
      "# nccl summary: reshard busbw / ncclBroadcast busbw averages "
      "%.2f over %d sizes\n",
      count > 0 ? sum_ratio / count : 0.0, count);
  return absl::OkStatus();
}

// One collective job: planned by the kind, projected onto `workers` (one
// per GPU, or one worker with every device), run by the GPU executor.
struct CollectiveRun {
  double seconds = 0;  // mean step time after the first iteration
  int64_t mismatches = 0;
  int64_t verified = 0;
  int64_t step_bytes = 0;  // Step.bytes: what ran (nccl-tests' size)
};

struct PlannedCollective {
  v1::Plan plan;
  std::vector<v1::WorkerProgram> programs;  // by worker
};

// `workers` workers: one per rank (one GPU each), or one with every rank.
absl::StatusOr<PlannedCollective> PlanCollective(const std::string& op,
                                                 int64_t bytes, int ranks,
                                                 int workers, int iterations) {
  v1::JobSpec spec;
  v1::CollectiveSpec* c = spec.mutable_collective();
  c->set_op(op);
  c->set_size(absl::StrCat(bytes));
  c->mutable_mesh()->add_shape(1);
  c->mutable_mesh()->add_shape(ranks);
  c->set_dtype(v1::DTYPE_FLOAT32);
  c->set_iterations(iterations);
  const CollectiveKind kind;
  RETURN_IF_ERROR(kind.Validate(spec));
  const Topology topology = Topology::FromGbps(1, ranks, 400, 3600);
  std::vector<int> devices(ranks);
  for (int d = 0; d < ranks; ++d) devices[d] = d;
  ASSIGN_OR_RETURN(PlannedJob planned,
                   kind.Plan(spec, {DeviceMesh{{1, ranks}, devices}}, topology,
                             PlanOptions()));
  std::vector<WorkerSlot> slots(workers);
  for (int w = 0; w < workers; ++w) {
    slots[w].name = absl::StrCat("gpu", w);
    slots[w].host_index = 0;
    for (int d = 0; d < ranks; ++d) {
      if (workers == 1 || d == w) slots[w].devices.push_back(d);
    }
  }
  PlannedCollective result;
  ASSIGN_OR_RETURN(result.programs,
                   ProjectPlan(planned.plan,
                               absl::StrCat("bench-", op, "-", bytes), slots));
  result.plan = std::move(planned.plan);
  return result;
}

absl::StatusOr<CollectiveRun> RunCollective(const std::string& op,
                                            int64_t bytes, int ranks,
                                            int gpus, int iterations) {
  // With several GPUs: one worker per GPU (NCCL between them); else one
  // worker with every device, virtual devices of GPU 0.
  const int workers = gpus > 1 ? ranks : 1;
  ASSIGN_OR_RETURN(PlannedCollective planned,
                   PlanCollective(op, bytes, ranks, workers, iterations));
  std::vector<v1::WorkerProgram>& programs = planned.programs;
  std::vector<worker::ParsedProgram> parsed;
  for (v1::WorkerProgram& program : programs) {
    // The reference of a large computed output is a float64 loop on the
    // host: a fixed sample suffices for a benchmark (moves stay full, on
    // the GPU).
    program.set_verify(v1::VERIFY_MODE_SAMPLE);
    ASSIGN_OR_RETURN(worker::ParsedProgram one, worker::ParseProgram(program));
    parsed.push_back(std::move(one));
  }
  worker::InMemoryKvStore kv;
  std::vector<absl::StatusOr<v1::JobResult>> results(
      workers, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      const std::string devices_flag =
          workers == 1 ? absl::StrCat("cuda:0x", ranks)
                       : absl::StrCat("cuda:", w);
      absl::StatusOr<worker::DeviceSpec> device_spec =
          worker::ParseDeviceSpec(devices_flag);
      if (!device_spec.ok()) {
        results[w] = device_spec.status();
        return;
      }
      worker::cuda::CudaBackendOptions options;
      options.lanes = 1;  // steps depend on each other: one lane suffices
      worker::cuda::DeviceExecutor executor(*device_spec, options);
      results[w] = executor.Run(parsed[w], workers > 1 ? &kv : nullptr);
    });
  }
  for (std::thread& thread : threads) thread.join();
  CollectiveRun run;
  // Per step: the slowest worker's time.
  absl::flat_hash_map<int, double> step_seconds;
  for (int w = 0; w < workers; ++w) {
    if (!results[w].ok()) {
      return absl::Status(results[w].status().code(),
                          absl::StrCat("worker ", w, ": ",
                                       results[w].status().message()));
    }
    run.mismatches += results[w]->mismatches();
    run.verified += results[w]->elements_verified();
    for (const v1::StepResult& step : results[w]->steps()) {
      double& slowest = step_seconds[step.step()];
      slowest = std::max(slowest, step.seconds());
    }
  }
  std::vector<int> ids;
  for (const v1::Step& step : planned.plan.steps()) {
    ids.push_back(step.id());
    run.step_bytes = step.bytes();
  }
  double sum = 0;
  int counted = 0;
  for (size_t i = ids.size() > 1 ? 1 : 0; i < ids.size(); ++i) {
    sum += step_seconds[ids[i]];
    ++counted;
  }
  run.seconds = counted > 0 ? sum / counted : 0;
  return run;
}

absl::Status CollectiveSection(int gpus) {
  const int ranks = gpus > 1 ? gpus : absl::GetFlag(FLAGS_collective_ranks);
  const int iterations = std::max(2, std::min(absl::GetFlag(FLAGS_iters), 10));
  std::printf(
      "#\n# Collectives through the engine (CollectiveKind plan, GPU "
      "executor): %d ranks, %s, float32, %d iterations per size (the first "
      "not timed); nccl-tests' size, algbw = size / time, busbw = algbw x "
      "factor\n",
      ranks,
      gpus > 1 ? "one worker thread per GPU, NCCL between them"
               : "virtual devices of GPU 0 (device memory only)",
      iterations);
  std::printf("# %-15s %12s %10s %12s %12s %10s\n", "op", "size(B)",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "mismatches");
  int64_t total_mismatches = 0;
  for (const std::string& op : CollectiveOpNames()) {
    double best_busbw = 0, sum_busbw = 0;
    int sizes = 0;
    for (int64_t bytes = int64_t{1} << 20;
         bytes <= absl::GetFlag(FLAGS_collective_max_bytes); bytes *= 4) {
      ASSIGN_OR_RETURN(const CollectiveRun run,
                       RunCollective(op, bytes, ranks, gpus, iterations));
      const double algbw = run.seconds > 0 ? run.step_bytes / run.seconds : 0;
      const double busbw = algbw * BusBandwidthFactor(op, ranks);
      best_busbw = std::max(best_busbw, busbw);
      sum_busbw += busbw;
      ++sizes;
      total_mismatches += run.mismatches;
      std::printf("  %-15s %12lld %10.1f %12.2f %12.2f %10lld\n", op.c_str(),
                  static_cast<long long>(run.step_bytes), run.seconds * 1e6,
                  algbw / kGB, busbw / kGB,
                  static_cast<long long>(run.mismatches));
      std::fflush(stdout);
    }
    std::printf("# collective %s: avg busbw %.2f GB/s, best %.2f GB/s\n",
                op.c_str(), sizes > 0 ? sum_busbw / sizes / kGB : 0.0,
                best_busbw / kGB);
  }
  std::printf("# collective summary: %zu ops, %lld mismatches\n",
              CollectiveOpNames().size(),
              static_cast<long long>(total_mismatches));
  if (total_mismatches != 0) {
    return absl::DataLossError("a collective delivered wrong data");
  }
  return absl::OkStatus();
}

// Seconds of one call of `issue` on `stream`, the mean of `iters` after
// one warm-up (the row kernel takes long enough that 3 would cost seconds).
absl::StatusOr<double> TimeKernel(cudaStream_t stream, int iters,
                                  const std::function<cudaError_t()>& issue) {
  RETURN_IF_ERROR(CudaStatus(issue(), "attention kernel (warm-up)"));
  ASSIGN_OR_RETURN(double seconds,
                   TimeOnStream(stream, iters, [&]() -> absl::Status {
                     return CudaStatus(issue(), "attention kernel");
                   }));
  return seconds;
}

// Seconds of one backward pass (the dQ kernel, then the dK / dV kernel) of
// the block whose final state is `state` (positions as the forward's), with
// O the finished state and dO = O.
absl::StatusOr<double> TimeBackward(
    cudaStream_t stream, const worker::cuda::AttentionBlockShape& block,
    const DeviceMemory& q, const DeviceMemory& k, const DeviceMemory& v,
    const DeviceMemory& state, const int64_t* positions) {
  const int64_t rows = block.batch * block.heads * block.q_rows;
  const int64_t elems = rows * block.head_dim;
  ASSIGN_OR_RETURN(DeviceMemory o, DeviceMemory::Allocate(0, elems * 2));
  ASSIGN_OR_RETURN(DeviceMemory dout, DeviceMemory::Allocate(0, elems * 2));
  ASSIGN_OR_RETURN(DeviceMemory dq, DeviceMemory::Allocate(0, elems * 2));
  ASSIGN_OR_RETURN(
      DeviceMemory dkv,
      DeviceMemory::Allocate(0, 2 * block.batch * block.kv_heads *
                                    block.kv_rows * block.head_dim * 2));
  RETURN_IF_ERROR(CudaStatus(worker::cuda::LaunchAttentionFinish(
                                 PatternType::kBFloat16, state.data(), o.data(),
                                 rows, block.head_dim, stream),
                             "attention finish"));
  // dO: the output itself, a stand-in gradient of the right scale.
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dout.data(), o.data(), elems * 2,
                                             cudaMemcpyDeviceToDevice, stream),
                             "cudaMemcpyAsync"));
  worker::cuda::AttentionBackwardShape dq_shape{block, /*dkv=*/false, false};
  worker::cuda::AttentionBackwardShape dkv_shape{block, /*dkv=*/true, false};
  const int64_t scratch_bytes =
      std::max(worker::cuda::AttentionBackwardScratchBytes(
                   PatternType::kBFloat16, dq_shape),
               worker::cuda::AttentionBackwardScratchBytes(
                   PatternType::kBFloat16, dkv_shape));
  ASSIGN_OR_RETURN(DeviceMemory scratch,
                   DeviceMemory::Allocate(0, scratch_bytes));
  return TimeKernel(stream, 1, [&]() -> cudaError_t {
    for (const auto* shape : {&dq_shape, &dkv_shape}) {
      const cudaError_t err = worker::cuda::LaunchAttentionBackward(
          PatternType::kBFloat16, *shape, q.data(), k.data(), v.data(),
          dout.data(), o.data(), state.data(),
          shape->dkv ? dkv.data() : dq.data(), positions, positions,
          scratch.data(), stream);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  });
}

// o = acc / l of every row of a state [rows, d + 2] in bfloat16 bits.
std::vector<double> FinishedRows(const std::vector<uint16_t>& state,
                                 int64_t rows, int64_t d) {
  std::vector<double> o(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = state.data() + r * (d + 2);
    const double l = worker::CoreFloatValue(PatternType::kBFloat16, s[d + 1]);
    for (int64_t c = 0; c < d; ++c) {
      o[r * d + c] =
          l == 0 ? 0 : worker::CoreFloatValue(PatternType::kBFloat16, s[c]) / l;
    }
  }
  return o;
}

absl::Status AttentionSection(const GpuInfo& info) {
  constexpr int64_t kHeads = 16, kDim = 128;
  const int64_t max_tokens = absl::GetFlag(FLAGS_attention_max_tokens);
  ScopedCudaDevice on(0);
  RETURN_IF_ERROR(on.status());
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(0));
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0) !=
      cudaSuccess) {
    cudaGetLastError();
    clock_khz = 0;
  }
  const double fp32_peak = 2.0 * 128 * info.sms * clock_khz * 1e3;
  std::printf(
      "#\n# Attention forward on GPU 0 (%s): one attention_block over all "
      "keys, batch 1, %lld heads, head_dim %lld, bfloat16; FLOPs = 4 x "
      "head_dim x heads x kept pairs; fp32 CUDA-core peak %.1f TFLOP/s "
      "(%d SMs x 128 FMA x 2 x %.2f GHz)\n",
      info.name.c_str(), static_cast<long long>(kHeads),
      static_cast<long long>(kDim), fp32_peak / 1e12, info.sms,
      clock_khz / 1e6);
  std::printf("# %7s %6s %10s %8s %7s %10s %8s %9s %10s %9s %8s\n", "tokens",
              "causal", "tiled(ms)", "TFLOP/s", "%peak", "row(ms)", "TFLOP/s",
              "tiled/row", "max|diff|", "bwd(ms)", "TFLOP/s");
  double best = 0, best_speedup = 0, worst_diff = 0, best_backward = 0;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t n = 1024; n <= max_tokens; n *= 4) {
    const int64_t elems = kHeads * n * kDim;
    const int64_t state_elems = kHeads * n * (kDim + 2);
    std::vector<uint16_t> host(elems);
    ASSIGN_OR_RETURN(DeviceMemory q, DeviceMemory::Allocate(0, elems * 2));
    ASSIGN_OR_RETURN(DeviceMemory k, DeviceMemory::Allocate(0, elems * 2));
    ASSIGN_OR_RETURN(DeviceMemory v, DeviceMemory::Allocate(0, elems * 2));
    for (DeviceMemory* m : {&q, &k, &v}) {
      for (uint16_t& x : host) {
        x = static_cast<uint16_t>(
            worker::CoreFloatStoreBits(PatternType::kBFloat16, uniform(rng)));
      }
      RETURN_IF_ERROR(CudaStatus(
          cudaMemcpy(m->data(), host.data(), elems * 2, cudaMemcpyHostToDevice),
          "cudaMemcpy"));
    }
    std::vector<int64_t> positions(n);
    for (int64_t i = 0; i < n; ++i) positions[i] = i;
    ASSIGN_OR_RETURN(DeviceMemory pos, DeviceMemory::Allocate(0, n * 8));
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(pos.data(), positions.data(), n * 8, cudaMemcpyHostToDevice),
        "cudaMemcpy"));
    ASSIGN_OR_RETURN(DeviceMemory tiled_out,
                     DeviceMemory::Allocate(0, state_elems * 2));
    ASSIGN_OR_RETURN(DeviceMemory row_out,
                     DeviceMemory::Allocate(0, state_elems * 2));
    for (bool causal : {false, true}) {
      worker::cuda::AttentionBlockShape shape;
      shape.batch = 1;
      shape.heads = shape.kv_heads = kHeads;
      shape.q_rows = shape.kv_rows = n;
      shape.head_dim = kDim;
      shape.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
      shape.causal = causal;
      const auto* p = static_cast<const int64_t*>(pos.data());
      ASSIGN_OR_RETURN(
          DeviceMemory scratch,
          DeviceMemory::Allocate(0, worker::cuda::AttentionBlockScratchBytes(
                                        PatternType::kBFloat16, shape)));
      ASSIGN_OR_RETURN(const double tiled, TimeKernel(stream.get(), 5, [&] {
                         return worker::cuda::LaunchAttentionBlock(
                             PatternType::kBFloat16, shape, q.data(), k.data(),
                             v.data(), nullptr, tiled_out.data(), p, p,
                             scratch.data(), stream.get());
                       }));
      ASSIGN_OR_RETURN(const double row, TimeKernel(stream.get(), 1, [&] {
                         return worker::cuda::LaunchAttentionBlockByRow(
                             PatternType::kBFloat16, shape, q.data(), k.data(),
                             v.data(), nullptr, row_out.data(), p, p,
                             scratch.data(), stream.get());
                       }));
      std::vector<uint16_t> a(state_elems), b(state_elems);
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpy(a.data(), tiled_out.data(), state_elems * 2,
                                cudaMemcpyDeviceToHost),
                     "cudaMemcpy"));
      RETURN_IF_ERROR(
          CudaStatus(cudaMemcpy(b.data(), row_out.data(), state_elems * 2,
                                cudaMemcpyDeviceToHost),
                     "cudaMemcpy"));
      const std::vector<double> oa = FinishedRows(a, kHeads * n, kDim);
      const std::vector<double> ob = FinishedRows(b, kHeads * n, kDim);
      double diff = 0;
      for (size_t i = 0; i < oa.size(); ++i) {
        diff = std::max(diff, std::abs(oa[i] - ob[i]));
      }
      ASSIGN_OR_RETURN(
          const double backward,
          TimeBackward(stream.get(), shape, q, k, v, tiled_out, p));
      const double pairs = causal ? n * (n + 1) / 2.0 : double(n) * n;
      const double flops = 4.0 * kDim * kHeads * pairs;
      const double tiled_rate = flops / tiled, row_rate = flops / row;
      // The backward's work counted as a fused backward's, 2.5 x the
      // forward's (the split dQ / dKV kernels recompute more).
      const double backward_rate = 2.5 * flops / backward;
      best = std::max(best, tiled_rate);
      best_speedup = std::max(best_speedup, row / tiled);
      best_backward = std::max(best_backward, backward_rate);
      worst_diff = std::max(worst_diff, diff);
      std::printf(
          "  %7lld %6s %10.3f %8.2f %6.1f%% %10.3f %8.2f %8.1fx %10.2e %9.3f "
          "%8.2f\n",
          static_cast<long long>(n), causal ? "yes" : "no", tiled * 1e3,
          tiled_rate / 1e12, fp32_peak > 0 ? 100 * tiled_rate / fp32_peak : 0.0,
          row * 1e3, row_rate / 1e12, row / tiled, diff, backward * 1e3,
          backward_rate / 1e12);
    }
  }
  std::printf(
      "# attention summary: tiled kernel best %.2f TFLOP/s (%.1f%% of the "
      "fp32 CUDA-core peak), up to %.1fx the row kernel; largest |o| "
      "difference between them %.2e; backward (dQ + dKV) best %.2f TFLOP/s\n",
      best / 1e12, fp32_peak > 0 ? 100 * best / fp32_peak : 0.0, best_speedup,
      worst_diff, best_backward / 1e12);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> sections =
      absl::StrSplit(absl::GetFlag(FLAGS_sections), ',', absl::SkipEmpty());
  for (const std::string& section : sections) {
    if (section != "copy" && section != "reshard" && section != "nccl" &&
        section != "collective" && section != "attention") {
      std::fprintf(stderr,
                   "gpu_bench: --sections: unknown section '%s' (allowed: "
                   "copy, reshard, nccl, collective, attention)\n",
                   section.c_str());
      return 1;
    }
  }
  if (absl::GetFlag(FLAGS_max_bytes) < (int64_t{1} << 20) ||
      absl::GetFlag(FLAGS_iters) < 1 ||
      absl::GetFlag(FLAGS_reshard_bytes) < (int64_t{1} << 20) ||
      absl::GetFlag(FLAGS_collective_max_bytes) < (int64_t{1} << 20) ||
      absl::GetFlag(FLAGS_collective_ranks) < 2) {
    std::fprintf(stderr,
                 "gpu_bench: --max_bytes, --reshard_bytes and "
                 "--collective_max_bytes must be >= 1 MiB, --iters >= 1 and "
                 "--collective_ranks >= 2\n");
    return 1;
  }
  auto wants = [&](const char* name) {
    return std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  const std::time_t now = std::time(nullptr);
  std::printf("# meshcast gpu_bench, %s", std::ctime(&now));
  int version = 0;
  ncclGetVersion(&version);
  std::printf("# NCCL %d\n", version);
  const int gpus = GpuCount();
  if (gpus == 0) {
    if (wants("collective")) {
      // The collective plans, projected (checks that code path).
      for (const std::string& op : CollectiveOpNames()) {
        absl::StatusOr<PlannedCollective> planned = PlanCollective(
            op, int64_t{1} << 20, absl::GetFlag(FLAGS_collective_ranks), 1, 2);
        if (!planned.ok()) {
          std::fprintf(stderr, "gpu_bench: collective %s: %s\n", op.c_str(),
                       planned.status().ToString().c_str());
          return 1;
        }
      }
      std::printf("# collective: planned %zu ops (no GPU: not run)\n",
                  CollectiveOpNames().size());
    }
    if (wants("reshard")) {
      absl::Status planned = ReshardSection(nullptr);
      if (!planned.ok()) {
        std::fprintf(stderr, "gpu_bench: %s\n", planned.ToString().c_str());
        return 1;
      }
    }
    std::printf(
        "# gpu_bench: skipped, no CUDA GPU visible "
        "(cudaGetDeviceCount reports none)\n");
    return 0;
  }
  absl::StatusOr<GpuInfo> info = DescribeGpu(0);
  if (!info.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", info.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "# %d GPU(s); GPU 0: %s, %d SMs, %.1f GiB; memory bandwidth "
      "peak: %s from clock x bus width, %s published for this name\n",
      gpus, info->name.c_str(), info->sms, info->memory_bytes / (1 << 30),
      Peak(info->attribute_peak).c_str(), Peak(info->table_peak).c_str());
  absl::Status status;
  if (status.ok() && wants("copy")) status = CopySection(*info);
  if (status.ok() && wants("reshard")) status = ReshardSection(&*info);
  if (status.ok() && wants("nccl")) status = NcclSection(gpus);
  if (status.ok() && wants("collective")) status = CollectiveSection(gpus);
  if (status.ok() && wants("attention")) status = AttentionSection(*info);
  if (!status.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace meshcast::bench

int main(int argc, char** argv) { return meshcast::bench::Main(argc, argv); }
