// The ZeRO partition (train/zero.hpp): whole parameters, deterministic,
// balanced, every parameter owned by exactly one rank.
#include <gtest/gtest.h>

#include <numeric>

#include "anchor/train/zero.hpp"

namespace {

using anchor::train::partition_parameters;

TEST(ZeroPartition, BalancedDeterministicAndComplete) {
  const std::vector<std::int64_t> numels = {8192, 64, 64, 4096, 4096, 32, 32, 2048, 2048, 8192};
  const auto a = partition_parameters(numels, 2);
  EXPECT_EQ(a, partition_parameters(numels, 2));  // the same on every rank
  std::int64_t load[2] = {0, 0};
  for (std::size_t i = 0; i < numels.size(); ++i) {
    ASSERT_GE(a[i], 0);
    ASSERT_LT(a[i], 2);
    load[a[i]] += numels[i];
  }
  EXPECT_EQ(load[0] + load[1], std::accumulate(numels.begin(), numels.end(), std::int64_t{0}));
  EXPECT_EQ(load[0], load[1]);  // 14336 each: largest-first reaches the even split here
  // One rank owns everything; more ranks than parameters leaves some empty.
  for (int o : partition_parameters(numels, 1)) EXPECT_EQ(o, 0);
  const auto many = partition_parameters({5, 3}, 4);
  EXPECT_EQ(many, (std::vector<int>{0, 1}));
}

// Negative control of the balance claim: the largest parameter bounds it.
TEST(ZeroPartition, TheLargestParameterBoundsTheBalance) {
  const auto a = partition_parameters({100, 1, 1, 1}, 2);
  EXPECT_EQ(a, (std::vector<int>{0, 1, 1, 1}));
}

}  // namespace
