// monitoring_client: a small gRPC client for the monitoring tests (python3
// has no gRPC in Debian's standard library). It drives a live controller
// through the generated Controller stub, and probes any meshcast daemon's
// standard gRPC health and reflection services through generic calls (the
// Debian packages ship no generated stubs for those), encoding the few
// protobuf fields involved by hand.
//
//   monitoring_client health ADDR [SERVICE]   prints SERVING, NOT_SERVING,
//                                             SERVICE_UNKNOWN or UNKNOWN
//   monitoring_client services ADDR           prints the reflected services
//   monitoring_client workers ADDR            prints "name address state"
//   monitoring_client submit ADDR shape=8x64x64 dtype=int32 src_mesh=1x2
//       src_spec=S0RR dst_mesh=1x2 dst_spec=RS0R [strategy=S] [name=N]
//                                             prints the job id
//   monitoring_client wait ADDR ID [SECONDS]  waits for a final state; prints
//                                             "STATE message"
//   monitoring_client state ADDR ID           prints the current state
//   monitoring_client cancel ADDR ID          prints the state after cancel
//
// Exit status: 0 on success; 3 when an RPC failed (stdout: "RPC_ERROR CODE
// message", CODE as in grpc::StatusCode names); 2 on bad usage; 1 when
// `wait` timed out.
//
// Thread safety: a single-threaded command-line tool.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "meshcast/v1/controller.grpc.pb.h"

namespace meshcast::monitoring {
namespace {

constexpr int kRpcError = 3;
constexpr int kUsage = 2;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    default:
      return "OTHER";
  }
}

int RpcFailed(const grpc::Status& status) {
  std::cout << "RPC_ERROR " << CodeName(status.error_code()) << " "
            << status.error_message() << std::endl;
  return kRpcError;
}

std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
  return context;
}

// ---- hand-encoded protobuf for the health and reflection messages --------

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Field `number` with wire type 2 (bytes, strings, messages).
std::string LengthDelimited(int number, const std::string& value) {
  std::string out;
  AppendVarint(out, (static_cast<uint64_t>(number) << 3) | 2);
  AppendVarint(out, value.size());
  return out + value;
}

// One top-level field of a serialized message.
struct Field {
  int number = 0;
  uint64_t varint = 0;  // wire type 0
  std::string bytes;    // wire type 2
};

bool ReadVarint(const std::string& in, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < in.size(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in[pos++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The fields of `in`; false if it is not a well-formed message.
bool ParseFields(const std::string& in, std::vector<Field>& fields) {
  size_t pos = 0;
  while (pos < in.size()) {
    uint64_t tag = 0;
    if (!ReadVarint(in, pos, tag)) return false;
    Field field;
    field.number = static_cast<int>(tag >> 3);
    switch (tag & 7) {
      case 0:
        if (!ReadVarint(in, pos, field.varint)) return false;
        break;
      case 1:
        pos += 8;
        break;
      case 2: {
        uint64_t length = 0;
        if (!ReadVarint(in, pos, length) || length > in.size() - pos) {
          return false;
        }
        field.bytes = in.substr(pos, length);
        pos += length;
        break;
      }
      case 5:
        pos += 4;
        break;
      default:
        return false;
    }
    if (pos > in.size()) return false;
    fields.push_back(std::move(field));
  }
  return true;
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Waits for the completion-queue event `tag`; false if the operation failed.
bool Await(grpc::CompletionQueue& cq, void* tag) {
  void* got = nullptr;
  bool ok = false;
  if (!cq.Next(&got, &ok)) return false;
  return got == tag && ok;
}

// grpc.health.v1.Health/Check: HealthCheckRequest{service = 1},
// HealthCheckResponse{status = 1: UNKNOWN 0, SERVING 1, NOT_SERVING 2,
// SERVICE_UNKNOWN 3}.
int Health(const std::string& address, const std::string& service) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto context = Context();
  const std::string request =
      service.empty() ? std::string() : LengthDelimited(1, service);
  auto call =
      stub.PrepareUnaryCall(context.get(), "/grpc.health.v1.Health/Check",
                            ToByteBuffer(request), &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  int tag = 1;
  call->Finish(&response, &status, &tag);
  Await(cq, &tag);
  if (!status.ok()) return RpcFailed(status);
  std::vector<Field> fields;
  if (!ParseFields(FromByteBuffer(response), fields)) {
    std::cout << "MALFORMED" << std::endl;
    return kRpcError;
  }
  uint64_t value = 0;
  for (const Field& f : fields) {
    if (f.number == 1) value = f.varint;
  }
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                 "SERVICE_UNKNOWN"};
  std::cout << (value < 4 ? kNames[value] : "UNKNOWN") << std::endl;
  return 0;
}

// grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo (bidi):
// request field 7 list_services; response field 6 list_services_response =
// ListServiceResponse{repeated ServiceResponse service = 1}, ServiceResponse
// {string name = 1}.
int Services(const std::string& address) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto context = Context();
  auto call = stub.PrepareCall(
      context.get(),
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  int start = 1, write = 2, done = 3, read = 4, finish = 5;
  call->StartCall(&start);
  if (!Await(cq, &start))
    return RpcFailed(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "cannot start the reflection call"));
  call->Write(ToByteBuffer(LengthDelimited(7, "*")), &write);
  Await(cq, &write);
  call->WritesDone(&done);
  Await(cq, &done);
  grpc::ByteBuffer response;
  call->Read(&response, &read);
  const bool got_response = Await(cq, &read);
  grpc::Status status;
  call->Finish(&status, &finish);
  Await(cq, &finish);
  if (!status.ok()) return RpcFailed(status);
  if (!got_response) {
    std::cout << "NO_RESPONSE" << std::endl;
    return kRpcError;
  }
  std::vector<Field> fields;
  if (!ParseFields(FromByteBuffer(response), fields)) {
    std::cout << "MALFORMED" << std::endl;
    return kRpcError;
  }
  for (const Field& f : fields) {
    if (f.number != 6) continue;
    std::vector<Field> services;
    if (!ParseFields(f.bytes, services)) continue;
    for (const Field& service : services) {
      std::vector<Field> names;
      if (service.number != 1 || !ParseFields(service.bytes, names)) continue;
      for (const Field& name : names) {
        if (name.number == 1) std::cout << name.bytes << "\n";
      }
    }
  }
  std::cout.flush();
  return 0;
}

// ---- the Controller service ------------------------------------------------

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

bool ParseShape(const std::string& text,
                google::protobuf::RepeatedField<int64_t>* out) {
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) return false;
    out->Add(v);
  }
  return !out->empty();
}

bool ParseMesh(const std::string& text, v1::DeviceMesh* mesh) {
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v)) return false;
    mesh->add_shape(v);
  }
  return mesh->shape_size() > 0;
}

int Submit(v1::Controller::Stub& stub, const std::vector<std::string>& args) {
  std::map<std::string, std::string> kv;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      std::cerr << "submit: arguments are key=value, got " << arg << "\n";
      return kUsage;
    }
    kv[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  v1::SubmitJobRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->set_name(kv["name"]);
  v1::ReshardSpec* reshard = spec->mutable_reshard();
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  if (!ParseShape(kv["shape"], reshard->mutable_tensor()->mutable_shape()) ||
      !v1::DType_Parse("DTYPE_" + absl::AsciiStrToUpper(kv["dtype"]), &dtype) ||
      !ParseMesh(kv["src_mesh"], reshard->mutable_src_mesh()) ||
      !ParseMesh(kv["dst_mesh"], reshard->mutable_dst_mesh())) {
    std::cerr << "submit: need shape=AxB.. dtype=int32|float32|... "
                 "src_mesh=HxG dst_mesh=HxG src_spec=.. dst_spec=..\n";
    return kUsage;
  }
  reshard->mutable_tensor()->set_dtype(dtype);
  reshard->mutable_src_spec()->set_text(kv["src_spec"]);
  reshard->mutable_dst_spec()->set_text(kv["dst_spec"]);
  reshard->set_strategy(kv["strategy"]);
  reshard->set_allow_overlap(kv["allow_overlap"] == "1");
  v1::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(Context().get(), request, &response);
  if (!status.ok()) return RpcFailed(status);
  std::cout << response.job().id() << std::endl;
  return 0;
}

int Wait(v1::Controller::Stub& stub, const std::string& id, double seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (true) {
    v1::GetJobRequest request;
    request.set_id(id);
    v1::GetJobResponse response;
    grpc::Status status = stub.GetJob(Context().get(), request, &response);
    if (!status.ok()) return RpcFailed(status);
    if (IsFinal(response.job().state()) ||
        std::chrono::steady_clock::now() > deadline) {
      std::cout << StateName(response.job().state()) << " "
                << response.job().message() << std::endl;
      return IsFinal(response.job().state()) ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int Run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: monitoring_client health|services|workers|submit|"
                 "wait|state|cancel ADDRESS ...\n";
    return kUsage;
  }
  const std::string command = argv[1];
  const std::string address = argv[2];
  std::vector<std::string> rest(argv + 3, argv + argc);
  if (command == "health") return Health(address, rest.empty() ? "" : rest[0]);
  if (command == "services") return Services(address);

  auto stub = v1::Controller::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  if (command == "workers") {
    v1::GetClusterResponse response;
    grpc::Status status =
        stub->GetCluster(Context().get(), v1::GetClusterRequest(), &response);
    if (!status.ok()) return RpcFailed(status);
    for (const v1::WorkerInfo& w : response.workers()) {
      std::cout << w.name() << " " << w.address() << " "
                << v1::WorkerInfo::State_Name(w.state()) << "\n";
    }
    std::cout.flush();
    return 0;
  }
  if (command == "submit") return Submit(*stub, rest);
  if (rest.empty()) {
    std::cerr << command << ": a job id is required\n";
    return kUsage;
  }
  if (command == "wait") {
    double seconds = 60;
    if (rest.size() > 1 && !absl::SimpleAtod(rest[1], &seconds)) {
      std::cerr << "wait: SECONDS must be a number\n";
      return kUsage;
    }
    return Wait(*stub, rest[0], seconds);
  }
  if (command == "state") {
    v1::GetJobRequest request;
    request.set_id(rest[0]);
    v1::GetJobResponse response;
    grpc::Status status = stub->GetJob(Context().get(), request, &response);
    if (!status.ok()) return RpcFailed(status);
    std::cout << StateName(response.job().state()) << std::endl;
    return 0;
  }
  if (command == "cancel") {
    v1::CancelJobRequest request;
    request.set_id(rest[0]);
    v1::CancelJobResponse response;
    grpc::Status status = stub->CancelJob(Context().get(), request, &response);
    if (!status.ok()) return RpcFailed(status);
    std::cout << StateName(response.job().state()) << std::endl;
    return 0;
  }
  std::cerr << "unknown command " << command << "\n";
  return kUsage;
}

}  // namespace
}  // namespace meshcast::monitoring

int main(int argc, char** argv) {
  return meshcast::monitoring::Run(argc, argv);
}
