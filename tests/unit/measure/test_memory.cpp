// Memory accounting (the CPU counting allocator against known tensor sizes)
// and the memory model's accuracy on held-out configurations (issue 6): fit
// on the pilot's three memory points (plan::probe_shapes), then measure other micro-batches and
// sequence lengths and compare with the prediction, for each attention this
// LibTorch has. A GPU's figures behind their seam (measure::DeviceStatsSource):
// what the worker reports for one, checked without a device.
#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/plan/memory_model.hpp"
#include "anchor/train/trainer.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace anchor;

class CountingAllocator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { measure::install_counting_allocator(); }
};

TEST_F(CountingAllocator, RawAllocateWorksAndIsCounted) {
  // Allocator::raw_allocate (used by TorchScript's kernels) asserts that the
  // DataPtr's context is its data pointer; the counting allocator keeps that.
  auto* a = c10::GetCPUAllocator();
  const auto before = measure::tensor_memory("cpu").allocated_bytes;
  void* p = a->raw_allocate(1024);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(measure::tensor_memory("cpu").allocated_bytes - before, 1024);
  a->raw_deallocate(p);
  EXPECT_EQ(measure::tensor_memory("cpu").allocated_bytes, before);
}

TEST_F(CountingAllocator, CountsKnownTensorSizesExactly) {
  ASSERT_TRUE(measure::counting_allocator_installed());
  const auto before = measure::tensor_memory("cpu");
  EXPECT_EQ(before.source, "counting_allocator");
  measure::reset_peak("cpu");
  {
    auto a = torch::empty({1000}, torch::kFloat32);    // 4000 bytes
    auto b = torch::empty({10, 10}, torch::kFloat64);  // 800 bytes
    const auto during = measure::tensor_memory("cpu");
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, 4800);
    EXPECT_EQ(during.peak_allocated_bytes - before.allocated_bytes, 4800);
  }
  const auto after = measure::tensor_memory("cpu");
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << "freed tensors must be subtracted";
  EXPECT_EQ(after.peak_allocated_bytes - before.allocated_bytes, 4800) << "the peak stays until reset";
  measure::reset_peak("cpu");
  EXPECT_EQ(measure::tensor_memory("cpu").peak_allocated_bytes, after.allocated_bytes);
  // Negative control: a temporary inside an expression raises the peak, not the current.
  auto x = torch::ones({256}, torch::kFloat32);
  measure::reset_peak("cpu");
  const auto base = measure::tensor_memory("cpu").allocated_bytes;
  auto y = (x * 2 + 1).sum();  // x*2 (1 KiB) lives until +1 is computed
  EXPECT_GE(measure::tensor_memory("cpu").peak_allocated_bytes - base, 2048);
}

class MemoryPrediction : public CountingAllocator, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    std::filesystem::copy_file(std::string(ANCHOR_SOURCE_DIR) + "/data/tiny/train.txt", dir_ / "train.txt");
  }

  config::Config tiny(int micro_batch, int seq_len) {
    return config::load_string(
        "run: {threads: 1}\n"
        "model: {n_layer: 2, n_head: 4, n_embd: 64, block_size: 128, attention: " +
            GetParam() +
            "}\n"
            "data: {train: [" +
            (dir_ / "train.txt").string() + "], seq_len: " + std::to_string(seq_len) +
            "}\n"
            "train: {micro_batch: " +
            std::to_string(micro_batch) + ", grad_accum: 2, total_steps: 100}\n",
        "mem.yaml");
  }
  // A fresh trainer's second step (full optimizer state), peak reset before it:
  // how worker A measures its step at the configured shape.
  double measure_peak(int micro_batch, int seq_len) {
    train::Trainer t(tiny(micro_batch, seq_len));
    t.train_step();
    measure::reset_peak("cpu");
    t.train_step();
    return static_cast<double>(measure::tensor_memory("cpu").peak_allocated_bytes);
  }
  // As the pilot's memory probe (worker/worker.cpp, run_probe): one trainer
  // at the configured shape (4, 64), its optimizer state created without a
  // step, then each point's step; `with_state` false is the negative control.
  std::vector<double> probe_peaks(const std::vector<std::pair<int, int>>& points, bool with_state = true) {
    train::Trainer t(tiny(4, 64));
    if (with_state) t.create_optimizer_state();
    std::vector<double> out;
    for (auto [mb, T] : points) {
      t.set_step_shape(mb, T);
      measure::reset_peak("cpu");
      t.train_step();
      out.push_back(static_cast<double>(measure::tensor_memory("cpu").peak_allocated_bytes));
    }
    return out;
  }
  anchor::testing::TempDir tmp_{"mem"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_P(MemoryPrediction, HeldOutConfigurationsWithinTenPercent) {
  // The configured shape (worker A's measured step) and the probe's shapes for it: (1, 64), (4, 32).
  std::vector<plan::MemoryPoint> fit_points{{4, 64, measure_peak(4, 64)}};
  for (auto [mb, T] : plan::probe_shapes(4, 64))
    fit_points.push_back({mb, T, measure_peak(static_cast<int>(mb), static_cast<int>(T))});
  ASSERT_EQ(fit_points.size(), 3u);
  const auto fit = plan::fit_memory(fit_points);
  ASSERT_TRUE(fit.quadratic) << fit.note;

  std::printf("attention %s\n| micro_batch | seq_len | predicted MiB | measured MiB | error |\n|---|---|---|---|---|\n",
              GetParam().c_str());
  for (auto [mb, T] :
       std::vector<std::pair<int, int>>{{8, 64}, {2, 64}, {4, 16}, {6, 48}, {3, 96}, {8, 128}, {2, 16}}) {
    const double measured = measure_peak(mb, T);
    const double predicted = fit.predict(mb, T);
    const double err = (predicted - measured) / measured;
    std::printf("| %d | %d | %.3f | %.3f | %+.1f%% |\n", mb, T, predicted / 1048576.0, measured / 1048576.0, 100 * err);
    EXPECT_LE(std::abs(err), 0.10) << "micro_batch " << mb << ", seq_len " << T;
  }
  // Negative control: a weights-only estimate (what many estimators do) is far off.
  const double weights_only = fit_points[0].peak_bytes - fit.per_token * 4 * 64 - fit.per_token_seq * 4 * 64 * 64;
  EXPECT_GT(std::abs(weights_only - measure_peak(8, 64)) / measure_peak(8, 64), 0.10);
}

// The probe's steps on one trainer measure what fresh trainers' second steps
// measure, byte for byte, with no step to create the optimizer state; without
// that state the first point misses it (negative control).
TEST_P(MemoryPrediction, TheProbesStepsOnOneTrainerEqualFreshTrainersSecondSteps) {
  const std::vector<std::pair<int, int>> points{{2, 64}, {4, 32}, {3, 48}};
  const auto probed = probe_peaks(points);
  for (std::size_t i = 0; i < points.size(); ++i)
    EXPECT_EQ(probed[i], measure_peak(points[i].first, points[i].second))
        << "micro_batch " << points[i].first << ", seq_len " << points[i].second;
  EXPECT_LT(probe_peaks({points[0]}, false)[0], probed[0]);
  train::Trainer t(tiny(4, 64));
  EXPECT_THROW(t.set_step_shape(4, 65), Error) << "longer than the configured windows";
  EXPECT_THROW(t.set_step_shape(0, 8), Error);
}

// Every attention this build's LibTorch has: the written-out one everywhere,
// scaled_dot_product_attention on 2.x (no T x T score matrix kept on the CPU).
INSTANTIATE_TEST_SUITE_P(Attention, MemoryPrediction,
                         ::testing::ValuesIn(build::kLibTorchHasSdpa ? std::vector<std::string>{"manual", "sdpa"}
                                                                     : std::vector<std::string>{"manual"}),
                         [](const auto& info) { return info.param; });

// A device whose figures a test chooses, per index.
class FakeDevice final : public measure::DeviceStatsSource {
 public:
  measure::DeviceAllocatorStats read(int index) override {
    reads.push_back(index);
    measure::DeviceAllocatorStats d;
    d.allocated_bytes = 1000 + index;
    d.peak_allocated_bytes = 5000 + index;
    d.reserved_bytes = 8192;
    d.peak_reserved_bytes = 16384;
    d.total_bytes = std::int64_t{80} << 30;
    d.free_bytes = std::int64_t{79} << 30;
    return d;
  }
  void reset_peak(int index) override { resets.push_back(index); }
  std::vector<int> reads, resets;
};

TEST(DeviceStats, AGpusFiguresReachTheWorkersMemoryReport) {
  FakeDevice fake;
  measure::set_device_stats_source(&fake);
  measure::reset_peak("cuda:3");
  const auto m = measure::tensor_memory("cuda:3");
  const auto cpu = measure::tensor_memory("cpu");  // the CPU never asks the device
  measure::set_device_stats_source(nullptr);

  EXPECT_EQ(fake.resets, std::vector<int>{3});
  EXPECT_EQ(fake.reads, std::vector<int>{3});
  EXPECT_EQ(m.source, "cuda_caching_allocator");
  EXPECT_EQ(m.peak_allocated_bytes, 5003);
  EXPECT_EQ(cpu.source, "counting_allocator");
  EXPECT_EQ(cpu.reserved_bytes, -1);

  measure::ProcMemory proc;
  proc.rss_bytes = 300;
  proc.hwm_bytes = 400;
  const auto j = measure::memory_json(m, proc);
  EXPECT_EQ(j["allocated_bytes"], 1003);
  EXPECT_EQ(j["peak_allocated_bytes"], 5003);
  EXPECT_EQ(j["reserved_bytes"], 8192);
  EXPECT_EQ(j["peak_reserved_bytes"], 16384);
  EXPECT_EQ(j["device_total_bytes"], std::int64_t{80} << 30);
  EXPECT_EQ(j["device_free_bytes"], std::int64_t{79} << 30);
  EXPECT_EQ(j["peak_rss_bytes"], 400);
  EXPECT_EQ(j["source"], "cuda_caching_allocator");
  // The CPU's report has no reserved or device figures at all.
  const auto jc = measure::memory_json(cpu, proc);
  EXPECT_FALSE(jc.contains("reserved_bytes"));
  EXPECT_FALSE(jc.contains("device_total_bytes"));
  // nullptr restored this build's own source: c10's allocator in a CUDA build, none otherwise.
  EXPECT_EQ(measure::device_stats_source() != nullptr, build::kLibTorchHasCuda);
}

}  // namespace
