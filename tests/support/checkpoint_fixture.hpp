#pragma once
// Shared by the checkpoint tests and tests/support/ckpt_saver.cpp: a temp
// root and deterministic checkpoint content (values are a function of step
// and index, so a restored tensor can be checked against the step it claims).
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "support/temp_dir.hpp"

#if defined(GOOGLETEST_INCLUDE_GTEST_GTEST_H_) || defined(GTEST_INCLUDE_GTEST_GTEST_H_)
#define ANCHOR_CKPT_FIXTURE_GTEST 1
#endif

namespace anchor::test {

inline float tensor_value(std::int64_t step, std::int64_t i) {
  return static_cast<float>(step) * 1000.0f + static_cast<float>(i % 997) * 0.5f;
}

// Buffers are kept (keyed by step and size) until tensor_cache().clear().
inline std::map<std::tuple<std::int64_t, std::int64_t, int>, std::unique_ptr<std::vector<float>>>& tensor_cache() {
  static std::map<std::tuple<std::int64_t, std::int64_t, int>, std::unique_ptr<std::vector<float>>> cache;
  return cache;
}
inline const std::vector<float>& tensor_buffer(std::int64_t step, std::int64_t n, int which) {
  auto& slot = tensor_cache()[{step, n, which}];
  if (!slot) {
    slot = std::make_unique<std::vector<float>>(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) (*slot)[i] = tensor_value(step, i) + static_cast<float>(which);
  }
  return *slot;
}

// model.safetensors {w: F32[n] = tensor_value(step, i), b: I64[3]},
// optimizer.safetensors {w.exp_avg: F32[n/4 + 1]}, state {"lr": 0.5}.
inline checkpoint::SaveRequest make_request(std::int64_t step, std::int64_t n) {
  using checkpoint::DType;
  static const std::int64_t kB[3] = {1, -2, 3};
  const auto& w = tensor_buffer(step, n, 0);
  const std::int64_t m = n / 4 + 1;
  const auto& ea = tensor_buffer(step, m, 1);
  checkpoint::SaveRequest r;
  r.step = step;
  r.files.push_back({"model.safetensors",
                     {{"w", DType::F32, {n}, w.data(), w.size() * 4}, {"b", DType::I64, {3}, kB, 24}},
                     {{"kind", "model"}}});
  r.files.push_back({"optimizer.safetensors", {{"w.exp_avg", DType::F32, {m}, ea.data(), ea.size() * 4}}, {}});
  r.state = {{"lr", 0.5}, {"data_cursor", step}};
  return r;
}

#ifdef ANCHOR_CKPT_FIXTURE_GTEST
class CheckpointDir : public ::testing::Test {
 protected:
  std::string root() const { return (dir_ / "ckpt").string(); }
  anchor::testing::TempDir tmp_{"ckpt"};
  const std::filesystem::path& dir_ = tmp_.path();
};
#endif

}  // namespace anchor::test
