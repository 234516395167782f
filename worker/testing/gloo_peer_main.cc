// gloo_peer_for_test CONTROLLER PREFIX RANK SIZE [hang]: one rank of a Gloo
// communicator in its own process, for gloo_communicator_test. Exchanges a
// 1 MiB message (tag 5) with rank 0 and exits 0 if what it received is
// right. With "hang" it only connects and then sleeps (at most 30 s), for
// the test to SIGKILL it mid-job. Bounded: every wait times out within
// seconds.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "worker/controller_kv_store.h"
#include "worker/gloo_communicator.h"

namespace {

std::vector<uint8_t> Message(int from, int to, size_t bytes) {
  std::vector<uint8_t> data;
  data.reserve(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data.push_back(static_cast<uint8_t>(from * 31 + to * 7 + i));
  }
  return data;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshcast::worker;
  const bool hang = argc == 6 && std::string(argv[5]) == "hang";
  if (argc != 5 && !hang) {
    std::cerr << "usage: gloo_peer_for_test CONTROLLER PREFIX RANK SIZE "
                 "[hang]\n";
    return 2;
  }
  const int rank = std::atoi(argv[3]);
  const int size = std::atoi(argv[4]);
  ControllerKvStore kv(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  GlooOptions options;
  options.rendezvous_timeout = absl::Seconds(10);
  options.op_timeout = absl::Seconds(10);
  auto comm = GlooCommunicator::Create(kv, argv[2], rank, size, options);
  if (!comm.ok()) {
    std::cerr << "peer: " << comm.status() << "\n";
    return 1;
  }
  if (hang) {
    absl::SleepFor(absl::Seconds(30));
    return 0;
  }
  std::vector<uint8_t> incoming(1 << 20);
  auto recv = (*comm)->StartRecv(absl::MakeSpan(incoming), 0, 5);
  absl::Status sent = (*comm)->Send(Message(rank, 0, 1 << 20), 0, 5);
  absl::Status received = recv.ok() ? (*recv)->Wait() : recv.status();
  if (!sent.ok() || !received.ok()) {
    std::cerr << "peer: " << sent << " / " << received << "\n";
    return 1;
  }
  return incoming == Message(0, rank, 1 << 20) ? 0 : 1;
}
