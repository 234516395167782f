#include "cli/output_format.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace meshcast::cli {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Whether YAML 1.2's core schema (or an older 1.1 reader) would read the
// plain scalar `text` as something other than a string.
bool ReadsAsNonString(const std::string& text) {
  if (text.empty()) return true;
  const std::string lower = absl::AsciiStrToLower(text);
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n",
                           "null", "~", ".inf", "-.inf", ".nan"}) {
    if (lower == word) return true;
  }
  double number = 0;
  return absl::SimpleAtod(text, &number) || absl::StartsWith(lower, "0x") ||
         absl::StartsWith(lower, "0o");
}

void EmitString(const std::string& text, YAML::Emitter& out) {
  if (ReadsAsNonString(text)) out << YAML::DoubleQuoted;
  out << text;
}

void Emit(const OrderedJson& value, YAML::Emitter& out) {
  switch (value.type()) {
    case OrderedJson::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key;
        EmitString(key, out);
        out << YAML::Value;
        Emit(item, out);
      }
      out << YAML::EndMap;
      return;
    case OrderedJson::value_t::array:
      out << YAML::BeginSeq;
      for (const OrderedJson& item : value) Emit(item, out);
      out << YAML::EndSeq;
      return;
    case OrderedJson::value_t::string:
      EmitString(value.get<std::string>(), out);
      return;
    case OrderedJson::value_t::boolean:
      out << (value.get<bool>() ? "true" : "false");
      return;
    case OrderedJson::value_t::number_integer:
    case OrderedJson::value_t::number_unsigned:
    case OrderedJson::value_t::number_float:
      // json's own text of the number (shortest round trip), so both
      // outputs show the same figure.
      out << value.dump();
      return;
    default:
      out << YAML::Null;
      return;
  }
}

}  // namespace

void AddOutputFlag(FlagSet& flags, std::string* output,
                   absl::string_view help) {
  flags.Choice("output", output, {"table", "wide", "json", "yaml"}, help);
  flags.Alias("o", "output");
}

bool IsStructuredOutput(absl::string_view output) {
  return output == "json" || output == "yaml";
}

std::string JsonToYaml(const OrderedJson& value) {
  YAML::Emitter out;
  Emit(value, out);
  return out.c_str();
}

std::string RenderStructured(const OrderedJson& value,
                             absl::string_view output) {
  if (output == "yaml") return JsonToYaml(value) + "\n";
  return value.dump() + "\n";
}

std::string RenderStructuredText(const std::string& json_text,
                                 absl::string_view output) {
  if (output != "yaml") return json_text;
  const OrderedJson value =
      OrderedJson::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return json_text;
  return RenderStructured(value, output);
}

std::string RenderStructuredDocument(const OrderedJson& value,
                                     absl::string_view output) {
  if (output == "yaml") return absl::StrCat("---\n", JsonToYaml(value), "\n");
  return RenderStructured(value, output);
}

}  // namespace meshcast::cli
