#include "worker/user_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshcast::worker {
namespace {

// Opens and maps `path` shared, read-write, `size_bytes` from its start.
absl::StatusOr<std::pair<uint8_t*, int64_t>> MapFile(const std::string& path,
                                                    int64_t size_bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("path ", path, ": not a regular file"));
  }
  if (st.st_size < size_bytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("path ", path, " holds ", st.st_size,
                     " bytes, less than size_bytes ", size_bytes));
  }
  void* data = nullptr;
  if (size_bytes > 0) {
    data = mmap(nullptr, static_cast<size_t>(size_bytes),
                PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int saved = errno;
  close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", path, ": mmap: ", std::strerror(saved)));
  }
  return std::make_pair(static_cast<uint8_t*>(data), size_bytes);
}

std::string Describe(const std::string& name, int device) {
  return absl::StrCat("user buffer '", name, "' of device ", device);
}

}  // namespace

UserBuffers::Mapping::~Mapping() {
  if (data_ != nullptr && size_bytes_ > 0) {
    munmap(data_, static_cast<size_t>(size_bytes_));
  }
}

absl::Status UserBuffers::Register(const Info& info) {
  if (info.name.empty()) {
    return absl::InvalidArgumentError("buffer.name: must not be empty");
  }
  if (info.device < 0 || info.size_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(info.name, info.device),
                     ": device and size_bytes must be >= 0"));
  }
  if (info.path.empty() || info.path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(info.name, info.device), ": buffer.path '",
                     info.path, "' must be an absolute path"));
  }
  absl::StatusOr<std::pair<uint8_t*, int64_t>> mapped =
      MapFile(info.path, info.size_bytes);
  if (!mapped.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(info.name, info.device), ": ",
                     mapped.status().message()));
  }
  Entry entry;
  entry.info = info;
  entry.info.jobs_using = 0;
  entry.mapping.reset(new Mapping(mapped->first, mapped->second));
  absl::MutexLock lock(&mu_);
  entries_[{info.name, info.device}] = std::move(entry);
  return absl::OkStatus();
}

absl::Status UserBuffers::Unregister(const std::string& name, int device) {
  absl::MutexLock lock(&mu_);
  if (entries_.erase({name, device}) == 0) {
    return absl::NotFoundError(
        absl::StrCat(Describe(name, device), " is not registered"));
  }
  return absl::OkStatus();
}

std::vector<UserBuffers::Info> UserBuffers::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Info> infos;
  for (const auto& [key, entry] : entries_) {
    Info info = entry.info;
    // The registry holds one reference; every other is a job's.
    info.jobs_using = static_cast<int>(entry.mapping.use_count()) - 1;
    infos.push_back(std::move(info));
  }
  return infos;
}

absl::StatusOr<std::shared_ptr<UserBuffers::Mapping>> UserBuffers::Acquire(
    const std::string& name, int device, int64_t size_bytes) const {
  absl::MutexLock lock(&mu_);
  const auto it = entries_.find({name, device});
  if (it == entries_.end()) {
    std::vector<std::string> known;
    for (const auto& [key, entry] : entries_) {
      known.push_back(absl::StrCat(key.first, "@", key.second));
    }
    return absl::NotFoundError(absl::StrCat(
        Describe(name, device), " is not registered on this worker (",
        known.empty() ? std::string("none is")
                      : absl::StrCat("registered: ", absl::StrJoin(known, ", ")),
        "); register it with Worker.RegisterBuffer before the job runs"));
  }
  if (it->second.info.size_bytes != size_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(name, device), " has ", it->second.info.size_bytes,
        " bytes; the job's tile needs ", size_bytes));
  }
  return it->second.mapping;
}

}  // namespace meshcast::worker
