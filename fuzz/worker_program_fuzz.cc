// Fuzz target: what a worker does with the bytes of a RunTask request
// before it runs anything — parse the protobuf and check the program
// (worker/program.h: buffers, steps, operands, groups, deps). Invariant:
// nothing crashes and the sanitizers see no bad memory access, whatever
// the bytes; a parsed program runs no more steps than the request holds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "meshcast/v1/worker.pb.h"
#include "worker/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshcast::v1::RunTaskRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<meshcast::worker::ParsedProgram> parsed =
      meshcast::worker::ParseProgram(request.program());
  if (parsed.ok() &&
      parsed->steps.size() >
          static_cast<size_t>(request.program().plan().steps_size())) {
    std::abort();
  }
  return 0;
}
