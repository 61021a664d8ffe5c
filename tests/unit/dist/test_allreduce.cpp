// The all-reduce's latency and bus bandwidth from its timings (src/dist/allreduce.cpp).
#include "anchor/dist/allreduce.hpp"

#include <gtest/gtest.h>

namespace {

using anchor::dist::AllReduceTiming;

// Times made from a known line: 50 us + bytes / 10 GB/s algorithm bandwidth.
std::vector<AllReduceTiming> line(int ranks, double latency, double busbw) {
  std::vector<AllReduceTiming> out;
  for (const auto b : anchor::dist::allreduce_probe_sizes())
    out.push_back({b, latency + static_cast<double>(b) * anchor::dist::bus_factor(ranks) / busbw});
  return out;
}

TEST(AllReduceFit, RecoversTheLineItWasMadeFrom) {
  for (const int ranks : {2, 3, 8}) {
    const auto fit = anchor::dist::fit_allreduce(line(ranks, 50e-6, 10e9), ranks);
    EXPECT_NEAR(fit.latency_s, 50e-6 + 4096 * anchor::dist::bus_factor(ranks) / 10e9, 1e-12);
    EXPECT_NEAR(fit.busbw_bytes_per_s, 10e9, 1e3);
  }
  EXPECT_DOUBLE_EQ(anchor::dist::bus_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(anchor::dist::bus_factor(4), 1.5);
}

// A small size slowed by the scheduler does not become the latency.
TEST(AllReduceFit, TheQuickestSizeIsTheLatency) {
  auto t = line(2, 500e-6, 1e9);
  t[0].seconds = 3.5e-3;  // 4 KiB: a rank that was not on a core
  const auto fit = anchor::dist::fit_allreduce(t, 2);
  EXPECT_NEAR(fit.latency_s, t[1].seconds, 1e-12);
  EXPECT_NEAR(fit.busbw_bytes_per_s, 1e9, 1e9 * 0.01);
}

TEST(AllReduceFit, TheProbesFiguresCarryTheFit) {
  const auto j = anchor::dist::allreduce_json(line(2, 1e-4, 2e9), 2, "gloo", 5);
  EXPECT_EQ(j["kind"], "MEASURED");
  EXPECT_NEAR(j["busbw_gb_per_s"].get<double>(), 2.0, 1e-6);
  EXPECT_EQ(j["sizes"].size(), 5u);
}

}  // namespace
