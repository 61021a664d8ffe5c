// Mixed precision (docs/precision.md): the loss scaler's state machine, its
// state through a checkpoint (bitwise, with a negative control), the injected
// inf gradient (skip, back-off, growth), the autocast guard, and the
// numerical validation (flags beyond tolerance, names non-finite tensors).
// On a GPU: tests/gpu/test_gpu.cpp.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/train/loss_scaler.hpp"
#include "anchor/train/precision.hpp"
#include "anchor/train/trainer.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace anchor;
namespace fsys = std::filesystem;

config::LossScaleConfig scale_cfg(double init = 1024, std::int64_t interval = 3) {
  config::LossScaleConfig c;
  c.init_scale = init;
  c.growth_factor = 2.0;
  c.backoff_factor = 0.5;
  c.growth_interval = interval;
  return c;
}

bool bitwise_equal(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(LossScaler, InfSkipsTheStepAndBacksOff) {
  train::LossScaler s(scale_cfg(), true);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.state().growth_tracker, 1);
  EXPECT_FALSE(s.update(true));  // skip
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.state().growth_tracker, 0);  // the clean run starts again
  EXPECT_EQ(s.state().skipped_steps, 1);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.state().skipped_steps, 2);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanStepsOnly) {
  train::LossScaler s(scale_cfg(1024, 3), true);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);  // 2 clean steps: not yet
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 2048.0);  // the 3rd
  EXPECT_EQ(s.state().growth_tracker, 0);
  s.update(false);
  s.update(false);
  s.update(true);  // interrupted: back off, count again from 0
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0);
}

TEST(LossScaler, DisabledIsTheIdentityAndEnabledFollowsTheConfig) {
  train::LossScaler s(scale_cfg(), false);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.update(true));  // an inf still does not apply... but nothing changes
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.state().skipped_steps, 0);
  config::TrainConfig t;
  EXPECT_FALSE(train::loss_scaling_enabled(t));  // fp32, auto
  t.precision = "fp16";
  EXPECT_TRUE(train::loss_scaling_enabled(t));
  t.loss_scale.enabled = "false";
  EXPECT_FALSE(train::loss_scaling_enabled(t));
  t.precision = "bf16";
  t.loss_scale.enabled = "true";
  EXPECT_TRUE(train::loss_scaling_enabled(t));
}

TEST(LossScaler, RejectsAnInvalidRestoredState) {
  train::LossScaler s(scale_cfg(), true);
  EXPECT_THROW(s.set_state({0.0, 0, 0}), Error);
  EXPECT_THROW(s.set_state({std::numeric_limits<double>::infinity(), 0, 0}), Error);
  EXPECT_THROW(s.set_state({1.0, -1, 0}), Error);
  s.set_state({3.0, 2, 1});
  EXPECT_EQ(s.scale(), 3.0);
}

TEST(Autocast, GuardLowersMatmulsInsideAndRestoresOnExit) {
  auto a = torch::randn({4, 4}), b = torch::randn({4, 4});
  {
    train::AutocastGuard g(train::Precision::kBf16, /*cuda=*/false);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    {
      train::AutocastGuard inner(train::Precision::kBf16, false);
      EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);  // the inner guard restored "on"
  }
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat32);
  {
    train::AutocastGuard g(train::Precision::kFp32, false);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat32);
  }
  EXPECT_THROW(train::parse_precision("fp8"), Error);
}

train::PrecisionSide side(const std::string& label, double loss, std::vector<std::pair<std::string, torch::Tensor>> g) {
  train::PrecisionSide s;
  s.label = label;
  s.loss = loss;
  s.grads = std::move(g);
  return s;
}

TEST(PrecisionCheck, FlagsDifferencesBeyondTheToleranceAndNamesTheParameter) {
  auto w = torch::ones({3, 3}), b = torch::ones({3});
  auto a = side("fp32", 2.0, {{"h.0.w", w}, {"h.0.b", b}});
  auto close = side("bf16 autocast", 2.001, {{"h.0.w", w * 1.001}, {"h.0.b", b}});
  auto v = train::compare_precision(a, close, 0.01);
  EXPECT_EQ(v["verdict"], "ok") << v.dump(2);
  EXPECT_NEAR(v["loss"]["rel_diff"].get<double>(), 0.0005, 1e-9);
  EXPECT_TRUE(v["parameters"]["flagged"].empty());

  auto far = side("bf16 autocast", 2.001, {{"h.0.w", w}, {"h.0.b", b * 1.5}});
  v = train::compare_precision(a, far, 0.01);
  EXPECT_EQ(v["verdict"], "flagged") << v.dump(2);
  ASSERT_EQ(v["parameters"]["flagged"].size(), 1u);
  EXPECT_EQ(v["parameters"]["flagged"][0]["name"], "h.0.b");
  EXPECT_NEAR(v["parameters"]["flagged"][0]["rel_diff"].get<double>(), 0.5, 1e-9);
  EXPECT_FALSE(v["loss"]["flagged"].get<bool>());
  EXPECT_EQ(v["parameters"]["largest"][0]["name"], "h.0.b");
  // The same values under a looser tolerance: not flagged (the flag depends on it).
  EXPECT_EQ(train::compare_precision(a, far, 0.6)["verdict"], "ok");
}

TEST(PrecisionCheck, NonFiniteValuesFailWithTheTensorNamed) {
  auto w = torch::ones({3, 3});
  auto bad_w = w.clone();
  bad_w[1][2] = std::numeric_limits<float>::infinity();
  auto a = side("fp32", 2.0, {{"h.0.w", w}, {"h.1.w", w}});
  auto v = train::compare_precision(a, side("bf16 autocast", 2.0, {{"h.0.w", w}, {"h.1.w", bad_w}}), 0.05);
  EXPECT_EQ(v["verdict"], "non_finite");
  ASSERT_EQ(v["non_finite"].size(), 1u) << v.dump(2);
  EXPECT_EQ(v["non_finite"][0]["tensor"], "h.1.w");
  EXPECT_EQ(v["non_finite"][0]["what"], "bf16 autocast gradient");

  v = train::compare_precision(side("fp32", std::nan(""), {{"h.0.w", w}}), side("bf16 autocast", 2.0, {{"h.0.w", w}}),
                               0.05);
  EXPECT_EQ(v["verdict"], "non_finite");
  EXPECT_EQ(v["non_finite"][0]["tensor"], "loss");
  EXPECT_EQ(v["non_finite"][0]["what"], "fp32 loss");

  auto nan_param = w.clone();
  nan_param[0][0] = std::nan("");
  v = train::compare_precision(a, a, 0.05, {{"wte.weight", nan_param}});
  EXPECT_EQ(v["verdict"], "non_finite");
  EXPECT_EQ(v["non_finite"][0]["tensor"], "wte.weight");
  // Negative control: all finite.
  EXPECT_EQ(train::compare_precision(a, a, 0.05, {{"wte.weight", w}})["verdict"], "ok");
}

class PrecisionTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; text.size() < 20000; ++i)
      text += "the scaler keeps its state " + std::to_string(i * 7919 % 1000) + ". ";
    std::ofstream(dir_ / "train.txt") << text;
  }
  void TearDown() override { ::unsetenv("ANCHOR_GRAD_FAULT"); }
  config::Config cfg(const std::string& extra) const {
    const std::string yaml =
        "run: {seed: 7, threads: 1}\n"
        "model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 16, dropout: 0.1}\n"
        "data: {train: [" +
        (dir_ / "train.txt").string() +
        "], seq_len: 16, val_fraction: 0.1}\n"
        "train: {micro_batch: 2, grad_accum: 2, total_steps: 100, schedule: {warmup_steps: 2}, " +
        extra + "}\n";
    return config::load_string(yaml, "test.yaml");
  }
  anchor::testing::TempDir tmp_{"precision"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_F(PrecisionTrainer, InjectedInfSkipsBacksOffGrowsAndTheScalerSurvivesACheckpointBitwise) {
  // A scale that is not a power of two, so a lossy round-trip would show.
  auto c = cfg(
      "precision: bf16, loss_scale: {enabled: \"true\", init_scale: 1000.3, backoff_factor: 0.3, growth_interval: 2}");
  ::setenv("ANCHOR_GRAD_FAULT", "inf:2", 1);  // the second step: steps count from 1
  train::Trainer a(c);
  ASSERT_TRUE(a.loss_scaler().enabled());
  auto s0 = a.train_step();
  EXPECT_FALSE(s0.skipped);
  EXPECT_EQ(s0.loss_scale, 1000.3);
  const auto params_before = a.parameter_digest();
  const auto opt_before = a.state_digest()["optimizer"];
  auto s1 = a.train_step();  // the inf
  EXPECT_TRUE(s1.skipped);
  EXPECT_FALSE(s1.nonfinite_grad.empty());
  EXPECT_EQ(a.parameter_digest(), params_before) << "a skipped step must not touch the parameters";
  EXPECT_EQ(a.state_digest()["optimizer"], opt_before) << "nor the optimizer state";
  EXPECT_TRUE(bitwise_equal(a.loss_scaler().scale(), 1000.3 * 0.3));
  EXPECT_EQ(a.loss_scaler().state().skipped_steps, 1);
  auto s2 = a.train_step();
  EXPECT_FALSE(s2.skipped);
  EXPECT_TRUE(bitwise_equal(s2.loss_scale, 1000.3 * 0.3));
  EXPECT_EQ(a.loss_scaler().state().growth_tracker, 1);

  checkpoint::Store store((dir_ / "ckpt").string());
  std::vector<torch::Tensor> keep;
  const auto saved = a.state_digest();
  const auto saved_state = a.loss_scaler().state();
  store.save(a.save_request(keep, {}));
  auto ref = a.train_step();  // the 2nd clean step: grows
  EXPECT_TRUE(bitwise_equal(a.loss_scaler().scale(), 1000.3 * 0.3 * 2.0));

  ::unsetenv("ANCHOR_GRAD_FAULT");
  auto resume = [&](const train::RestoreFaults& f) {
    train::Trainer b(c);
    auto loaded = store.restore_newest();
    EXPECT_TRUE(loaded.has_value());
    b.restore(*loaded, f);
    return b;
  };
  {
    auto b = resume({});
    EXPECT_TRUE(b.loss_scaler().state() == saved_state);
    EXPECT_TRUE(bitwise_equal(b.loss_scaler().scale(), saved_state.scale));
    EXPECT_EQ(b.state_digest(), saved);
    auto r = b.train_step();
    EXPECT_EQ(r.loss, ref.loss);  // bitwise
    EXPECT_EQ(r.grad_norm, ref.grad_norm);
    EXPECT_EQ(r.loss_scale, ref.loss_scale);
    EXPECT_TRUE(b.loss_scaler().state() == a.loss_scaler().state());
  }
  {
    // Negative control: a restore that drops the scaler restarts at init_scale, and the digest says so.
    train::RestoreFaults f;
    f.drop_scaler = true;
    auto b = resume(f);
    EXPECT_EQ(b.loss_scaler().scale(), 1000.3);
    EXPECT_NE(b.state_digest()["scaler"], saved["scaler"]);
    EXPECT_EQ(b.state_digest()["model"], saved["model"]);
  }
}

TEST_F(PrecisionTrainer, ValidationComparesFp32WithBf16AndLeavesTheTrajectoryAlone) {
  auto c = cfg("precision: bf16");
  train::Trainer a(c), twin(c);  // one global CPU generator: each step below starts from `rng`
  const auto rng = train::get_cpu_rng_state();
  const auto before = a.state_digest();
  auto v = a.validate_precision(0.05);
  EXPECT_EQ(a.state_digest(), before) << "validation must leave model, optimizer, RNG, scaler and step as they were";
  EXPECT_TRUE(v["verdict"] == "ok" || v["verdict"] == "flagged") << v.dump(2);
  EXPECT_EQ(v["precision"], "bf16 autocast");
  const double rel = v["loss"]["rel_diff"].get<double>();
  EXPECT_GT(rel, 0.0) << "bf16 must differ from fp32 somewhere: else autocast was not on";
  EXPECT_LT(rel, 0.05);
  EXPECT_GT(v["grad_norm"]["rel_diff"].get<double>(), 0.0);
  EXPECT_GT(v["parameters"]["count"].get<std::size_t>(), 4u);
  // The next step equals the step of a twin that never validated: bitwise.
  auto x = a.train_step();
  train::set_cpu_rng_state(rng);
  auto y = twin.train_step();
  EXPECT_EQ(x.loss, y.loss);
  EXPECT_EQ(x.grad_norm, y.grad_norm);
  EXPECT_EQ(a.state_digest(), twin.state_digest());

  // fp32 vs fp32 (a trainer at fp32 validating itself): no difference at all.
  train::Trainer f(cfg("precision: fp32"));
  auto same = f.validate_precision(0.0);
  EXPECT_EQ(same["loss"]["rel_diff"].get<double>(), 0.0) << same.dump(2);
  EXPECT_EQ(same["verdict"], "ok");
}

}  // namespace
