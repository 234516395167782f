#include "cli/output_format.h"

#include <string>
#include <vector>

#include "cli/flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace meshcast::cli {
namespace {

using ::testing::HasSubstr;
using OrderedJson = nlohmann::ordered_json;

OrderedJson Sample() {
  return OrderedJson::parse(R"({
    "id": "job-000042", "state": "SUCCEEDED", "progress": 1.0,
    "name": "", "owner": "true", "tag": "0.5", "created_unix": 1.7e9,
    "result": {"seconds": 0.1, "bytes_moved": 8388608, "mismatches": 0,
               "metrics": {}, "steps": [], "ok": true, "none": null,
               "message": "moved: 8 MiB # verified"},
    "shape": [64, 64, 256]})");
}

TEST(OutputFormatTest, YamlCarriesTheJsonData) {
  const OrderedJson json = Sample();
  const std::string yaml = RenderStructured(json, "yaml");
  EXPECT_EQ(yaml.back(), '\n');
  // Keys in the JSON's order, numbers as the JSON writes them.
  EXPECT_EQ(yaml.find("id: job-000042"), 0u) << yaml;
  EXPECT_LT(yaml.find("state:"), yaml.find("progress:"));
  EXPECT_THAT(yaml, HasSubstr("seconds: 0.1\n"));
  EXPECT_THAT(yaml, HasSubstr("bytes_moved: 8388608\n"));
  EXPECT_THAT(yaml, HasSubstr("created_unix: 1700000000.0\n"));
  // Strings that YAML would read as another type stay strings.
  EXPECT_THAT(yaml, HasSubstr("owner: \"true\""));
  EXPECT_THAT(yaml, HasSubstr("tag: \"0.5\""));

  // Read back, every value has the JSON's type and value.
  const YAML::Node node = YAML::Load(yaml);
  EXPECT_EQ(node["id"].as<std::string>(), "job-000042");
  EXPECT_EQ(node["name"].as<std::string>(), "");
  EXPECT_EQ(node["owner"].as<std::string>(), "true");
  EXPECT_EQ(node["tag"].Tag(), "!");  // quoted: a string
  EXPECT_DOUBLE_EQ(node["result"]["seconds"].as<double>(), 0.1);
  EXPECT_EQ(node["result"]["bytes_moved"].as<int64_t>(), 8388608);
  EXPECT_TRUE(node["result"]["ok"].as<bool>());
  EXPECT_TRUE(node["result"]["none"].IsNull());
  EXPECT_TRUE(node["result"]["metrics"].IsMap());
  EXPECT_EQ(node["result"]["metrics"].size(), 0u);
  EXPECT_TRUE(node["result"]["steps"].IsSequence());
  EXPECT_EQ(node["result"]["message"].as<std::string>(),
            "moved: 8 MiB # verified");
  EXPECT_EQ(node["shape"][2].as<int>(), 256);
}

TEST(OutputFormatTest, JsonIsUnchanged) {
  const OrderedJson json = Sample();
  EXPECT_EQ(RenderStructured(json, "json"), json.dump() + "\n");
  const std::string text = json.dump() + "\n";
  EXPECT_EQ(RenderStructuredText(text, "json"), text);
  EXPECT_EQ(RenderStructuredText(text, "yaml"), RenderStructured(json, "yaml"));
  // A stream of documents: one JSON object per line, or YAML documents.
  EXPECT_EQ(RenderStructuredDocument(json, "json"), json.dump() + "\n");
  EXPECT_EQ(RenderStructuredDocument(json, "yaml"),
            "---\n" + RenderStructured(json, "yaml"));
  EXPECT_TRUE(IsStructuredOutput("json"));
  EXPECT_TRUE(IsStructuredOutput("yaml"));
  EXPECT_FALSE(IsStructuredOutput("table"));
  EXPECT_FALSE(IsStructuredOutput("wide"));
}

TEST(OutputFormatTest, ShortFlagAndValues) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-o", "yaml"},
                                             {"--output", "yaml"},
                                             {"-o=yaml"},
                                             {"--output=yaml"}}) {
    std::string output = "table";
    FlagSet flags("meshctl test", "");
    AddOutputFlag(flags, &output, "how to print");
    ASSERT_TRUE(flags.Parse(args).ok()) << args[0];
    EXPECT_EQ(output, "yaml");
    EXPECT_TRUE(flags.IsSet("output"));
  }
  std::string output = "table";
  FlagSet flags("meshctl test", "");
  AddOutputFlag(flags, &output, "how to print");
  EXPECT_TRUE(flags.Parse({"-o", "wide"}).ok());
  EXPECT_EQ(output, "wide");
  EXPECT_EQ(flags.Parse({"-o", "xml"}).message(),
            "--output: unknown value 'xml'; allowed: table, wide, json, yaml");
  EXPECT_THAT(flags.Usage(), HasSubstr("  -o, --output table|wide|json|yaml"));
}

}  // namespace
}  // namespace meshcast::cli
