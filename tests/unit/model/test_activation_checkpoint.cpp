// Activation checkpointing (issue 8): the recomputed backward gives the plain
// run's gradients bitwise on CPU, dropout included, because the RNG state of
// the forward is replayed; without the replay (the negative control) they
// differ. Also: the generator ends where the plain run leaves it, eval skips
// the recompute, the peak memory drops, and the trainer wires the config in.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/model/activation_checkpoint.hpp"
#include "anchor/model/gpt.hpp"
#include "anchor/train/trainer.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace anchor;

model::GptOptions opts(int n_layer, double dropout) {
  model::GptOptions o;
  o.n_layer = n_layer;
  o.n_head = 2;
  o.n_embd = 32;
  o.vocab_size = 64;
  o.block_size = 16;
  o.dropout = dropout;
  return o;
}

struct Result {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  torch::Tensor rng_after;
};

// Seeded init, seeded dropout, two micro-steps (the second accumulates into
// existing .grad), as the trainer does.
Result run(int n_layer, int every, model::CheckpointOptions co = {}, double dropout = 0.1) {
  torch::manual_seed(11);
  model::Gpt m(opts(n_layer, dropout));
  m->set_activation_checkpointing(every, co);
  m->train();
  torch::manual_seed(12);
  auto x = torch::randint(0, 64, {3, 16}, torch::kInt64);
  auto y = torch::randint(0, 64, {3, 16}, torch::kInt64);
  torch::manual_seed(13);
  Result r;
  for (int micro = 0; micro < 2; ++micro) {
    auto loss = m->loss(x, y);
    loss.backward();
    r.loss += loss.item<double>();
  }
  for (const auto& p : m->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    if (p.value().grad().defined()) r.grads[p.key()] = p.value().grad().clone();
  }
  r.rng_after = at::detail::getDefaultCPUGenerator().get_state();
  return r;
}

// Names of the parameters whose gradients differ in any bit.
std::vector<std::string> differing(const Result& a, const Result& b) {
  std::vector<std::string> out;
  for (const auto& [name, g] : a.grads) {
    auto it = b.grads.find(name);
    if (it == b.grads.end() || !torch::equal(g, it->second)) out.push_back(name);
  }
  return out;
}

TEST(ActivationCheckpoint, GradientsBitwiseEqualWithDropoutEveryBlock) {
  const Result plain = run(3, 0), ckpt = run(3, 1);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_TRUE(differing(plain, ckpt).empty()) << "differ: " << differing(plain, ckpt).front();
  // The generator is left where the plain run leaves it: the replay borrows it.
  EXPECT_TRUE(torch::equal(plain.rng_after, ckpt.rng_after));
}

TEST(ActivationCheckpoint, GradientsBitwiseEqualEverySecondBlock) {
  const Result plain = run(4, 0), ckpt = run(4, 2);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_TRUE(differing(plain, ckpt).empty());
}

TEST(ActivationCheckpoint, WithoutRngReplayTheGradientsDiffer) {
  // The negative control: the recompute draws new dropout masks.
  model::CheckpointOptions no_replay;
  no_replay.replay_rng = false;
  const Result plain = run(3, 0), broken = run(3, 1, no_replay);
  const auto diff = differing(plain, broken);
  EXPECT_FALSE(diff.empty());
  // Block parameters see the wrong masks.
  bool block_differs = false;
  for (const auto& n : diff) block_differs |= n.rfind("h.", 0) == 0;
  EXPECT_TRUE(block_differs);
  // Without dropout there is nothing to replay: equal again.
  EXPECT_TRUE(differing(run(3, 0, {}, 0.0), run(3, 1, no_replay, 0.0)).empty());
}

TEST(ActivationCheckpoint, FunctionGradientsMatchAndEvalSkipsIt) {
  torch::manual_seed(3);
  auto w = torch::randn({8, 8}, torch::requires_grad());
  auto fn = [&](const torch::Tensor& t) { return torch::dropout(torch::tanh(t.matmul(w)), 0.5, true); };
  auto x0 = torch::randn({4, 8});

  auto grads = [&](bool ckpt) {
    w.mutable_grad() = torch::Tensor();
    auto x = x0.clone().requires_grad_(true);
    torch::manual_seed(5);
    auto out = ckpt ? model::checkpoint(fn, x) : fn(x);
    out.pow(2).sum().backward();
    return std::make_pair(w.grad().clone(), x.grad().clone());
  };
  auto [wp, xp] = grads(false);
  auto [wc, xc] = grads(true);
  EXPECT_TRUE(torch::equal(wp, wc));
  EXPECT_TRUE(torch::equal(xp, xc));

  // An input that needs no grad still trains what fn closes over.
  w.mutable_grad() = torch::Tensor();
  torch::manual_seed(5);
  model::checkpoint(fn, x0).pow(2).sum().backward();
  ASSERT_TRUE(w.grad().defined());

  torch::NoGradGuard no_grad;
  auto out = model::checkpoint(fn, x0);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(out.grad_fn(), nullptr);
}

// Peak tensor bytes of one forward + backward.
std::int64_t peak_of_step(int every) {
  torch::manual_seed(1);
  model::GptOptions o = opts(4, 0.1);
  o.n_embd = 64;
  o.block_size = 64;
  model::Gpt m(o);
  m->set_activation_checkpointing(every);
  auto x = torch::randint(0, 64, {8, 64}, torch::kInt64);
  measure::reset_peak("cpu");
  const auto base = measure::tensor_memory("cpu").allocated_bytes;
  m->loss(x, x).backward();
  return measure::tensor_memory("cpu").peak_allocated_bytes - base;
}

TEST(ActivationCheckpoint, LowersThePeakTensorMemory) {
  measure::install_counting_allocator();
  const auto plain = peak_of_step(0), every1 = peak_of_step(1), every2 = peak_of_step(2);
  EXPECT_LT(every1, plain);
  EXPECT_LT(every2, plain);
  EXPECT_LT(every1, every2) << "more blocks recomputed, less kept";
}

class TrainerCheckpointing : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; text.size() < 8000; ++i) text += "recompute block " + std::to_string(i * 31 % 97) + ". ";
    std::ofstream(dir_ / "train.txt") << text;
  }
  config::Config cfg(int every) const {
    return config::load_string(
        "run: {seed: 3, threads: 1}\n"
        "model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, dropout: 0.1}\n"
        "data: {train: [" +
            (dir_ / "train.txt").string() +
            "], seq_len: 32, val_fraction: 0.1}\n"
            "train: {micro_batch: 2, grad_accum: 2, total_steps: 10, activation_checkpointing: " +
            std::to_string(every) + ", schedule: {warmup_steps: 1}}\n",
        "test.yaml");
  }
  anchor::testing::TempDir tmp_{"ackpt"};
  const std::filesystem::path& dir_ = tmp_.path();
};

// One trainer's first steps: the records, the state digest, the eval loss and
// the largest step peak. Trainers draw from the one global generator (and
// seed it when built): they run one after the other, never interleaved.
struct TrainerRun {
  std::vector<train::StepRecord> steps;
  nlohmann::json digest;
  double eval = 0;
  std::int64_t peak = 0;
};

TrainerRun train_steps(const config::Config& c) {
  TrainerRun r;
  train::Trainer t(c);
  for (int i = 0; i < 3; ++i) {
    measure::reset_peak("cpu");
    r.steps.push_back(t.train_step());
    r.peak = std::max(r.peak, measure::tensor_memory("cpu").peak_allocated_bytes);
  }
  r.digest = t.state_digest();
  r.eval = t.evaluate(1);
  return r;
}

TEST_F(TrainerCheckpointing, ConfigTurnsItOnAndTheRunIsTheSame) {
  measure::install_counting_allocator();
  const TrainerRun plain = train_steps(cfg(0)), ckpt = train_steps(cfg(1));
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(plain.steps[i].loss, ckpt.steps[i].loss) << "step " << i;
    EXPECT_EQ(plain.steps[i].grad_norm, ckpt.steps[i].grad_norm) << "step " << i;
  }
  EXPECT_EQ(plain.digest["model"], ckpt.digest["model"]);
  EXPECT_EQ(plain.digest["optimizer"], ckpt.digest["optimizer"]);
  EXPECT_EQ(plain.digest["rng"], ckpt.digest["rng"]);
  EXPECT_EQ(plain.eval, ckpt.eval);
  EXPECT_LT(ckpt.peak, plain.peak) << "train.activation_checkpointing had no effect on the trainer's model";
}

}  // namespace
