// Training state: schedule, AdamW, GPT-2 weight loading, and the checkpoint
// adapter with in-process save/restore/resume (the pilot proves the same across
// real processes in tests/e2e/test_pilot.cpp).
#include <gtest/gtest.h>

#include <limits>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/model/gpt.hpp"
#include "anchor/train/adamw.hpp"
#include "anchor/train/state_format.hpp"
#include "anchor/train/schedule.hpp"
#include "anchor/train/trainer.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace anchor;
namespace fsys = std::filesystem;

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; text.size() < 20000; ++i)
      text += "the pilot saves the state " + std::to_string(i * 7919 % 1000) + ". ";
    std::ofstream(dir_ / "train.txt") << text;
  }

  config::Config cfg(
      const std::string& train =
          "train: {micro_batch: 2, grad_accum: 2, total_steps: 100, schedule: {warmup_steps: 2}}\n") const {
    const std::string yaml =
        "run: {seed: 7, threads: 1}\n"
        "model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, dropout: 0.1}\n"
        "data: {train: [" +
        (dir_ / "train.txt").string() + "], seq_len: 32, val_fraction: 0.1}\n" + train;
    return config::load_string(yaml, "test.yaml");
  }
  anchor::testing::TempDir tmp_{"train"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST(Schedule, WarmupThenCosineToMin) {
  config::TrainConfig t;
  t.optimizer.lr = 1.0;
  t.schedule.warmup_steps = 4;
  t.schedule.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(train::lr_at(t, 0, 104), 0.25);
  EXPECT_DOUBLE_EQ(train::lr_at(t, 3, 104), 1.0);
  EXPECT_DOUBLE_EQ(train::lr_at(t, 4, 104), 1.0);                 // cosine starts at the peak
  EXPECT_NEAR(train::lr_at(t, 54, 104), 0.1 + 0.5 * 0.9, 1e-12);  // half way
  EXPECT_NEAR(train::lr_at(t, 104, 104), 0.1, 1e-12);             // the end
  EXPECT_NEAR(train::lr_at(t, 500, 104), 0.1, 1e-12);             // clamped past the end
  t.schedule.kind = "constant";
  EXPECT_DOUBLE_EQ(train::lr_at(t, 50, 104), 1.0);
}

TEST(AdamW, MatchesTorchOptimAdamW) {
  torch::manual_seed(0);
  auto w0 = torch::randn({8, 4});
  auto a = w0.clone().requires_grad_(true), b = w0.clone().requires_grad_(true);
  config::OptimizerConfig oc;
  oc.lr = 1e-2;
  oc.weight_decay = 0.1;
  train::AdamW ours({{"w", a, true}}, oc);
  torch::optim::AdamW theirs(
      {b}, torch::optim::AdamWOptions(oc.lr).betas({oc.beta1, oc.beta2}).eps(oc.eps).weight_decay(oc.weight_decay));
  for (int step = 0; step < 5; ++step) {
    auto g = torch::randn({8, 4});
    ours.zero_grad();
    theirs.zero_grad();
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.step(oc.lr);
    theirs.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7)) << (a - b).abs().max().item<double>();
  EXPECT_EQ(ours.state().at("w").step, 5);
  // Negative control: without weight decay the result is measurably different.
  auto c = w0.clone().requires_grad_(true);
  oc.weight_decay = 0;
  train::AdamW no_decay({{"w", c, true}}, oc);
  c.mutable_grad() = torch::ones({8, 4});
  no_decay.step(1.0);
  EXPECT_FALSE(torch::allclose(a, c));
}

TEST(AdamW, ClipGradNormReturnsNormBeforeClipping) {
  auto p = torch::zeros({2}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  std::vector<train::NamedParam> ps = {{"p", p, false}};
  EXPECT_NEAR(train::clip_grad_norm(ps, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(p.grad().norm().item<double>(), 1.0, 1e-5);
}

TEST_F(TrainTest, TrainingReducesLoss) {
  auto c =
      cfg("train: {micro_batch: 2, grad_accum: 2, total_steps: 100, optimizer: {lr: 0.003}, schedule: {warmup_steps: "
          "1}}\n");
  train::Trainer t(c);
  const double before = t.evaluate(2);
  for (int i = 0; i < 15; ++i) t.train_step();
  EXPECT_LT(t.evaluate(2), before - 0.2);
}

TEST_F(TrainTest, SaveRestoreResumeIsBitwiseAndDroppedStateIsCaught) {
  auto c = cfg();
  train::Trainer a(c);
  a.train_step();
  a.train_step();
  checkpoint::Store store((dir_ / "ckpt").string());
  std::vector<torch::Tensor> keep;
  const auto saved = a.state_digest();
  store.save(a.save_request(keep, {}));
  std::vector<train::StepRecord> ref;
  for (int i = 0; i < 2; ++i) ref.push_back(a.train_step());
  const auto final_a = a.state_digest();

  auto resume = [&](const train::RestoreFaults& faults) {
    train::Trainer b(c);
    auto loaded = store.restore_newest();
    EXPECT_TRUE(loaded.has_value());
    b.restore(*loaded, faults);
    auto restored = b.state_digest();
    std::vector<train::StepRecord> out;
    for (int i = 0; i < 2; ++i) out.push_back(b.train_step());
    return std::make_tuple(restored, out, b.state_digest());
  };

  auto [restored, steps, final_b] = resume({});
  EXPECT_EQ(restored, saved);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(steps[static_cast<size_t>(i)].loss, ref[static_cast<size_t>(i)].loss);  // bitwise
    EXPECT_EQ(steps[static_cast<size_t>(i)].batch_digest, ref[static_cast<size_t>(i)].batch_digest);
  }
  EXPECT_EQ(final_b, final_a);

  // Negative controls: each dropped piece of state is visible in its own group.
  train::RestoreFaults drop_rng;
  drop_rng.drop_rng = true;
  auto [r1, s1, f1] = resume(drop_rng);
  EXPECT_NE(r1["rng"], saved["rng"]);
  EXPECT_EQ(r1["model"], saved["model"]);
  EXPECT_NE(s1[0].loss, ref[0].loss) << "dropout masks must differ without the RNG state";

  train::RestoreFaults drop_opt;
  drop_opt.drop_optimizer = true;
  auto [r2, s2, f2] = resume(drop_opt);
  EXPECT_NE(r2["optimizer"], saved["optimizer"]);
  EXPECT_NE(f2["model"], final_a["model"]);

  train::RestoreFaults wrong;
  wrong.wrong_step = true;
  auto [r3, s3, f3] = resume(wrong);
  EXPECT_NE(r3["step"], saved["step"]);
  EXPECT_NE(s3[0].batch_digest, ref[0].batch_digest);
}

// Each byte hashed once: the digests a save computed, and the ones a restore
// verified, give the same state digest as hashing the state again; a digest
// that is not the tensor's changes its group (negative control), and a part
// of the state a restore left out is hashed, not taken from the file.
TEST_F(TrainTest, StateDigestsReuseTheCheckpointsPerTensorDigests) {
  auto c = cfg();
  train::Trainer a(c);
  a.train_step();
  a.train_step();
  checkpoint::Store store((dir_ / "ckpt").string());
  std::vector<torch::Tensor> keep;
  const auto res = store.save(a.save_request(keep, {}));
  const train::StateDigest hashed = a.digest();
  const train::KnownDigests known = a.known_digests(res.digests);
  std::size_t model_keys = 0, moment_keys = 0;
  for (const auto& [key, hex] : known) {
    model_keys += key.rfind("model/", 0) == 0;
    moment_keys += key.find(".exp_avg") != std::string::npos;
  }
  EXPECT_EQ(model_keys, a.model().named_parameters().size());
  EXPECT_EQ(moment_keys, 2 * a.model().named_parameters().size());
  EXPECT_EQ(a.digest(known).to_json(), hashed.to_json()) << "the save's digests, reused";

  auto wrong = known;
  wrong.begin()->second = std::string(64, '0');
  const auto bad = a.digest(wrong);
  EXPECT_NE(bad.model, hashed.model) << "a known digest is used, not ignored";
  EXPECT_EQ(bad.optimizer, hashed.optimizer);

  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded);
  train::Trainer b(c);
  const auto restored_known = b.restore(*loaded);
  EXPECT_EQ(restored_known.size(), known.size() - a.model().named_parameters().size())
      << "every model tensor and moment; the optimizer's steps are restored by value";
  EXPECT_EQ(b.digest(restored_known).to_json(), hashed.to_json());
  EXPECT_EQ(b.digest().to_json(), hashed.to_json()) << "hashing the restored state again agrees";

  train::RestoreFaults drop;
  drop.drop_optimizer = true;
  train::Trainer d(c);
  const auto partial = d.restore(*loaded, drop);
  for (const auto& [key, hex] : partial) EXPECT_EQ(key.rfind("optimizer/", 0), std::string::npos) << key;
  EXPECT_NE(d.digest(partial).optimizer, hashed.optimizer) << "the optimizer left out is hashed as it is";
  EXPECT_EQ(d.digest(partial).model, hashed.model);
}

TEST_F(TrainTest, Gpt2SafetensorsLayoutLoadsAndShapeErrorsNameTheTensor) {
  auto c = cfg();
  torch::manual_seed(1);
  model::Gpt src(model::GptOptions::from(c.model));
  // Write the model in Hugging Face's layout: Conv1D weights transposed, a prefix, the mask buffer.
  std::vector<torch::Tensor> keep;
  std::vector<checkpoint::TensorRef> refs;
  for (auto& p : src->named_parameters()) {
    auto t = p.value().detach();
    const auto& n = p.key();
    const bool conv = n.find(".weight") != std::string::npos &&
                      (n.find("c_attn") != std::string::npos || n.find("c_proj") != std::string::npos ||
                       n.find("c_fc") != std::string::npos);
    keep.push_back((conv ? t.t() : t).contiguous());
    refs.push_back({"transformer." + n, checkpoint::DType::F32, keep.back().sizes().vec(), keep.back().data_ptr(),
                    static_cast<size_t>(keep.back().nbytes())});
  }
  keep.push_back(torch::ones({1, 1, 32, 32}));
  refs.push_back({"transformer.h.0.attn.bias",
                  checkpoint::DType::F32,
                  {1, 1, 32, 32},
                  keep.back().data_ptr(),
                  static_cast<size_t>(keep.back().nbytes())});
  const auto path = (dir_ / "gpt2.safetensors").string();
  checkpoint::write_safetensors(fs::real_fs(), path, refs);

  torch::manual_seed(2);
  model::Gpt dst(model::GptOptions::from(c.model));
  EXPECT_FALSE(torch::equal(dst->named_parameters()["h.0.attn.c_attn.weight"],
                            src->named_parameters()["h.0.attn.c_attn.weight"]));
  model::load_gpt2_safetensors(dst, path);
  for (auto& p : src->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), dst->named_parameters()[p.key()])) << p.key();

  auto bigger = c.model;
  bigger.n_embd = 64;
  model::Gpt wrong(model::GptOptions::from(bigger));
  try {
    model::load_gpt2_safetensors(wrong, path);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("wte.weight: expected shape [256, 64] from the config, found [256, 32]"), std::string::npos) << w;
  }
}

// Issue 14, 5b: a field of state.json with the wrong type ("world_size": "2")
// was a JSON library exception (an "internal" error, exit 1). Every field a
// restore reads is type-checked: a verification error naming the file and
// every bad field. The state is edited after the commit and the manifest and
// COMMITTED rewritten to match, so the store verifies it.
TEST_F(TrainTest, StateJsonFieldOfTheWrongTypeIsAVerificationErrorNamingIt) {
  auto c = cfg();
  train::Trainer a(c);
  a.train_step();
  checkpoint::Store store((dir_ / "ckpt").string());
  std::vector<torch::Tensor> keep;
  auto req = a.save_request(keep, {});
  req.state["world_size"] = "2";
  req.state["strategy"] = 3;
  store.save(req);
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded.has_value());  // the store only checks "step"
  train::Trainer b(c);
  try {
    b.restore(*loaded);
    FAIL() << "restored a state.json whose world_size is a string";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    const std::string w = e.what();
    EXPECT_NE(w.find("step-00000001/state.json: field 'world_size' is a JSON string (\"2\"), expected an integer from "
                     "1 to 65536"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("field 'strategy' is a JSON number (3), expected a string"), std::string::npos) << w;
  }
  // The checker alone: negative control (what the trainer writes passes) and the other fields.
  std::vector<torch::Tensor> keep2;
  const auto good = a.save_request(keep2, {}).state;
  const auto s = train::read_saved_state(good, "state.json");
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.world_size, 1);
  for (const char* field : {"format_version", "data_cursor", "lr_schedule", "precision", "loss_scale", "threads",
                            "libtorch", "config_digest", "config"}) {
    auto bad = good;
    bad[field] = nlohmann::json::array({1});
    EXPECT_THROW(train::read_saved_state(bad, "state.json"), Error) << field;
  }
  // The version gate: a newer layout is not guessed at, an older one was never written; the
  // trainer writes the one it reads (the control above), and one without the field reads as 1.
  EXPECT_EQ(good["format_version"], train::kStateFormatVersion);
  for (const int v : {train::kStateFormatVersion + 1, 0, -1}) {
    auto other = good;
    other["format_version"] = v;
    try {
      train::read_saved_state(other, "step-7/state.json");
      FAIL() << "read format_version " << v;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kVerification);
      EXPECT_NE(std::string(e.what()).find("step-7/state.json: format_version " + std::to_string(v) +
                                           ", and this anchor reads format_version 1"),
                std::string::npos)
          << e.what();
      EXPECT_EQ(std::string(e.what()).find("newer anchor") != std::string::npos, v > 1) << e.what();
    }
  }
  auto huge_version = good;
  huge_version["format_version"] = std::numeric_limits<std::uint64_t>::max();
  try {
    train::read_saved_state(huge_version, "state.json");
    FAIL() << "read format_version 2^64-1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer anchor"), std::string::npos) << e.what();
  }
  auto unversioned = good;
  unversioned.erase("format_version");
  EXPECT_EQ(train::read_saved_state(unversioned, "state.json").step, 1);
  auto zero = good;
  zero["world_size"] = 0;
  EXPECT_THROW(train::read_saved_state(zero, "state.json"), Error);
  // A world no job runs (the restore would walk 2^31 ranks' streams): refused;
  // the largest allowed one passes.
  auto huge = good;
  huge["world_size"] = 2147483647;
  EXPECT_THROW(train::read_saved_state(huge, "state.json"), Error);
  huge["world_size"] = train::kMaxWorldSize;
  EXPECT_EQ(train::read_saved_state(huge, "state.json").world_size, train::kMaxWorldSize);
  // A nested value of the wrong type is described by its size, not dumped whole.
  auto nested = good;
  nested["precision"] = nlohmann::json::array({nlohmann::json::array({1, 2}), 3});
  try {
    train::read_saved_state(nested, "state.json");
    FAIL() << "accepted an array as precision";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'precision' is a JSON array (2 entries), expected a string"),
              std::string::npos)
        << e.what();
  }
}

// Each file's "format" tag is read back: a checkpoint whose model file is of a
// newer layout (or another kind) is refused by the restore, named, before any
// tensor is copied; the control is the same save with the tags the trainer writes.
TEST_F(TrainTest, AFileOfAnotherFormatIsRefusedNamingItsTagAndTheOneThisAnchorReads) {
  auto c = cfg();
  train::Trainer a(c);
  a.train_step();
  std::vector<torch::Tensor> keep;
  auto with_model_tag = [&](const std::string& dir, const std::optional<std::string>& tag) {
    auto req = a.save_request(keep, {});
    for (auto& f : req.files)
      if (f.filename == "model.safetensors") {
        if (tag)
          f.metadata["format"] = *tag;
        else
          f.metadata.erase("format");
      }
    checkpoint::Store store((dir_ / dir).string());
    store.save(req);
    return *store.restore_newest();
  };
  train::Trainer b(c);
  EXPECT_NO_THROW(b.restore(with_model_tag("same", train::kModelFileFormat)));
  EXPECT_NO_THROW(b.restore(with_model_tag("untagged", std::nullopt))) << "a file without a tag is not judged";
  for (const std::string tag : {"anchor.model/v2", "anchor.model/v10", "anchor.adamw/v1", "something else"}) {
    try {
      b.restore(with_model_tag("tag-" + std::to_string(std::hash<std::string>{}(tag)), tag));
      FAIL() << "restored a model file tagged " << tag;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kVerification);
      const std::string w = e.what();
      EXPECT_NE(w.find("/model.safetensors: format " + tag + ", and this anchor reads anchor.model/v1"),
                std::string::npos)
          << w;
      EXPECT_EQ(w.find("newer anchor") != std::string::npos, tag.rfind("anchor.model/v", 0) == 0) << w;
    }
  }
  // Every name the trainer writes has its tag, and the trainer writes the tags it reads.
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "optimizer-rank00001-of-00004.safetensors",
                           "rng.safetensors", "rng-rank00000-of-00002.safetensors", "scaler.safetensors"})
    EXPECT_NE(train::expected_file_format(name), nullptr) << name;
  EXPECT_EQ(train::expected_file_format("optimizer-rank.safetensors"), nullptr);
  EXPECT_EQ(train::expected_file_format("notes.txt"), nullptr);
  for (const auto& f : a.save_request(keep, {}).files)
    EXPECT_EQ(f.metadata.at("format"), train::expected_file_format(f.filename)) << f.filename;
}

// Issue 14, 5a: a bad model.weights file (model.source: safetensors) was told
// "restore falls back to an older checkpoint" (the checkpoint reader's hint);
// it is not a checkpoint: the hint says to check, re-download or convert it.
TEST_F(TrainTest, BadWeightsFileGetsAWeightsHint) {
  auto c = cfg();
  const auto path = (dir_ / "gpt2.safetensors").string();
  std::ofstream(path, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{\"w\": [1, 2,   ", 24);
  model::Gpt m(model::GptOptions::from(c.model));
  try {
    model::load_gpt2_safetensors(m, path);
    FAIL() << "loaded a truncated weights file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_EQ(e.hint().find("falls back"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("Re-download it"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("convert it to safetensors"), std::string::npos) << e.hint();
  }
}

}  // namespace
