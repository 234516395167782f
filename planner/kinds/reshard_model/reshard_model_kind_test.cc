#include "planner/kinds/reshard_model/reshard_model_kind.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan.h"
#include "planner/sim/plan_simulator.h"
#include "planner/unit_task.h"

namespace meshcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void AddTensor(v1::ReshardModelSpec& m, const std::string& name,
               std::vector<int64_t> shape, const std::string& src,
               const std::string& dst) {
  v1::ModelTensor* t = m.add_tensors();
  t->set_name(name);
  for (int64_t e : shape) t->add_shape(e);
  t->mutable_src_spec()->set_text(src);
  t->mutable_dst_spec()->set_text(dst);
}

// Training on 1x4 (tensor parallel over 4), inference on two 1x2 replicas.
v1::JobSpec Spec(int replicas = 2) {
  v1::JobSpec spec;
  v1::ReshardModelSpec& m = *spec.mutable_reshard_model();
  m.mutable_src_mesh()->add_shape(1);
  m.mutable_src_mesh()->add_shape(4);
  for (int r = 0; r < replicas; ++r) {
    v1::DeviceMesh* mesh = m.add_dst_meshes();
    mesh->add_shape(1);
    mesh->add_shape(2);
  }
  AddTensor(m, "wq", {256, 256}, "R,S1", "R,S1");
  AddTensor(m, "wo", {256, 256}, "S1,R", "S1,R");
  AddTensor(m, "w1", {256, 1024}, "R,S1", "S1,R");
  AddTensor(m, "norm", {256}, "R", "R");
  return spec;
}

TEST(ReshardModelKindTest, ErrorsNameTheFieldAndTheAllowedValues) {
  struct Case {
    std::function<void(v1::ReshardModelSpec&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::ReshardModelSpec& m) { m.clear_src_mesh(); },
       "reshard_model.src_mesh is required"},
      {[](v1::ReshardModelSpec& m) { m.clear_dst_meshes(); },
       "reshard_model.dst_meshes (count) is 0; allowed: 1..256"},
      {[](v1::ReshardModelSpec& m) {
         m.mutable_dst_meshes(1)->set_shape(1, 4);
       },
       "reshard_model.dst_meshes[1] has shape 1x4; allowed: the shape of "
       "dst_meshes[0], 1x2"},
      {[](v1::ReshardModelSpec& m) { m.mutable_tensors(1)->set_name("wq"); },
       "reshard_model.tensors[1].name 'wq' repeats"},
      {[](v1::ReshardModelSpec& m) {
         m.mutable_tensors(2)->mutable_dst_spec()->set_text("S2,R");
       },
       "reshard_model.tensors[2].dst_spec"},
      {[](v1::ReshardModelSpec& m) {
         m.mutable_tensors(3)->mutable_src_spec()->clear_text();
       },
       "reshard_model.tensors[3].src_spec is required"},
      {[](v1::ReshardModelSpec& m) { m.mutable_tensors(0)->clear_shape(); },
       "reshard_model.tensors[0]"},
      {[](v1::ReshardModelSpec& m) { m.set_strategy("fastest"); },
       "reshard_model.strategy"},
      {[](v1::ReshardModelSpec& m) { m.set_src_buffer_prefix("train/"); },
       "give both (user buffers for sources and destinations) or neither"},
      {[](v1::ReshardModelSpec& m) {
         m.set_src_buffer_prefix("w/");
         m.set_dst_buffer_prefix("w/");
       },
       "reshard_model.dst_buffer_prefix 'w/' equals "
       "reshard_model.src_buffer_prefix"},
      {[](v1::ReshardModelSpec& m) { m.set_max_transfers_per_host(-2); },
       "reshard_model.max_transfers_per_host is -2; allowed: 0 (no bound) or "
       "a positive count"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.edit(*spec.mutable_reshard_model());
    const absl::Status status = ReshardModelKind().Validate(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(ReshardModelKind().Validate(Spec()).ok());
}

TEST(ReshardModelKindTest, ReplicasFormOneMeshWithALeadingAxis) {
  const DeviceMesh mesh =
      ReplicaMesh({DeviceMesh{{1, 2}, {4, 5}}, DeviceMesh{{1, 2}, {8, 9}}});
  EXPECT_THAT(mesh.shape, ElementsAre(2, 1, 2));
  EXPECT_THAT(mesh.devices, ElementsAre(4, 5, 8, 9));
  EXPECT_EQ(OverReplicas(*ShardingSpec::Parse("S1,R")).ToString(),
            ShardingSpec::Parse("S2,R")->ToString());
}

// Every tensor planned together, each delivered to every replica: the plan
// passes VerifyPlan on every tensor, and the metrics count the replicas.
TEST(ReshardModelKindTest, UserBuffersNameEveryTileAfterItsTensor) {
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  const std::vector<DeviceMesh> meshes = {DeviceMesh{{1, 4}, {0, 1, 2, 3}},
                                          DeviceMesh{{1, 2}, {4, 5}},
                                          DeviceMesh{{1, 2}, {8, 9}}};
  v1::JobSpec spec = Spec();
  absl::StatusOr<PlannedJob> own =
      ReshardModelKind().Plan(spec, meshes, topology, {});
  ASSERT_TRUE(own.ok()) << own.status();
  for (const v1::Buffer& b : own->plan.buffers()) {
    EXPECT_EQ(b.user_buffer(), "");
  }
  spec.mutable_reshard_model()->set_src_buffer_prefix("train/");
  spec.mutable_reshard_model()->set_dst_buffer_prefix("infer/");
  absl::StatusOr<PlannedJob> user =
      ReshardModelKind().Plan(spec, meshes, topology, {});
  ASSERT_TRUE(user.ok()) << user.status();
  const std::vector<std::string> names = {"wq", "wo", "w1", "norm"};
  int sources = 0, destinations = 0;
  for (const v1::Buffer& b : user->plan.buffers()) {
    ASSERT_LT(b.tensor(), 4);
    if (b.role() == v1::Buffer::ROLE_SOURCE) {
      ++sources;
      EXPECT_EQ(b.user_buffer(), "train/" + names[b.tensor()]);
    } else if (b.role() == v1::Buffer::ROLE_DESTINATION) {
      ++destinations;
      EXPECT_EQ(b.user_buffer(), "infer/" + names[b.tensor()]);
    } else {
      EXPECT_EQ(b.user_buffer(), "");
    }
  }
  EXPECT_EQ(sources, 4 * 4);
  EXPECT_EQ(destinations, 4 * 4);
  // The same moves as with the workers' own tiles.
  EXPECT_EQ(user->plan.steps_size(), own->plan.steps_size());
}

TEST(ReshardModelKindTest, PlansEveryTensorToEveryReplica) {
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  const std::vector<DeviceMesh> meshes = {DeviceMesh{{1, 4}, {0, 1, 2, 3}},
                                          DeviceMesh{{1, 2}, {4, 5}},
                                          DeviceMesh{{1, 2}, {8, 9}}};
  PlanOptions all;
  all.compare_all = true;
  absl::StatusOr<PlannedJob> job =
      ReshardModelKind().Plan(Spec(), meshes, topology, all);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.kind(), "reshard_model");
  ASSERT_EQ(job->plan.tensors_size(), 4);
  EXPECT_GT(job->plan.predicted_seconds(), 0);
  EXPECT_GE(job->plan.predicted_seconds(),
            job->plan.lower_bound_seconds() * (1 - 1e-9));
  EXPECT_FALSE(job->alternatives.empty());
  // Each replica device holds a destination buffer of every tensor whose
  // layout gives it a part.
  int destinations = 0;
  for (const v1::Buffer& b : job->plan.buffers()) {
    if (b.role() == v1::Buffer::ROLE_DESTINATION) {
      ++destinations;
      EXPECT_TRUE(b.device() == 4 || b.device() == 5 || b.device() == 8 ||
                  b.device() == 9);
    }
  }
  EXPECT_EQ(destinations, 4 * 4);  // 4 tensors x 4 replica devices
  // The strategies' own check of completeness, tensor by tensor.
  absl::StatusOr<ReshardModelRequest> request =
      ReshardModelRequestOf(Spec());
  ASSERT_TRUE(request.ok());
  std::vector<ReshardProblem> problems;
  const DeviceMesh replicas = ReplicaMesh({meshes[1], meshes[2]});
  for (const ModelTensorRequest& t : request->tensors) {
    problems.push_back(
        {t.tensor, meshes[0], t.src_spec, replicas, OverReplicas(t.dst_spec)});
  }
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard(problems, topology, Strategy::kMeshcast);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(VerifyPlan(*plan, topology).ok());

  v1::JobResult result;
  result.set_seconds(0.5);
  result.set_lower_bound_seconds(0.25);
  result.set_bytes_delivered(1000);
  ReshardModelKind().Summarize(Spec(), job->plan, result);
  EXPECT_EQ(result.metrics().at("replicas"), 2);
  EXPECT_EQ(result.metrics().at("model_bytes"),
            (2 * 256 * 256 + 256 * 1024 + 256) * 2);  // bfloat16
  EXPECT_EQ(result.metrics().at("lower_bound_ratio"), 2);
}

// max_transfers_per_host: the plan the workers get (the plan IR, timed by
// the plan simulator) runs at most that many steps touching one host at
// once, and is predicted no faster than the unbounded one.
TEST(ReshardModelKindTest, MaxTransfersPerHostBoundsEachHostsSteps) {
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  const std::vector<DeviceMesh> meshes = {DeviceMesh{{1, 4}, {0, 1, 2, 3}},
                                          DeviceMesh{{1, 2}, {4, 5}},
                                          DeviceMesh{{1, 2}, {8, 9}}};
  const auto most_at_once = [&](const v1::Plan& plan) {
    const absl::StatusOr<PlanSimulation> sim = SimulatePlan(plan, topology);
    EXPECT_TRUE(sim.ok()) << sim.status();
    std::map<int, std::set<int>> hosts_of_group;
    for (const v1::CommGroup& group : plan.groups()) {
      for (int device : group.devices()) {
        hosts_of_group[group.id()].insert(topology.HostOf(device));
      }
    }
    int most = 0;
    for (int host = 0; host < topology.num_hosts; ++host) {
      std::vector<std::pair<double, int>> events;  // finishes first
      for (int i = 0; i < plan.steps_size(); ++i) {
        if (!hosts_of_group[plan.steps(i).group()].contains(host)) continue;
        events.push_back({sim->step_start[i], +1});
        events.push_back({sim->step_finish[i], -1});
      }
      std::sort(events.begin(), events.end());
      int running = 0;
      for (const auto& [time, change] : events) {
        running += change;
        most = std::max(most, running);
      }
    }
    return most;
  };
  v1::JobSpec spec = Spec();
  absl::StatusOr<PlannedJob> free =
      ReshardModelKind().Plan(spec, meshes, topology, {});
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_GT(most_at_once(free->plan), 2);
  for (int limit : {1, 2}) {
    spec.mutable_reshard_model()->set_max_transfers_per_host(limit);
    absl::StatusOr<PlannedJob> bounded =
        ReshardModelKind().Plan(spec, meshes, topology, {});
    ASSERT_TRUE(bounded.ok()) << bounded.status();
    EXPECT_LE(most_at_once(bounded->plan), limit);
    EXPECT_GE(bounded->plan.predicted_seconds(),
              free->plan.predicted_seconds() * (1 - 1e-9));
  }
}

// A preset's tensors: the count, the parameter total by the formula, and
// tensor-parallel layouts over each mesh's last axis.
TEST(ReshardModelKindTest, PresetGeneratesLlamaTensors) {
  v1::ModelPreset preset;
  preset.set_family("llama");
  preset.set_layers(2);
  preset.set_hidden(64);
  preset.set_heads(8);
  preset.set_kv_heads(2);
  preset.set_ffn(128);
  preset.set_vocab(1000);
  absl::StatusOr<std::vector<ModelTensorRequest>> tensors =
      PresetTensors(preset, /*src_rank=*/2, /*dst_rank=*/1);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u * 9 + 3);
  int64_t params = 0;
  for (const ModelTensorRequest& t : *tensors) {
    params += t.tensor.num_elements();
    EXPECT_EQ(t.tensor.dtype, DType::kBFloat16);
  }
  const int64_t h = 64, kv = 2 * 8, ffn = 128, vocab = 1000;
  EXPECT_EQ(params, 2 * vocab * h + h +
                        2 * (2 * h + h * h + 2 * h * kv + h * h + 3 * h * ffn));
  const ModelTensorRequest& wq = (*tensors)[2];
  EXPECT_EQ(wq.name, "layers.0.wq");
  EXPECT_EQ(wq.src_spec.ToString(), ShardingSpec::Parse("R,S1")->ToString());
  EXPECT_EQ(wq.dst_spec.ToString(), ShardingSpec::Parse("R,S0")->ToString());

  preset.set_family("llama_moe");
  preset.set_experts(4);
  tensors = PresetTensors(preset, 2, 2);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), 2u * 10 + 3);
  EXPECT_EQ((*tensors)[8].name, "layers.0.experts.w1");
  EXPECT_EQ((*tensors)[8].tensor.shape, (std::vector<int64_t>{4, 64, 128}));

  preset.set_family("gpt");
  EXPECT_THAT(std::string(PresetTensors(preset, 2, 2).status().message()),
              HasSubstr("reshard_model.preset.family 'gpt' is not one of "
                        "llama, llama_moe"));
  preset.set_family("llama");
  preset.set_heads(7);
  EXPECT_THAT(std::string(PresetTensors(preset, 2, 2).status().message()),
              HasSubstr("reshard_model.preset: hidden 64 must divide"));
}

// A spec with a preset plans like a listed one.
TEST(ReshardModelKindTest, PresetJobsPlan) {
  v1::JobSpec spec = Spec();
  v1::ModelPreset& preset = *spec.mutable_reshard_model()->mutable_preset();
  preset.set_family("llama");
  preset.set_layers(1);
  preset.set_hidden(64);
  preset.set_heads(4);
  preset.set_vocab(512);
  absl::StatusOr<ReshardModelRequest> request = ReshardModelRequestOf(spec);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->tensors.size(), 12u + 4);  // the preset's, then listed
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  absl::StatusOr<PlannedJob> job = ReshardModelKind().Plan(
      spec,
      {DeviceMesh{{1, 4}, {0, 1, 2, 3}}, DeviceMesh{{1, 2}, {4, 5}},
       DeviceMesh{{1, 2}, {8, 9}}},
      topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan.tensors_size(), 16);
  // A listed tensor may not reuse a preset name.
  spec.mutable_reshard_model()->mutable_tensors(0)->set_name("embed");
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("'embed' repeats"));
}

TEST(ReshardModelKindTest, StagesComeFromLayerNames) {
  EXPECT_EQ(StageOfLayerName("layers.0.wq", 4, 2), 0);
  EXPECT_EQ(StageOfLayerName("layers.1.wq", 4, 2), 0);
  EXPECT_EQ(StageOfLayerName("model.layers.2.self_attn.q_proj.weight", 4, 2),
            1);
  EXPECT_EQ(StageOfLayerName("layers.3.mlp_norm", 4, 2), 1);
  EXPECT_EQ(StageOfLayerName("layers.10.w1", 12, 4), 3);
  EXPECT_EQ(StageOfLayerName("embed", 4, 2), std::nullopt);
  EXPECT_EQ(StageOfLayerName("layers.x.w1", 4, 2), std::nullopt);
  EXPECT_EQ(StageOfLayerName("layers.3", 4, 2), std::nullopt);  // no '.'
  const DeviceMesh row =
      MeshRow(DeviceMesh{{2, 3}, {0, 1, 2, 8, 9, 10}}, 1);
  EXPECT_THAT(row.shape, ElementsAre(3));
  EXPECT_THAT(row.devices, ElementsAre(8, 9, 10));
}

// Pipeline-parallel training, PP2 x TP2 on a 2x2 mesh: each tensor's
// source is the row of its stage, laid out over that row by its src_spec;
// the plan delivers every tensor to every replica from that row only.
TEST(ReshardModelKindTest, PipelineStagesHoldTheirOwnTensors) {
  v1::JobSpec spec;
  v1::ReshardModelSpec& m = *spec.mutable_reshard_model();
  m.set_src_pipeline(true);
  m.mutable_src_mesh()->add_shape(2);
  m.mutable_src_mesh()->add_shape(2);
  for (int r = 0; r < 2; ++r) {
    v1::DeviceMesh* mesh = m.add_dst_meshes();
    mesh->add_shape(1);
    mesh->add_shape(2);
  }
  v1::ModelPreset& preset = *m.mutable_preset();
  preset.set_family("llama");
  preset.set_layers(4);
  preset.set_hidden(64);
  preset.set_heads(4);
  preset.set_vocab(256);
  AddTensor(m, "layers.3.extra", {64}, "R", "R");  // stage from the name
  AddTensor(m, "head_bias", {256}, "S0", "R");     // a stage given
  m.mutable_tensors(1)->set_stage(0);
  absl::StatusOr<ReshardModelRequest> request = ReshardModelRequestOf(spec);
  ASSERT_TRUE(request.ok()) << request.status();
  std::map<std::string, int> stage;
  for (const ModelTensorRequest& t : request->tensors) stage[t.name] = t.stage;
  EXPECT_EQ(stage["embed"], 0);
  EXPECT_EQ(stage["layers.1.wq"], 0);
  EXPECT_EQ(stage["layers.2.wq"], 1);
  EXPECT_EQ(stage["final_norm"], 1);
  EXPECT_EQ(stage["lm_head"], 1);
  EXPECT_EQ(stage["layers.3.extra"], 1);
  EXPECT_EQ(stage["head_bias"], 0);
  // Source specs are over the row (one axis): the preset splits on it.
  EXPECT_EQ(request->tensors[2].src_spec.ToString(),
            ShardingSpec::Parse("R,S0")->ToString());

  const std::vector<DeviceMesh> meshes = {DeviceMesh{{2, 2}, {0, 1, 4, 5}},
                                          DeviceMesh{{1, 2}, {8, 9}},
                                          DeviceMesh{{1, 2}, {12, 13}}};
  const Topology topology = Topology::FromGbps(4, 4, 10, 100);
  absl::StatusOr<PlannedJob> job =
      ReshardModelKind().Plan(spec, meshes, topology, {});
  ASSERT_TRUE(job.ok()) << job.status();
  // Source buffers: stage 0's tensors on devices 0, 1 only, stage 1's on
  // 4, 5 only.
  std::map<int, std::set<int>> source_devices;
  for (const v1::Buffer& b : job->plan.buffers()) {
    if (b.role() == v1::Buffer::ROLE_SOURCE) {
      source_devices[b.tensor()].insert(b.device());
    }
  }
  ASSERT_EQ(job->plan.tensors_size(),
            static_cast<int>(request->tensors.size()));
  for (size_t t = 0; t < request->tensors.size(); ++t) {
    const std::set<int> row = request->tensors[t].stage == 0
                                  ? std::set<int>{0, 1}
                                  : std::set<int>{4, 5};
    EXPECT_EQ(source_devices[static_cast<int>(t)], row)
        << request->tensors[t].name;
  }
  // The strategies' own completeness check over the same problems.
  std::vector<ReshardProblem> problems;
  const DeviceMesh replicas = ReplicaMesh({meshes[1], meshes[2]});
  for (const ModelTensorRequest& t : request->tensors) {
    problems.push_back({t.tensor, MeshRow(meshes[0], t.stage), t.src_spec,
                        replicas, OverReplicas(t.dst_spec)});
  }
  absl::StatusOr<ReshardPlan> plan =
      PlanReshard(problems, topology, Strategy::kMeshcast);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(VerifyPlan(*plan, topology).ok());
}

TEST(ReshardModelKindTest, PipelineErrorsNameTheField) {
  v1::JobSpec spec = Spec();
  v1::ReshardModelSpec& m = *spec.mutable_reshard_model();
  m.mutable_tensors(0)->set_stage(1);
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("reshard_model.tensors[0].stage is set but "
                        "reshard_model.src_pipeline is not"));
  m.set_src_pipeline(true);
  // 1x4: stages 0..0, and the specs now apply to a row of 4 (one axis).
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("reshard_model.tensors[0].src_spec"));
  m.mutable_src_mesh()->clear_shape();
  m.mutable_src_mesh()->add_shape(4);
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("reshard_model.src_pipeline needs a src_mesh of 2 or "
                        "more axes"));
  // 2x2, one-axis specs, no stage for a name without layers.N.
  m.mutable_src_mesh()->clear_shape();
  m.mutable_src_mesh()->add_shape(2);
  m.mutable_src_mesh()->add_shape(2);
  for (v1::ModelTensor& t : *m.mutable_tensors()) {
    t.mutable_src_spec()->set_text(t.shape_size() == 1 ? "R" : "R,S0");
    t.clear_stage();
  }
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("reshard_model.tensors[0].stage is required with "
                        "reshard_model.src_pipeline"));
  for (v1::ModelTensor& t : *m.mutable_tensors()) t.set_stage(1);
  EXPECT_TRUE(ReshardModelKind().Validate(spec).ok());
  m.mutable_tensors(2)->set_stage(2);
  EXPECT_THAT(std::string(ReshardModelKind().Validate(spec).message()),
              HasSubstr("reshard_model.tensors[2].stage"));
}

TEST(ReshardModelKindTest, MeshesAreSourceThenReplicasOnSeparateDevices) {
  absl::StatusOr<PlacementRequest> meshes = ReshardModelKind().Meshes(Spec(3));
  ASSERT_TRUE(meshes.ok());
  ASSERT_EQ(meshes->meshes.size(), 4u);
  EXPECT_EQ(meshes->NameOf(0), "reshard_model.src_mesh");
  EXPECT_EQ(meshes->NameOf(3), "reshard_model.dst_meshes[2]");
  EXPECT_TRUE(meshes->share_hosts);
  const Topology topology = Topology::FromGbps(3, 4, 10, 100);
  absl::StatusOr<PlannedJob> job = ReshardModelKind().Plan(
      Spec(), {DeviceMesh{{1, 4}, {0, 1, 2, 3}}, DeviceMesh{{1, 2}, {3, 4}},
               DeviceMesh{{1, 2}, {8, 9}}},
      topology, {});
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("reshard_model.src_mesh and reshard_model.dst_meshes[0] "
                        "share device 3"));
}

}  // namespace
}  // namespace meshcast
