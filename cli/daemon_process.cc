#include "cli/daemon_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace meshcast::cli {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...), or 0.
char ProcState(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // "pid (comm) S ...": comm may contain spaces and parentheses, so look
  // after the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

}  // namespace

absl::StatusOr<std::string> FindDaemonBinary(const std::string& name,
                                             const std::string& build_subdir,
                                             const std::string& bin_dir,
                                             const CommandContext& context) {
  std::vector<std::string> candidates;
  if (!bin_dir.empty()) {
    candidates.push_back(absl::StrCat(bin_dir, "/", name));
  } else {
    if (!context.program_path.empty()) {
      const std::string own_dir = DirName(context.program_path);
      candidates.push_back(
          absl::StrCat(own_dir, "/../", build_subdir, "/", name));
      candidates.push_back(absl::StrCat(own_dir, "/", name));
    }
    if (std::optional<std::string> path = context.Env("PATH")) {
      for (absl::string_view dir : absl::StrSplit(*path, ':')) {
        if (dir.empty()) continue;
        candidates.push_back(absl::StrCat(dir, "/", name));
      }
    }
  }
  for (const std::string& candidate : candidates) {
    if (!IsExecutableFile(candidate)) continue;
    char resolved[PATH_MAX];
    if (realpath(candidate.c_str(), resolved) != nullptr) return resolved;
    return candidate;
  }
  if (!bin_dir.empty()) {
    return absl::NotFoundError(
        absl::StrCat("--bin-dir: no executable ", name, " in ", bin_dir));
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find ", name, " next to meshctl (",
                   context.program_path.empty() ? "unknown location"
                                                : DirName(context.program_path),
                   ", ../", build_subdir, ") or on $PATH; build it (ninja ",
                   name, ") or pass --bin-dir DIR"));
}

absl::StatusOr<int> SpawnDetached(const std::string& binary,
                                  const std::vector<std::string>& args,
                                  const std::string& log_path,
                                  const std::string& working_dir) {
  std::vector<std::string> argv_storage;
  argv_storage.push_back(binary);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // Check the log first: posix_spawn would report a bad log path as an
  // exec failure of the binary.
  const int probe =
      open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (probe < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open log ", log_path, ": ", strerror(errno)));
  }
  close(probe);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  if (!working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, working_dir.c_str());
  }
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // A new session: the daemon has no controlling terminal and signals sent
  // to meshctl's process group do not reach it. Default signal handling
  // and an empty mask, whatever meshctl's are.
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID |
                                            POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attributes, &empty);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attributes, &all);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, binary.c_str(), &actions, &attributes,
                                argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", binary, ": ", strerror(error)));
  }
  return static_cast<int>(pid);
}

ProcessStatus CheckProcess(int pid) {
  ProcessStatus status;
  if (pid <= 0) return status;
  int wait_status = 0;
  const pid_t reaped = waitpid(pid, &wait_status, WNOHANG);
  if (reaped == pid) {
    if (WIFEXITED(wait_status)) {
      status.exit =
          absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
    } else if (WIFSIGNALED(wait_status)) {
      status.exit =
          absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
    } else {
      status.exit = "ended";
    }
    return status;
  }
  if (reaped == 0) {  // our child, still running
    status.alive = true;
    return status;
  }
  // Not our child: ask the kernel.
  if (kill(pid, 0) != 0 && errno == ESRCH) return status;
  status.alive = ProcState(pid) != 'Z';
  return status;
}

bool IsProcessOf(int pid, const std::string& binary) {
  if (pid <= 0 || !CheckProcess(pid).alive) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string argv0;
  std::getline(in, argv0, '\0');
  return argv0 == binary;
}

std::vector<int> StopProcesses(const std::vector<int>& pids,
                               absl::Duration grace) {
  std::vector<int> running;
  for (int pid : pids) {
    if (CheckProcess(pid).alive && kill(pid, SIGTERM) == 0) {
      running.push_back(pid);
    }
  }
  const absl::Time deadline = absl::Now() + grace;
  while (!running.empty() && absl::Now() < deadline) {
    std::vector<int> still;
    for (int pid : running) {
      if (CheckProcess(pid).alive) still.push_back(pid);
    }
    running.swap(still);
    if (!running.empty()) absl::SleepFor(kPollInterval);
  }
  std::vector<int> killed;
  for (int pid : running) {
    if (kill(pid, SIGKILL) == 0) killed.push_back(pid);
  }
  // Give the kernel a moment so that callers see them gone.
  const absl::Time kill_deadline = absl::Now() + absl::Seconds(2);
  for (int pid : killed) {
    while (CheckProcess(pid).alive && absl::Now() < kill_deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  return killed;
}

std::string LastLogLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (!stripped.empty()) last = std::string(stripped);
  }
  return last;
}

}  // namespace meshcast::cli
