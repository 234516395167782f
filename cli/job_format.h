// How meshctl shows jobs, events, plans and the cluster: human text (tables
// and key/value blocks) and JSON objects for scripts (snake_case keys, bytes
// and seconds, job states as their enum names without prefix: "QUEUED",
// "PLANNING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED").
//
//   std::cout << RenderJobList(jobs, NowUnix());
//   std::cout << JobToJson(job, /*details=*/true).dump() << "\n";
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_JOB_FORMAT_H_
#define MESHCAST_CLI_JOB_FORMAT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "meshcast/v1/controller.pb.h"
#include "meshcast/v1/job.pb.h"
#include "meshcast/v1/plan.pb.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {

using OrderedJson = nlohmann::ordered_json;

// "SUCCEEDED"; "UNSPECIFIED" for the zero value.
std::string JobStateName(v1::JobState state);
// SUCCEEDED, FAILED or CANCELLED.
bool IsFinalState(v1::JobState state);
// "int32", ...; "unspecified" for the zero value.
std::string DTypeText(v1::DType dtype);
// "2x4" (placed by the controller), "2x4@1" (first host given) or
// "2x2[0,1,4,5]" (explicit devices).
std::string DescribeMeshRequest(const v1::DeviceMesh& mesh);
// "64x64x256 int32 (4.00 MiB): 2x4 S0RR -> 2x4 RS0R, strategy auto".
std::string DescribeReshard(const v1::ReshardSpec& reshard);
// "all_reduce of 256MiB float32 on 2x4, sum, 1 iteration".
std::string DescribeCollective(const v1::CollectiveSpec& collective);
// One line for any kind: the reshard or collective description.
std::string DescribeSpec(const v1::JobSpec& spec);
// "reshard", "collective"; "" when the spec sets no kind.
std::string SpecKindName(const v1::JobSpec& spec);
// "full", "sample", "off".
std::string VerifyModeName(v1::VerifyMode mode);
// "all_reduce", "send_recv", "compute", ... ("step" for the zero value).
std::string StepOpName(v1::Step::Op op);
// A metric's value in human units, chosen by the name's suffix:
// *_bytes_per_second in GB/s (10^9 bytes/s, as nccl-tests prints busbw),
// *_seconds as FormatSeconds, *_bytes as FormatBytes, else %g.
// "busbw_bytes_per_second" -> "9.87 GB/s".
std::string FormatMetric(absl::string_view name, double value);
// The name without its unit suffix: "busbw_bytes_per_second" -> "busbw".
std::string MetricLabel(absl::string_view name);
// "5 hosts x 4 devices, 10 Gbps between hosts, 100 Gbps inside a host".
// Host copy rate, transfer setup time and pipeline chunk are appended when
// set: ", host copy 80 Gbps, transfer setup 20.0 us, pipeline chunks of ...".
std::string DescribeTopology(const v1::Topology& topology);
// Where the controller put a mesh: "src mesh 2x4 on devices 0-7" for `side`
// "src".
std::string DescribePlacedMesh(absl::string_view side,
                               const v1::DeviceMesh& mesh);
// The job's placed meshes, "src mesh 2x4 on devices 0-7, dst mesh 2x4 on
// devices 8-15" (a reshard), "mesh 2x4 on devices 0-7" (a kind with one
// mesh, from Job.placed_meshes); empty while the controller has placed none.
std::string DescribePlacedMeshes(const v1::Job& job);

// Devices that hold a buffer of `role` in `plan`, ascending.
std::vector<int> PlanDevices(const v1::Plan& plan, v1::Buffer::Role role);

// Every field, always: num_hosts, devices_per_host, *_bandwidth_bytes_per_
// second, *_latency_seconds, host_copy_bandwidth_bytes_per_second (0 =
// unlimited), transfer_setup_seconds, pipeline_chunk_bytes.
OrderedJson TopologyToJson(const v1::Topology& topology);
// {shape, devices} of a mesh the controller placed.
OrderedJson PlacedMeshToJson(const v1::DeviceMesh& mesh);
OrderedJson ReshardToJson(const v1::ReshardSpec& reshard);
// A collective spec as `get --output json` shows it: op, mesh (as
// requested), size, dtype, reduction, iterations.
OrderedJson CollectiveToJson(const v1::CollectiveSpec& collective);
// Job as JSON: id, name, state, message, progress, created/started/
// finished_unix, spec ({reshard} or {collective}, and verify),
// placed_src_mesh / placed_dst_mesh ({shape, devices}, once placed),
// placed_meshes (every mesh in the kind's order, when the controller reports
// them), plan (summary: kind, strategy, predicted and lower-bound seconds,
// steps, buffers, src_devices, dst_devices) and result (with metrics, a
// name -> value object in base units, and max_abs_error). With `details`,
// result.steps lists every per-step timing (seconds, start_seconds,
// end_seconds, device).
OrderedJson JobToJson(const v1::Job& job, bool details);
OrderedJson EventToJson(const v1::JobEvent& event);
OrderedJson ClusterToJson(const v1::GetClusterResponse& cluster,
                          const std::string& controller);
// The plan's steps in `meshctl plan --output json`'s transfer shape:
// {slice: [[begin, end], ...], src_device, dst_devices, bytes, stage, deps}.
OrderedJson PlanTransfersToJson(const v1::Plan& plan);

// `meshctl get`: a key/value block.
std::string RenderJobDetails(const v1::Job& job, double now_unix);
// The "metrics:" block of `meshctl get` (one line per figure, a figure with
// a *_bound_* companion shown beside its bound); empty without metrics.
std::string RenderJobMetrics(const v1::JobResult& result);
// `meshctl list`: one row per job. `wide` (-o wide) adds the kind, the
// placed meshes and their devices, the owner and the predicted and
// measured data-plane seconds.
std::string RenderJobList(const std::vector<v1::Job>& jobs, double now_unix,
                          bool wide = false);
// `meshctl watch`: one line per event.
std::string RenderEvent(const v1::JobEvent& event);
// `meshctl cluster`: topology and a table of workers; `wide` (-o wide) adds
// each worker's data-plane address.
std::string RenderCluster(const v1::GetClusterResponse& cluster,
                          const std::string& controller, double now_unix,
                          bool wide = false);

// Seconds since the Unix epoch, now.
double NowUnix();

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_JOB_FORMAT_H_
