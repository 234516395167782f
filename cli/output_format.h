// --output (-o for short), the flag every meshctl command that prints a
// result shares, and the structured forms it selects:
//
//   std::string output = "table";
//   AddOutputFlag(flags, &output,
//                 "table: one row per job; wide: more columns; json, yaml: "
//                 "every field");
//   ... flags.Parse(args) ...
//   if (IsStructuredOutput(output)) {
//     result.out = RenderStructured(JobToJson(job, true), output);
//   }
//
// Values: table (the human view, the default), wide (the table with the
// extra columns a command has to show; the same as table where it has
// none), json (one JSON object, the contract scripts read) and yaml (the
// same data as json, as one YAML document: keys in the same order, numbers
// written as json writes them, strings that YAML would read as another type
// quoted). The YAML is made from the JSON value, never formatted on its
// own, so both always carry the same fields.
//
// Thread safety: pure functions.
#ifndef MESHCAST_CLI_OUTPUT_FORMAT_H_
#define MESHCAST_CLI_OUTPUT_FORMAT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "cli/flags.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {

// Registers --output table|wide|json|yaml and -o as its short form.
void AddOutputFlag(FlagSet& flags, std::string* output, absl::string_view help);

// True for json and yaml.
bool IsStructuredOutput(absl::string_view output);

// `value` as --output json prints it (one line) or, for "yaml", as YAML;
// ends with '\n'.
std::string RenderStructured(const nlohmann::ordered_json& value,
                             absl::string_view output);
// The same for a command that builds its JSON as text: `json_text` (one JSON
// value) unchanged for "json", converted (key order kept) for "yaml".
std::string RenderStructuredText(const std::string& json_text,
                                 absl::string_view output);
// One document of a stream (watch's events): RenderStructured for json
// (one object per line); for yaml the document starts with "---".
std::string RenderStructuredDocument(const nlohmann::ordered_json& value,
                                     absl::string_view output);

// YAML text of `value`, without a final newline.
std::string JsonToYaml(const nlohmann::ordered_json& value);

}  // namespace meshcast::cli

#endif  // MESHCAST_CLI_OUTPUT_FORMAT_H_
