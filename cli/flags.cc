#include "cli/flags.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/suggest.h"

namespace meshcast::cli {
namespace {

// Column where flag help starts in Usage().
constexpr size_t kHelpColumn = 30;

std::string FormatDouble(double value) { return absl::StrCat(value); }

// How a flag is written: "-f" for a one-letter name, "--shape" otherwise
// (either spelling parses).
std::string Spelling(absl::string_view name) {
  return absl::StrCat(name.size() == 1 ? "-" : "--", name);
}

}  // namespace

FlagSet::FlagSet(std::string command, std::string description)
    : command_(std::move(command)), description_(std::move(description)) {}

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

// Flag names match with '-' and '_' taken as the same character, so that
// --tls_ca and --tls-ca both work, as they do for the daemons.
static bool SameFlagName(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] == '_' ? '-' : a[i];
    const char y = b[i] == '_' ? '-' : b[i];
    if (x != y) return false;
  }
  return true;
}

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  for (Flag& flag : flags_) {
    if (SameFlagName(flag.name, name)) return &flag;
    if (!flag.alias.empty() && SameFlagName(flag.alias, name)) return &flag;
  }
  return nullptr;
}

void FlagSet::Alias(absl::string_view alias, absl::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) flag.alias = std::string(alias);
  }
}

bool FlagSet::IsSet(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.set;
  }
  return false;
}

void FlagSet::String(absl::string_view name, std::string* target,
                     absl::string_view value_name, absl::string_view help) {
  Add(Flag{std::string(name), std::string(value_name), std::string(help),
           *target, false, false, [target](absl::string_view value) {
             *target = std::string(value);
             return absl::OkStatus();
           }});
}

void FlagSet::Int(absl::string_view name, int* target,
                  absl::string_view value_name, absl::string_view help) {
  Add(Flag{std::string(name), std::string(value_name), std::string(help),
           absl::StrCat(*target), false, false,
           [target](absl::string_view value) {
             if (!absl::SimpleAtoi(value, target)) {
               return absl::InvalidArgumentError(
                   absl::StrCat("'", value, "' is not an integer"));
             }
             return absl::OkStatus();
           }});
}

void FlagSet::Double(absl::string_view name, double* target,
                     absl::string_view value_name, absl::string_view help) {
  Add(Flag{std::string(name), std::string(value_name), std::string(help),
           FormatDouble(*target), false, false,
           [target](absl::string_view value) {
             double parsed = 0;
             if (!absl::SimpleAtod(value, &parsed) || !std::isfinite(parsed)) {
               return absl::InvalidArgumentError(
                   absl::StrCat("'", value, "' is not a finite number"));
             }
             *target = parsed;
             return absl::OkStatus();
           }});
}

void FlagSet::Bool(absl::string_view name, bool* target,
                   absl::string_view help) {
  Add(Flag{std::string(name), "", std::string(help), *target ? "true" : "",
           true, false, [target](absl::string_view value) {
             const std::string lower = absl::AsciiStrToLower(value);
             if (lower == "true" || lower == "1" || lower == "yes") {
               *target = true;
             } else if (lower == "false" || lower == "0" || lower == "no") {
               *target = false;
             } else {
               return absl::InvalidArgumentError(absl::StrCat(
                   "'", value, "' is not a boolean; allowed: true, false"));
             }
             return absl::OkStatus();
           }});
}

void FlagSet::Choice(absl::string_view name, std::string* target,
                     std::vector<std::string> allowed, absl::string_view help) {
  const std::string value_name = absl::StrJoin(allowed, "|");
  std::vector<std::string> choices = allowed;
  Add(Flag{std::string(name), value_name, std::string(help), *target, false,
           false,
           [target, allowed = std::move(allowed)](absl::string_view value) {
             for (const std::string& option : allowed) {
               if (value == option) {
                 *target = option;
                 return absl::OkStatus();
               }
             }
             return absl::InvalidArgumentError(
                 absl::StrCat("unknown value '", value,
                              "'; allowed: ", absl::StrJoin(allowed, ", ")));
           },
           "", std::move(choices)});
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    absl::string_view body = arg;
    body.remove_prefix(body.substr(0, 2) == "--" ? 2 : 1);
    if (body == "help" || body == "h" || body == "help=flags") {
      help_requested_ = true;
      flag_table_requested_ = body == "help=flags";
      return absl::OkStatus();
    }
    absl::string_view name = body;
    absl::string_view value;
    bool has_value = false;
    const size_t equals = body.find('=');
    if (equals != absl::string_view::npos) {
      name = body.substr(0, equals);
      value = body.substr(equals + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) return UnknownFlag(name);
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            Spelling(flag->name), ": needs a value (", flag->value_name, ")"));
      }
    }
    absl::Status status = flag->assign(value);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Spelling(flag->name), ": ", status.message()));
    }
    flag->set = true;
  }
  return absl::OkStatus();
}

absl::Status FlagSet::UnknownFlag(absl::string_view name) const {
  // Names compare without their dashes, so that -g is not "close" to -f.
  std::vector<std::string> names;
  for (const Flag& flag : flags_) {
    names.push_back(flag.name);
    if (!flag.alias.empty()) names.push_back(flag.alias);
  }
  std::vector<std::string> close = ClosestWords(name, names);
  for (std::string& word : close) word = Spelling(word);
  std::string hint;
  if (!close.empty()) {
    hint = absl::StrCat("did you mean ", absl::StrJoin(close, " or "), "? ");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown flag ", Spelling(name), "; ", hint, "run '",
                   command_, " --help' for the list of flags"));
}

std::string FlagSet::FlagTable() const {
  std::string out;
  for (const Flag& flag : flags_) {
    for (const std::string& name : {flag.name, flag.alias}) {
      if (name.empty()) continue;
      absl::StrAppend(&out, Spelling(name), "\t", flag.value_name, "\t",
                      absl::StrJoin(flag.choices, " "), "\n");
    }
  }
  absl::StrAppend(&out, "--help\t\t\n");
  return out;
}

std::string FlagSet::Usage() const {
  if (flag_table_requested_) return FlagTable();
  std::string out = absl::StrCat("usage: ", command_, " [flags]\n\n");
  if (!description_.empty()) absl::StrAppend(&out, description_, "\n\n");
  absl::StrAppend(&out, "flags:\n");
  const std::string indent(kHelpColumn, ' ');
  for (const Flag& flag : flags_) {
    const std::string alias =
        flag.alias.empty() ? "" : absl::StrCat(Spelling(flag.alias), ", ");
    std::string head = absl::StrCat("  ", alias, Spelling(flag.name));
    if (!flag.value_name.empty()) absl::StrAppend(&head, " ", flag.value_name);
    if (head.size() + 2 > kHelpColumn) {
      absl::StrAppend(&out, head, "\n", indent);
    } else {
      absl::StrAppend(&out, head, std::string(kHelpColumn - head.size(), ' '));
    }
    std::string help = flag.help;
    if (!flag.default_value.empty()) {
      absl::StrAppend(&help, " (default: ", flag.default_value, ")");
    }
    absl::StrAppend(
        &out,
        absl::StrJoin(absl::StrSplit(help, '\n'), absl::StrCat("\n", indent)),
        "\n");
  }
  absl::StrAppend(&out, "  -h, --help", std::string(kHelpColumn - 12, ' '),
                  "show this help\n");
  return out;
}

}  // namespace meshcast::cli
