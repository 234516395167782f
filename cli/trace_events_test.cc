#include "cli/trace_events.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace meshcast::cli {
namespace {

using Json = nlohmann::json;

// The trace-event format as a small JSON schema: the keys each event must
// have and their JSON types ("integer", "number", "string", "object"), per
// phase, and the allowed phases. CheckSchema returns "" when `trace`
// conforms, else the first violation.
const Json& TraceSchema() {
  static const Json* schema = new Json(Json::parse(R"({
    "type": "object",
    "required": {"traceEvents": "array"},
    "optional": {"displayTimeUnit": "string", "otherData": "object"},
    "event": {
      "X": {"required": {"name": "string", "ph": "string", "ts": "number",
                         "dur": "number", "pid": "integer", "tid": "integer"},
            "optional": {"cat": "string", "args": "object"},
            "minimum": {"ts": 0, "dur": 0}},
      "M": {"required": {"name": "string", "ph": "string", "pid": "integer",
                         "tid": "integer", "args": "object"},
            "names": ["process_name", "thread_name", "process_sort_index",
                      "thread_sort_index"]}
    },
    "displayTimeUnit": ["ms", "ns"]
  })"));
  return *schema;
}

bool HasType(const Json& value, const std::string& type) {
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  return false;
}

std::string CheckKeys(const Json& object, const Json& rule,
                      const std::string& where) {
  for (const auto& [key, type] : rule["required"].items()) {
    if (!object.contains(key)) return where + ": missing " + key;
    if (!HasType(object[key], type)) {
      return where + ": " + key + " is not " + type.get<std::string>();
    }
  }
  for (const auto& [key, value] : object.items()) {
    const bool known = rule["required"].contains(key) ||
                       (rule.contains("optional") &&
                        rule["optional"].contains(key));
    if (!known) return where + ": unexpected key " + key;
    if (rule.contains("optional") && rule["optional"].contains(key) &&
        !HasType(value, rule["optional"][key])) {
      return where + ": " + key + " has the wrong type";
    }
  }
  return "";
}

std::string CheckSchema(const Json& trace) {
  const Json& schema = TraceSchema();
  if (!trace.is_object()) return "not an object";
  if (std::string e = CheckKeys(trace, schema, "trace"); !e.empty()) return e;
  if (trace.contains("displayTimeUnit")) {
    const Json& units = schema["displayTimeUnit"];
    if (std::find(units.begin(), units.end(), trace["displayTimeUnit"]) ==
        units.end()) {
      return "displayTimeUnit is not ms or ns";
    }
  }
  int i = 0;
  for (const Json& event : trace["traceEvents"]) {
    const std::string where = "traceEvents[" + std::to_string(i++) + "]";
    if (!event.is_object() || !event.contains("ph") ||
        !event["ph"].is_string()) {
      return where + ": no ph";
    }
    const std::string ph = event["ph"];
    if (!schema["event"].contains(ph)) return where + ": phase " + ph;
    const Json& rule = schema["event"][ph];
    if (std::string e = CheckKeys(event, rule, where); !e.empty()) return e;
    if (rule.contains("minimum")) {
      for (const auto& [key, minimum] : rule["minimum"].items()) {
        if (event[key].get<double>() < minimum.get<double>()) {
          return where + ": " + key + " below " + minimum.dump();
        }
      }
    }
    if (rule.contains("names")) {
      const Json& names = rule["names"];
      if (std::find(names.begin(), names.end(), event["name"]) ==
          names.end()) {
        return where + ": metadata name " + event["name"].dump();
      }
    }
  }
  return "";
}

// A 2-rank all-reduce then a broadcast, on workers w-b (device 4) and w-a
// (device 0), with predictions.
v1::Job SmallJob() {
  v1::Job job;
  job.set_id("job-3");
  v1::Plan* plan = job.mutable_plan();
  plan->set_kind("collective");
  v1::CommGroup* group = plan->add_groups();
  group->set_id(0);
  group->add_devices(0);
  group->add_devices(4);
  const v1::Step::Op ops[] = {v1::Step::OP_ALL_REDUCE,
                              v1::Step::OP_BROADCAST};
  for (int id : {0, 1}) {
    v1::Step* step = plan->add_steps();
    step->set_id(id);
    step->set_op(ops[id]);
    step->set_group(0);
    step->set_bytes(1 << 20);
    plan->add_predicted_step_start(id * 0.001);
    plan->add_predicted_step_finish((id + 1) * 0.001);
  }
  for (const auto& [worker, device] :
       {std::pair<std::string, int>{"w-b", 4}, {"w-a", 0}}) {
    for (int id : {0, 1}) {
      v1::StepResult* step = job.mutable_result()->add_steps();
      step->set_step(id);
      step->set_worker(worker);
      step->set_device(device);
      step->set_bytes(1 << 20);
      step->set_start_seconds(id * 0.0015);
      step->set_end_seconds((id + 1) * 0.0015);
    }
  }
  return job;
}

TEST(TraceEventsTest, ConformsToTheTraceEventSchema) {
  // Through text, as a viewer reads the file.
  const Json trace = Json::parse(JobToTraceEvents(SmallJob()).dump());
  EXPECT_EQ(CheckSchema(trace), "");
}

TEST(TraceEventsTest, SchemaCheckRejectsBrokenEvents) {
  // The check must be able to fail: each edit breaks one rule.
  const Json good = Json::parse(JobToTraceEvents(SmallJob()).dump());
  Json broken = good;
  broken["traceEvents"][3].erase("pid");
  EXPECT_NE(CheckSchema(broken), "");
  broken = good;
  for (Json& event : broken["traceEvents"]) {
    if (event["ph"] == "X") {
      event["ts"] = "0";
      break;
    }
  }
  EXPECT_NE(CheckSchema(broken), "");
  broken = good;
  broken["traceEvents"][0]["ph"] = "Q";
  EXPECT_NE(CheckSchema(broken), "");
  broken = good;
  broken.erase("traceEvents");
  EXPECT_NE(CheckSchema(broken), "");
}

TEST(TraceEventsTest, MeasuredAndPredictedTimelines) {
  const Json trace = Json::parse(JobToTraceEvents(SmallJob()).dump());
  std::map<int, std::string> process;  // pid -> process_name
  std::set<std::pair<int, int>> named_threads;
  int measured = 0, predicted = 0;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "process_name") {
      process[event["pid"].get<int>()] =
          event["args"]["name"].get<std::string>();
    }
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      named_threads.insert(
          {event["pid"].get<int>(), event["tid"].get<int>()});
    }
  }
  // Predicted first, then the workers sorted by name.
  EXPECT_EQ(process, (std::map<int, std::string>{
                         {0, "predicted"}, {1, "w-a"}, {2, "w-b"}}));
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    EXPECT_TRUE(named_threads.count(
        {event["pid"].get<int>(), event["tid"].get<int>()}))
        << event.dump();
    EXPECT_EQ(event["args"]["bytes"], 1 << 20);
    const int step = event["args"]["step"].get<int>();
    if (event["cat"] == "predicted") {
      ++predicted;
      EXPECT_EQ(event["pid"], 0);
      EXPECT_NEAR(event["ts"].get<double>(), step * 1000.0, 1e-6);
      EXPECT_NEAR(event["dur"].get<double>(), 1000.0, 1e-6);
    } else {
      ++measured;
      EXPECT_EQ(event["tid"], event["pid"] == 1 ? 0 : 4);
      EXPECT_NEAR(event["ts"].get<double>(), step * 1500.0, 1e-6);
      EXPECT_NEAR(event["dur"].get<double>(), 1500.0, 1e-6);
    }
    EXPECT_EQ(event["name"],
              (step == 0 ? "all_reduce #0" : "broadcast #1"));
  }
  EXPECT_EQ(measured, 4);
  EXPECT_EQ(predicted, 4);  // 2 steps x 2 devices of the group
  EXPECT_EQ(trace["otherData"]["kind"], "collective");
}

TEST(TraceEventsTest, LabelledStepsAreNamedByTheirLabel) {
  // A pipeline kind labels its steps ("F3": forward of micro-batch 3);
  // unlabelled steps keep the op's name and carry no "label" arg.
  v1::Job job = SmallJob();
  job.mutable_plan()->mutable_steps(0)->set_label("F3");
  const Json trace = Json::parse(JobToTraceEvents(job).dump());
  EXPECT_EQ(CheckSchema(trace), "");
  std::map<std::string, int> names;  // "<cat> <name>" -> events
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    names[event["cat"].get<std::string>() + " " +
          event["name"].get<std::string>()]++;
    const Json& args = event["args"];
    if (args["step"] == 0) {
      EXPECT_EQ(args.value("label", ""), "F3") << event.dump();
      EXPECT_EQ(args["op"], "all_reduce");  // the op stays in the args
    } else {
      EXPECT_FALSE(args.contains("label")) << event.dump();
    }
  }
  EXPECT_EQ(names, (std::map<std::string, int>{{"measured F3 #0", 2},
                                               {"measured broadcast #1", 2},
                                               {"predicted F3 #0", 2},
                                               {"predicted broadcast #1", 2}}));
}

TEST(TraceEventsTest, NoPredictionsNoPredictedProcess) {
  v1::Job job = SmallJob();
  job.mutable_plan()->clear_predicted_step_start();
  const Json trace = Json::parse(JobToTraceEvents(job).dump());
  EXPECT_EQ(CheckSchema(trace), "");
  for (const Json& event : trace["traceEvents"]) {
    EXPECT_NE(event["pid"], 0) << event.dump();
  }
}

}  // namespace
}  // namespace meshcast::cli
