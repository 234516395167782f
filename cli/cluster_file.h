// ClusterFile: the record `meshctl up` leaves in its directory
// (D/cluster.json) so that `meshctl down` can stop the cluster and every
// other command can find its controller; and the rules that pick the local
// cluster directory and the controller address.
//
//   ClusterFile file = ...;                      // meshctl up
//   RETURN_IF_ERROR(WriteClusterFile(dir, file));
//   ASSIGN_OR_RETURN(ClusterFile file, ReadClusterFile(dir));  // meshctl down
//
//   // any client command
//   ASSIGN_OR_RETURN(std::string address,
//                    ResolveControllerAddress(flag_controller, flag_dir,
//                                             context));
//
// cluster.json (bytes and seconds, snake_case):
//   {"controller": "127.0.0.1:41234", "dir": "/abs/.meshcast",
//    "database": "/abs/.meshcast/meshcast.db", "workers": 4,
//    "devices": "cpu:4", "devices_per_worker": 4, "started_unix": 1.7e9,
//    "prometheus": "http://127.0.0.1:9090",          // --monitoring only
//    "processes": [{"role": "controller" | "worker" | "prometheus",
//                   "name": "controller",
//                   "pid": 123, "log": "/abs/.meshcast/logs/controller.log",
//                   "binary": "/abs/meshcast-controller",
//                   "args": ["--listen", ...],
//                   "metrics": "127.0.0.1:40001"},   // --monitoring only
//                  ...],
//    "security": {"insecure": false,                 // `up --insecure`: true
//                 "tls_ca": "/abs/.meshcast/tls/ca.crt",
//                 "tls_cert": "", "tls_key": "",     // client cert, optional
//                 "token_file": "/abs/.meshcast/tls/admin.token"}}
//
// Keys added later ("devices", "prometheus", "metrics", "security") are
// optional when reading, so a record written by an older meshctl still
// reads; a record without "security" is a plaintext cluster (insecure).
//
// Thread safety: pure functions and value types; concurrent writers of the
// same directory race (the last rename wins).
#ifndef MESHCAST_CLI_CLUSTER_FILE_H_
#define MESHCAST_CLI_CLUSTER_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/command.h"

namespace meshcast::cli {

// Where a controller is assumed when nothing else says.
inline constexpr char kDefaultControllerAddress[] = "127.0.0.1:50051";
// The local cluster directory when neither --dir nor MESHCAST_HOME is set.
inline constexpr char kDefaultClusterDir[] = ".meshcast";

struct ClusterProcess {
  std::string role;  // "controller", "worker" or "prometheus"
  std::string name;  // "controller", "worker-0", ..., "prometheus"
  int pid = 0;
  std::string log;
  std::string binary;
  std::vector<std::string> args;  // without the binary
  // host:port of the daemon's Prometheus /metrics; empty when metrics are
  // off (`up` without --monitoring) and for Prometheus itself.
  std::string metrics;
  // A worker's Unix socket for user buffers (its --local_socket); empty
  // for the other daemons, or when the path would be too long.
  std::string local_socket;
};

struct ClusterFile {
  std::string controller;  // host:port
  std::string dir;
  std::string database;
  int workers = 0;
  std::string devices;  // every worker's --devices, e.g. "cpu:4"
  int devices_per_worker = 0;
  double started_unix = 0;
  // Base URL of the local Prometheus (`up --monitoring`), else empty.
  std::string prometheus;
  std::vector<ClusterProcess> processes;  // controller first
  // How clients reach the controller (docs/security.md): the CA that
  // verifies it and the admin token `up` generated, or plaintext.
  bool insecure = true;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
};

// D/cluster.json.
std::string ClusterFilePath(const std::string& dir);

std::string ClusterFileToJson(const ClusterFile& file);
absl::StatusOr<ClusterFile> ClusterFileFromJson(const std::string& text);

// NOT_FOUND when there is no cluster.json in `dir`; INVALID_ARGUMENT (naming
// the file) when it cannot be parsed.
absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& dir);
// Writes atomically (temporary file, then rename).
absl::Status WriteClusterFile(const std::string& dir, const ClusterFile& file);
absl::Status RemoveClusterFile(const std::string& dir);

// The local cluster directory: `flag_dir` if non-empty, else $MESHCAST_HOME,
// else ./.meshcast.
std::string LocalClusterDir(const std::string& flag_dir,
                            const CommandContext& context);

// The controller to talk to: `flag_controller` if non-empty, else
// $MESHCAST_CONTROLLER (unless `flag_dir` is given), else the controller of
// the local cluster recorded in LocalClusterDir(flag_dir)/cluster.json.
// A directory that was named (--dir or $MESHCAST_HOME) must hold a
// cluster.json: without one the error is ReadClusterFile's (NOT_FOUND, "no
// local cluster recorded in DIR ..."), so a stopped cluster is never
// mistaken for whatever controller listens on the default port. Only the
// implicit ./.meshcast without a cluster.json gives
// kDefaultControllerAddress.
absl::StatusOr<std::string> ResolveControllerAddress(
    const std::string& flag_controller, const std::string& flag_dir,
    const CommandContext& context);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_CLUSTER_FILE_H_
