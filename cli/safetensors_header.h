// Safetensors headers: the tensor list of a .safetensors file, or of a
// model sharded over several (its model.safetensors.index.json), read
// without reading the tensors' data, for `reshard_model` job files
// (job_file_safetensors.h).
//
// A .safetensors file is an 8-byte little-endian u64 N, then N bytes of
// UTF-8 JSON, then the data:
//   {"__metadata__": {"format": "pt"},            (optional, text -> text)
//    "wq": {"dtype": "BF16", "shape": [4096, 4096],
//           "data_offsets": [0, 33554432]}, ...}
// where data_offsets are [begin, end) bytes into the data. An index is JSON:
//   {"metadata": {...},
//    "weight_map": {"wq": "model-00001-of-00002.safetensors", ...}}
// naming, per tensor, the shard file (relative to the index) that holds it.
//
//   ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
//                    ReadSafetensors("model.safetensors.index.json"));
//
// Checks, as the format's reference reader makes them: N at most
// kMaxSafetensorsHeaderBytes and within the file; the header a JSON object
// (valid UTF-8, no key twice) whose entries each have exactly dtype (one of
// the format's), shape (integers >= 0) and data_offsets ([begin, end],
// begin <= end) and hold as many bytes as shape x dtype needs; the
// tensors, in offset order, tile the data from 0 to the end of the file
// with neither gap nor overlap. An index's weight_map must name each
// shard's tensors exactly (no tensor missing from its shard, none a shard
// holds that the map puts elsewhere or omits); each shard is read once.
//
// Errors: INVALID_ARGUMENT naming the file and, where there is one, the
// tensor (`model.safetensors: tensor 'wq': data_offsets [0, 10] hold 10
// bytes; shape [4096, 4096] of BF16 needs 33554432`); NOT_FOUND for a file
// that cannot be opened.
// Thread safety: pure functions (the readers read files and nothing else).
#ifndef MESHCAST_CLI_SAFETENSORS_HEADER_H_
#define MESHCAST_CLI_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshcast::cli {

// The largest header read (the reference reader's bound).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // as the file writes it: BF16, F32, F8_E4M3, ...
  std::vector<int64_t> shape;
  int64_t begin = 0;  // data_offsets: bytes [begin, end) of the data
  int64_t end = 0;
  std::string file;  // the .safetensors file holding it
};

// Bits per element of a safetensors dtype (BF16: 16, F4: 4); 0 for a name
// the format does not define.
int SafetensorsDTypeBits(absl::string_view dtype);
// The format's dtypes, comma-separated, for messages.
std::string SafetensorsDTypeNames();

// The tensors of a header's JSON text, in data order (offset, then name),
// given the size of the data that follows it. `file` names the file in
// errors and fills SafetensorsTensor::file.
absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensorsHeader(
    absl::string_view json, uint64_t data_bytes, const std::string& file);

// One .safetensors file: its length prefix and header, never its data.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsFile(
    const std::string& path);

// An index: each shard's header, shards in name order, each shard's
// tensors in data order.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsIndex(
    const std::string& path);

// An index when `path` ends in .json, one .safetensors file otherwise.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(
    const std::string& path);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_SAFETENSORS_HEADER_H_
