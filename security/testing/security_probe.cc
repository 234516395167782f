// security_probe: one gRPC call to a meshcast controller or worker with the
// credentials given, for tests/cluster/security_test.py (python has no gRPC
// module here). It plays the attacker: a worker registering under a name,
// a client calling RunTask on a worker directly, a caller without a token.
//
//   security_probe --target=127.0.0.1:4000 --method=RegisterWorker \
//       --tls_ca=ca.crt --tls_cert=w0.crt --tls_key=w0.key --name=worker-1
//   security_probe --rogue_dir=DIR --cn=worker-0   # a cert of another CA
//
// Prints one line `code=<grpc code number> <message>` and exits 0 when the
// call was made (whatever its status), 2 on bad usage.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "meshcast/v1/controller.grpc.pb.h"
#include "meshcast/v1/worker.grpc.pb.h"
#include "security/cert_authority.h"
#include "security/tls_credentials.h"
#include "security/token_file.h"

ABSL_FLAG(std::string, target, "", "host:port to call");
ABSL_FLAG(std::string, method, "", "the RPC (see Call below)");
ABSL_FLAG(std::string, tls_ca, "", "CA file (empty: plaintext)");
ABSL_FLAG(std::string, tls_cert, "", "client certificate");
ABSL_FLAG(std::string, tls_key, "", "client key");
ABSL_FLAG(std::string, token_file, "", "bearer token file");
ABSL_FLAG(std::string, name, "", "worker name in the request");
ABSL_FLAG(std::string, job, "", "job id in the request");
ABSL_FLAG(std::string, server_name, "",
          "name the server's certificate must carry (default: the host)");
ABSL_FLAG(std::string, rogue_dir, "",
          "instead of a call: write ca.crt and <cn>.crt/.key of a new CA");
ABSL_FLAG(std::string, cn, "worker-0", "with --rogue_dir: the leaf's CN");

namespace meshcast {
namespace {

int MakeRogue(const std::string& dir, const std::string& cn) {
  absl::StatusOr<security::KeyAndCert> ca =
      security::CreateCertificateAuthority("meshcast cluster CA");
  if (!ca.ok()) return 1;
  security::CertRequest request;
  request.common_name = cn;
  request.organizational_unit = "worker";
  request.dns_names = {cn, "localhost"};
  request.ip_addresses = {"127.0.0.1"};
  absl::StatusOr<security::KeyAndCert> leaf =
      security::IssueCertificate(*ca, request);
  if (!leaf.ok() ||
      !security::WriteKeyAndCert(*ca, dir + "/ca.key", dir + "/ca.crt").ok() ||
      !security::WriteKeyAndCert(*leaf, dir + "/" + cn + ".key",
                                 dir + "/" + cn + ".crt")
           .ok()) {
    std::cerr << "cannot write the rogue certificates\n";
    return 1;
  }
  return 0;
}

template <typename Stub, typename Request, typename Response>
grpc::Status Invoke(Stub* stub,
                    grpc::Status (Stub::*rpc)(grpc::ClientContext*,
                                              const Request&, Response*),
                    const Request& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  Response response;
  return (stub->*rpc)(&context, request, &response);
}

int Main() {
  if (!absl::GetFlag(FLAGS_rogue_dir).empty()) {
    return MakeRogue(absl::GetFlag(FLAGS_rogue_dir), absl::GetFlag(FLAGS_cn));
  }
  std::string token;
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> read =
        security::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!read.ok()) {
      std::cerr << read.status() << "\n";
      return 2;
    }
    token = *read;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      security::MakeChannelCredentials(
          security::TlsFiles{absl::GetFlag(FLAGS_tls_cert),
                             absl::GetFlag(FLAGS_tls_key),
                             absl::GetFlag(FLAGS_tls_ca)},
          token);
  if (!credentials.ok()) {
    std::cerr << credentials.status() << "\n";
    return 2;
  }
  grpc::ChannelArguments args;
  if (!absl::GetFlag(FLAGS_server_name).empty()) {
    args.SetSslTargetNameOverride(absl::GetFlag(FLAGS_server_name));
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_target), *credentials, args);
  auto controller = v1::Controller::NewStub(channel);
  auto worker = v1::Worker::NewStub(channel);
  const std::string method = absl::GetFlag(FLAGS_method);
  const std::string name = absl::GetFlag(FLAGS_name);
  const std::string job = absl::GetFlag(FLAGS_job);
  grpc::Status status;
  if (method == "RegisterWorker") {
    v1::RegisterWorkerRequest request;
    request.mutable_worker()->set_name(name);
    request.mutable_worker()->set_address("127.0.0.1:1");
    request.mutable_worker()->set_data_address("127.0.0.1");
    request.mutable_worker()->set_device_kind("cpu");
    request.mutable_worker()->set_num_devices(4);
    status = Invoke(controller.get(), &v1::Controller::Stub::RegisterWorker,
                    request);
  } else if (method == "Heartbeat") {
    v1::HeartbeatRequest request;
    request.set_name(name);
    status = Invoke(controller.get(), &v1::Controller::Stub::Heartbeat, request);
  } else if (method == "GetJob") {
    v1::GetJobRequest request;
    request.set_id(job);
    status = Invoke(controller.get(), &v1::Controller::Stub::GetJob, request);
  } else if (method == "CancelJob") {
    v1::CancelJobRequest request;
    request.set_id(job);
    status = Invoke(controller.get(), &v1::Controller::Stub::CancelJob, request);
  } else if (method == "ListJobs") {
    status = Invoke(controller.get(), &v1::Controller::Stub::ListJobs,
                    v1::ListJobsRequest());
  } else if (method == "GetCluster") {
    status = Invoke(controller.get(), &v1::Controller::Stub::GetCluster,
                    v1::GetClusterRequest());
  } else if (method == "RunTask") {
    v1::RunTaskRequest request;
    request.mutable_program()->set_job_id(job.empty() ? "forged" : job);
    status = Invoke(worker.get(), &v1::Worker::Stub::RunTask, request);
  } else if (method == "AbortTask") {
    v1::AbortTaskRequest request;
    request.set_job_id(job.empty() ? "forged" : job);
    status = Invoke(worker.get(), &v1::Worker::Stub::AbortTask, request);
  } else if (method == "GetStatus") {
    status = Invoke(worker.get(), &v1::Worker::Stub::GetStatus,
                    v1::GetStatusRequest());
  } else {
    std::cerr << "unknown --method " << method << "\n";
    return 2;
  }
  std::cout << "code=" << status.error_code() << " " << status.error_message()
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace meshcast

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return meshcast::Main();
}
