// The training-state format's names and state.json (train/state_format.hpp):
// what a built-in trainer's checkpoint is called and holds, one module. The
// trainer's own save/restore through these names is tests/unit/train/test_train.cpp.
#include <gtest/gtest.h>

#include <string>

#include "anchor/error.hpp"
#include "anchor/train/state_format.hpp"

namespace {

using namespace anchor::train;

TEST(StateFormat, FileNamesAndTheirFormatTags) {
  EXPECT_EQ(rng_file(0, 1), "rng.safetensors");
  EXPECT_EQ(rng_file(1, 2), "rng-rank00001-of-00002.safetensors");
  EXPECT_EQ(optimizer_shard_file(3, 16), "optimizer-rank00003-of-00016.safetensors");
  for (const auto& [name, tag] :
       std::vector<std::pair<std::string, const char*>>{{kModelFile, kModelFileFormat},
                                                        {kOptimizerFile, kOptimizerFileFormat},
                                                        {optimizer_shard_file(0, 2), kOptimizerShardFileFormat},
                                                        {rng_file(0, 1), kRngFileFormat},
                                                        {rng_file(1, 2), kRngFileFormat},
                                                        {kScalerFile, kScalerFileFormat}})
    EXPECT_STREQ(expected_file_format(name), tag) << name;
  EXPECT_EQ(expected_file_format("state.json"), nullptr) << "not a tensor file of the trainer's";
  EXPECT_EQ(expected_file_format("model.safetensors.bak"), nullptr);
  EXPECT_TRUE(is_optimizer_file(kOptimizerFile));
  EXPECT_TRUE(is_optimizer_file(optimizer_shard_file(1, 2)));
  EXPECT_FALSE(is_optimizer_file(kModelFile));
  EXPECT_FALSE(is_optimizer_file("optimizer-rank.json"));
}

TEST(StateFormat, AdamWTensorNamesRoundTrip) {
  const std::string p = "h.0.attn.c_attn.weight";
  EXPECT_EQ(adamw_tensor(p, AdamWTensor::kExpAvg), p + ".exp_avg");
  EXPECT_EQ(adamw_tensor(p, AdamWTensor::kExpAvgSq), p + ".exp_avg_sq");
  EXPECT_EQ(adamw_tensor(p, AdamWTensor::kStep), p + ".step");
  EXPECT_EQ(adamw_step_param(adamw_tensor(p, AdamWTensor::kStep)), p);
  // Negative controls: the other two tensors and a bare suffix name no parameter.
  EXPECT_FALSE(adamw_step_param(adamw_tensor(p, AdamWTensor::kExpAvg)));
  EXPECT_FALSE(adamw_step_param(adamw_tensor(p, AdamWTensor::kExpAvgSq)));
  EXPECT_FALSE(adamw_step_param(".step"));
  EXPECT_FALSE(adamw_step_param("step"));
}

// What state_json writes, read_saved_state reads back; the caller's fields stay.
TEST(StateFormat, StateJsonIsWhatReadSavedStateReads) {
  StateFields f;
  f.step = 12;
  f.schedule = "cosine";
  f.next_lr = 3e-4;
  f.total_steps = 100;
  f.precision = "bf16";
  f.loss_scale_enabled = true;
  f.scale = 1024;
  f.world_size = 4;
  f.strategy = "zero1";
  f.threads = 2;
  f.libtorch = "2.11.0";
  f.config_digest = std::string(64, 'a');
  const auto j = state_json(f, {{"run_id", "r1"}, {"eval_loss", 2.5}, {"config", {{"run", {{"seed", 1}}}}}});
  EXPECT_EQ(j["format_version"], kStateFormatVersion);
  EXPECT_EQ(j["run_id"], "r1");
  EXPECT_EQ(j["eval_loss"], 2.5);
  const auto s = read_saved_state(j, "ckpt/state.json");
  EXPECT_EQ(s.step, 12);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.strategy, "zero1");
  EXPECT_EQ(s.config_digest, f.config_digest);
  EXPECT_EQ(s.run_id, "r1");
  EXPECT_EQ(s.config["run"]["seed"], 1);
  // The trainer's fields win over a caller's of the same name.
  EXPECT_EQ(state_json(f, {{"step", 99}})["step"], 12);
}

// The version gate: a state.json of a later format is refused, saying which
// version it is and which this build reads; the same fields at this version pass.
TEST(StateFormat, ANewerFormatVersionIsRefusedNamingBoth) {
  StateFields f;
  f.step = 2;
  auto j = state_json(f);
  EXPECT_NO_THROW(read_saved_state(j, "s.json"));
  j["format_version"] = kStateFormatVersion + 1;
  try {
    read_saved_state(j, "s.json");
    FAIL() << "a newer format_version was read";
  } catch (const anchor::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kVerification);
    EXPECT_NE(m.find("format_version " + std::to_string(kStateFormatVersion + 1)), std::string::npos) << m;
    EXPECT_NE(m.find("this anchor reads format_version " + std::to_string(kStateFormatVersion)), std::string::npos)
        << m;
    EXPECT_NE(m.find("newer anchor"), std::string::npos) << m;
  }
}

}  // namespace
