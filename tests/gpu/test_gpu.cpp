// What only a GPU can show (ctest label `gpu`; docs/development.md, "GPU
// nodes"): autocast lowering on CUDA, the fp16 loss scaler on a real step,
// the caching allocator's figures as anchor reads them against c10's own,
// scaled_dot_product_attention against the written-out attention on the
// device, a one-rank NCCL group, and the whole pilot with device: cuda.
// Every test skips with the checked reason where no CUDA device is usable;
// scripts/gpu-check.sh runs them on a GPU node.
#include <gtest/gtest.h>
#include <torch/torch.h>
#if defined(ANCHOR_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cmath>
#include <filesystem>
#include <fstream>

#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/model/gpt.hpp"
#include "anchor/plan/memory_model.hpp"
#include "anchor/train/precision.hpp"
#include "anchor/train/trainer.hpp"
#include "support/gpu.hpp"
#include "support/run_anchor.hpp"

namespace {

using namespace anchor;
using anchor::testing::TempDir;

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; text.size() < 400000; ++i)
      text += "a gpu step of the pilot " + std::to_string(i * 7919 % 1000) + ". ";
    std::ofstream(dir_.str("train.txt")) << text;
  }
  config::Config cfg(const std::string& train_extra, const std::string& model_extra = "") const {
    return config::load_string(
        "run: {seed: 7, threads: 1}\n"
        "model: {n_layer: 2, n_head: 4, n_embd: 64, block_size: 64, dropout: 0.1" +
            model_extra +
            "}\n"
            "data: {train: [" +
            dir_.str("train.txt") +
            "], seq_len: 64, val_fraction: 0.1}\n"
            "train: {micro_batch: 4, grad_accum: 1, total_steps: 100" +
            train_extra + "}\ndevice: cuda\n",
        "gpu.yaml");
  }
  // A CUDA config of the model `model` (a YAML flow mapping's body) at this
  // micro-batch, sequence length and accumulation.
  config::Config shaped(const std::string& model, int micro_batch, int seq_len, int grad_accum) const {
    return config::load_string(
        "run: {seed: 7, threads: 1}\nmodel: {" + model + "}\ndata: {train: [" + dir_.str("train.txt") + "], seq_len: " +
            std::to_string(seq_len) + ", val_fraction: 0.1}\ntrain: {micro_batch: " + std::to_string(micro_batch) +
            ", grad_accum: " + std::to_string(grad_accum) + ", total_steps: 100}\ndevice: cuda\n",
        "gpu.yaml");
  }
  TempDir dir_{"gpu"};
};

TEST_F(Gpu, AutocastGuardLowersToBf16AndFp16OnCuda) {
  ANCHOR_SKIP_WITHOUT_GPU();
  auto a = torch::randn({4, 4}, torch::kCUDA), b = torch::randn({4, 4}, torch::kCUDA);
  {
    train::AutocastGuard g(train::Precision::kFp16, /*cuda=*/true);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kHalf);
  }
  {
    train::AutocastGuard g(train::Precision::kBf16, true);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat32);
}

TEST_F(Gpu, Fp16StepValidatesAndScales) {
  ANCHOR_SKIP_WITHOUT_GPU();
  train::Trainer t(cfg(", precision: fp16"));
  ASSERT_TRUE(t.loss_scaler().enabled());  // auto: on for fp16
  auto v = t.validate_precision(0.05);
  EXPECT_NE(v["verdict"], "non_finite") << v.dump(2);
  EXPECT_GT(v["loss"]["rel_diff"].get<double>(), 0.0);
  auto r = t.train_step();
  EXPECT_EQ(r.loss_scale, 65536.0);
  EXPECT_TRUE(std::isfinite(r.loss));
}

#if defined(ANCHOR_WITH_CUDA)
// The figures anchor reports for a step are c10's own counters (those
// torch.cuda.max_memory_allocated() reads), for the trainer's device.
TEST_F(Gpu, StepMemoryIsTheCachingAllocatorsOwn) {
  ANCHOR_SKIP_WITHOUT_GPU();
  train::Trainer t(cfg(""));
  t.train_step();  // optimizer state appears
  measure::reset_peak(t.device());
  t.train_step();
  const auto m = measure::tensor_memory(t.device());
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(torch::Device(t.device()).index());
  EXPECT_EQ(m.source, "cuda_caching_allocator");
  EXPECT_EQ(m.peak_allocated_bytes, s.allocated_bytes[0].peak);
  EXPECT_EQ(m.peak_reserved_bytes, s.reserved_bytes[0].peak);
  EXPECT_GE(m.peak_reserved_bytes, m.peak_allocated_bytes);
  EXPECT_GT(static_cast<double>(m.peak_allocated_bytes), t.state_bytes().parameters * 4);  // + grads, 2 Adam moments
  EXPECT_GT(m.device_total_bytes, m.peak_reserved_bytes);
}
#endif

// On the device the fused kernels (flash / memory-efficient) run: the same
// forward and gradients as the written-out attention within fp32 tolerance.
TEST_F(Gpu, SdpaMatchesManualAttentionOnCuda) {
  ANCHOR_SKIP_WITHOUT_GPU();
  if (!compat::kHasSdpa)
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << " has no scaled_dot_product_attention";
  auto run = [&](const std::string& attention) {
    auto c = cfg("", ", dropout: 0, attention: " + attention);
    torch::manual_seed(11);
    model::Gpt m(model::GptOptions::from(c.model));
    m->to(torch::kCUDA);
    auto x = torch::randint(0, 256, {4, 64}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
    auto loss = m->loss(x, x.roll(1, 1));
    loss.backward();
    return std::make_pair(loss.item<double>(), m->named_parameters()["h.0.attn.c_attn.weight"].grad().cpu());
  };
  const auto [l_manual, g_manual] = run("manual");
  const auto [l_sdpa, g_sdpa] = run("sdpa");
  EXPECT_NEAR(l_sdpa, l_manual, 1e-4 * std::abs(l_manual));
  EXPECT_TRUE(torch::allclose(g_sdpa, g_manual, 1e-3, 1e-5)) << (g_sdpa - g_manual).abs().max().item<double>();
}

// The memory model on the device: fitted on three measured steps, the
// configured shape's and plan::probe_shapes' as the pilot fits them, it
// predicts two held-out (micro-batch, seq) points within 10%. The figures go to scripts/gpu_check.py on a marked line.
TEST_F(Gpu, MemoryModelPredictsHeldOutPointsWithinTenPercent) {
  ANCHOR_SKIP_WITHOUT_GPU();
  auto peak = [&](int mb, int seq) {
    auto c = shaped("n_layer: 4, n_head: 8, n_embd: 512, block_size: 1024, dropout: 0.1", mb, seq, 1);
    train::Trainer t(c);
    t.train_step();  // optimizer state appears
    measure::reset_peak(t.device());
    t.train_step();
    return static_cast<double>(measure::tensor_memory(t.device()).peak_allocated_bytes);
  };
  std::vector<plan::MemoryPoint> fit_points{{8, 512, peak(8, 512)}};
  for (auto [mb, seq] : plan::probe_shapes(8, 512))
    fit_points.push_back({mb, seq, peak(static_cast<int>(mb), static_cast<int>(seq))});
  const auto fit = plan::fit_memory(fit_points);
  nlohmann::json points = nlohmann::json::array();
  for (auto [mb, seq] : std::vector<std::pair<int, int>>{{16, 512}, {4, 1024}}) {
    const double measured = peak(mb, seq), predicted = fit.predict(mb, seq);
    const double err = (predicted - measured) / measured;
    points.push_back({{"micro_batch", mb},
                      {"seq_len", seq},
                      {"predicted_bytes", predicted},
                      {"measured_bytes", measured},
                      {"error", err}});
    EXPECT_LE(std::abs(err), 0.10) << "micro_batch " << mb << ", seq_len " << seq;
  }
  std::printf(
      "ANCHOR_GPU_CHECK %s\n",
      nlohmann::json({{"check", "memory_model"},
                      {"quadratic", fit.quadratic},
                      {"attention", model::attention_name(model::GptOptions::from(config::ModelConfig{}).attention)},
                      {"held_out", points}})
          .dump()
          .c_str());
}

// The probe's steps on one trainer (its AdamW state created without a step,
// the cache emptied before each point, as worker/worker.cpp's run_probe
// does) peak where fresh trainers' second steps peak, on the caching
// allocator as on the CPU's counting one (tests/unit/measure/test_memory.cpp).
TEST_F(Gpu, TheProbesStepsOnOneTrainerEqualFreshTrainersSecondSteps) {
  ANCHOR_SKIP_WITHOUT_GPU();
  const auto cfg = [&](int mb, int seq) {
    return shaped("n_layer: 2, n_head: 4, n_embd: 128, block_size: 256", mb, seq, 2);
  };
  const auto fresh_second_step = [&](int mb, int seq) {
    train::Trainer t(cfg(mb, seq));
    t.train_step();
    measure::release_cached(t.device());
    measure::reset_peak(t.device());
    t.train_step();
    return measure::tensor_memory(t.device()).peak_allocated_bytes;
  };
  const auto shapes = plan::probe_shapes(8, 256);
  std::vector<std::int64_t> probed;
  {  // gone before the fresh trainers: the device's peak counts every allocation on it
    train::Trainer t(cfg(8, 256));
    t.create_optimizer_state();
    for (auto [mb, seq] : shapes) {
      t.set_step_shape(static_cast<int>(mb), static_cast<int>(seq));
      measure::release_cached(t.device());
      measure::reset_peak(t.device());
      t.train_step();
      probed.push_back(measure::tensor_memory(t.device()).peak_allocated_bytes);
    }
  }
  for (std::size_t i = 0; i < shapes.size(); ++i)
    EXPECT_EQ(probed[i], fresh_second_step(static_cast<int>(shapes[i].first), static_cast<int>(shapes[i].second)))
        << "micro_batch " << shapes[i].first << ", seq_len " << shapes[i].second;
}

TEST_F(Gpu, OneRankNcclGroupAllReduces) {
  ANCHOR_SKIP_WITHOUT_GPU();
  if (!dist::nccl_available()) GTEST_SKIP() << "this build has no ProcessGroupNCCL (ANCHOR_NCCL)";
  dist::LaunchEnv env;
  env.master_port = dist::free_port();
  dist::ProcessGroup pg(env, 60, "nccl");
  EXPECT_EQ(pg.backend(), "nccl");
  auto t = torch::full({1024}, 3.0, torch::TensorOptions().device(torch::kCUDA));
  pg.allreduce_sum(t, "gpu test");
  EXPECT_EQ(t.sum().item<double>(), 3.0 * 1024);
  pg.barrier("gpu test");
}

// The embedded default with device: cuda, end to end: the resume verdict,
// the allocator's figures in the report, and the GPU runtime pins.
TEST_F(Gpu, DefaultPilotPassesOnCuda) {
  ANCHOR_SKIP_WITHOUT_GPU();
  const auto run = anchor::testing::run_anchor({"pilot", anchor::testing::source_path("configs/pilot.yaml"), "--set",
                                                "device=cuda", "--run-dir", dir_.str("run")});
  ASSERT_EQ(run.status, 0) << run.output;
  const auto report = anchor::testing::read_json(dir_.path() / "run" / "report.json");
  EXPECT_EQ(report["status"], "passed") << report.dump(2);
  EXPECT_EQ(report["measurements"]["memory"]["source"], "cuda_caching_allocator");
  EXPECT_GT(report["measurements"]["memory"]["device_total_bytes"].get<double>(), 0);
  const auto manifest = anchor::testing::read_json(dir_.path() / "run" / "manifest.json");
  const auto& deps = manifest["dependencies"];
  for (const char* k : {"cuda_runtime", "cuda_driver", "cudnn", "nccl"})
    EXPECT_NE(deps.value(k, "none"), "none") << k << " in " << deps.dump(2);
  EXPECT_EQ(manifest["device"]["accelerator"], "cuda") << manifest["device"].dump(2);
}

}  // namespace
