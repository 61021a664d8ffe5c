// Memory accounting (the CPU counting allocator against known tensor sizes)
// and the memory model's accuracy on held-out configurations (issue 6): fit
// on the pilot's three probe points, then measure other micro-batches and
// sequence lengths and compare with the prediction.
#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/measure/memory.hpp"
#include "anchor/plan/memory_model.hpp"
#include "anchor/train/trainer.hpp"

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
    auto a = torch::empty({1000}, torch::kFloat32);   // 4000 bytes
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

class MemoryPrediction : public CountingAllocator {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("anchor-mem-" + std::to_string(::getpid()) + "-" + fs::random_suffix());
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(std::string(ANCHOR_SOURCE_DIR) + "/data/tiny/train.txt", dir_ / "train.txt");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // As the pilot's probe: a fresh trainer's second step (full optimizer state), peak reset before it.
  double measure_peak(int micro_batch, int seq_len) {
    auto c = config::load_string("run: {threads: 1}\n"
                                 "model: {n_layer: 2, n_head: 4, n_embd: 64, block_size: 128}\n"
                                 "data: {train: [" + (dir_ / "train.txt").string() + "], seq_len: " +
                                     std::to_string(seq_len) + "}\n"
                                 "train: {micro_batch: " + std::to_string(micro_batch) +
                                     ", grad_accum: 2, total_steps: 100}\n",
                                 "mem.yaml");
    train::Trainer t(c);
    t.train_step();
    measure::reset_peak("cpu");
    t.train_step();
    return static_cast<double>(measure::tensor_memory("cpu").peak_allocated_bytes);
  }
  std::filesystem::path dir_;
};

TEST_F(MemoryPrediction, HeldOutConfigurationsWithinTenPercent) {
  std::vector<plan::MemoryPoint> fit_points;
  for (auto [mb, T] : std::vector<std::pair<int, int>>{{4, 64}, {2, 64}, {4, 32}})
    fit_points.push_back({mb, T, measure_peak(mb, T)});
  const auto fit = plan::fit_memory(fit_points);
  ASSERT_TRUE(fit.quadratic) << fit.note;

  std::printf("| micro_batch | seq_len | predicted MiB | measured MiB | error |\n|---|---|---|---|---|\n");
  for (auto [mb, T] : std::vector<std::pair<int, int>>{{8, 64}, {1, 64}, {6, 48}, {3, 96}, {8, 128}, {2, 16}}) {
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

}  // namespace
