// FlagSet: a small command-line flag parser for meshctl's subcommands.
//
// Each subcommand owns a FlagSet, binds its flags to local variables, and
// parses its own arguments; nothing is global, so subcommands cannot clash
// and tests can parse many argument lists in one process.
//
//   std::string cluster;
//   double inter_gbps = 10;
//   bool verify = false;
//   FlagSet flags("meshctl plan", "Plans a cross-mesh resharding offline.");
//   flags.String("cluster", &cluster, "HxG", "hosts x devices per host");
//   flags.Double("inter-gbps", &inter_gbps, "per-host NIC bandwidth, Gbit/s");
//   flags.Bool("verify", &verify, "check the plan");
//   absl::Status status = flags.Parse(args);   // "--cluster 5x4" or
//                                              // "--cluster=5x4"
//   if (flags.help_requested()) std::cout << flags.Usage();
//
// Accepted syntax: --name value, --name=value, -name for the same; boolean
// flags take no value (--verify) or an explicit --verify=true|false; "--"
// ends flags; -h / --help request help. Usage and errors write one-letter
// flags with one dash (-f FILE), the others with two. Errors name the flag and what it
// accepts, e.g. "--inter-gbps: 'fast' is not a number"; an unknown flag
// close to a known one names it ("unknown flag --shap; did you mean
// --shape? ...", suggest.h).
//
// `--help=flags` requests help too, but Usage() then lists the flags for
// programs (meshctl completion): one line per spelling, "--name<TAB>VALUE
// <TAB>choice choice ..." (VALUE empty for booleans, the choices only for
// Choice flags), "-o<TAB>..." again for an alias.
//
// Thread safety: not thread-safe; use one FlagSet per thread. Bound
// variables must outlive Parse().
#ifndef MESHCAST_CLI_FLAGS_H_
#define MESHCAST_CLI_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace meshcast::cli {

class FlagSet {
 public:
  // `command` (e.g. "meshctl plan") prefixes usage text; `description`
  // explains what the command does.
  FlagSet(std::string command, std::string description);

  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Registers a flag bound to `target`; its current value is the default
  // shown in Usage(). `value_name` is the placeholder in the usage text.
  void String(absl::string_view name, std::string* target,
              absl::string_view value_name, absl::string_view help);
  void Int(absl::string_view name, int* target, absl::string_view value_name,
           absl::string_view help);
  void Double(absl::string_view name, double* target,
              absl::string_view value_name, absl::string_view help);
  void Bool(absl::string_view name, bool* target, absl::string_view help);
  // A string restricted to `allowed`; errors list them.
  void Choice(absl::string_view name, std::string* target,
              std::vector<std::string> allowed, absl::string_view help);
  // A second spelling of the registered flag `name`, usually one letter
  // (Alias("o", "output"): -o json is --output json). IsSet(name) is true
  // whichever spelling was given.
  void Alias(absl::string_view alias, absl::string_view name);

  // Parses `args` (without the program and subcommand names). Stops at the
  // first error; the error message starts with the flag, e.g. "--shape: ...".
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // True if the flag appeared on the command line.
  bool IsSet(absl::string_view name) const;
  // Arguments that are not flags, in order.
  const std::vector<std::string>& positional() const { return positional_; }

  // Multi-line help: "usage: <command> [flags]", the description, and one
  // entry per flag with its value placeholder, default and help; after
  // --help=flags, FlagTable() instead.
  std::string Usage() const;
  // The flags for programs, as described at the top of this file.
  std::string FlagTable() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
    std::string default_value;
    bool is_bool = false;
    bool set = false;
    std::function<absl::Status(absl::string_view value)> assign;
    std::string alias;                 // e.g. "o" for "output"; may be empty
    std::vector<std::string> choices;  // of a Choice flag
  };

  void Add(Flag flag);
  Flag* Find(absl::string_view name);
  // "unknown flag --x; [did you mean --y? ]run '... --help' ...".
  absl::Status UnknownFlag(absl::string_view name) const;

  std::string command_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
  bool flag_table_requested_ = false;
};

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_FLAGS_H_
