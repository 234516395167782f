#include "cli/command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace meshcast::cli {

CommandContext ProcessContext() {
  CommandContext context;
  context.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) context.program_path.assign(path, static_cast<size_t>(n));
  context.stream_out = [](absl::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  return context;
}

CommandContext ContextWithEnv(std::map<std::string, std::string> env) {
  CommandContext context;
  context.getenv = [env = std::move(env)](
                       const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  return context;
}

}  // namespace meshcast::cli
