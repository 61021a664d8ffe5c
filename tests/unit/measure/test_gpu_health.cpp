// A GPU node's health (src/measure/gpu_health.cpp): the Xid lines of the
// kernel log, as /dev/kmsg writes its records and as a plain file holds them,
// and what is said where NVML does not open.
#include "anchor/measure/gpu_health.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "support/temp_dir.hpp"

namespace {

using anchor::measure::gpu_health;
using anchor::measure::xid_lines;

TEST(GpuHealth, FindsTheDriversXidLinesAndNothingElse) {
  anchor::testing::TempDir t("xid");
  const std::string log = t.str("kmsg");
  {
    std::ofstream o(log);
    o << "6,1200,5000000,-;usb 1-1: new high-speed USB device\n"
      << "4,1201,5100000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
      << "6,1202,5200000,-;eth0: link up\n"
      << "NVRM: Xid (PCI:0000:86:00): 48, pid=99, An uncorrectable double bit error\n";
  }
  std::string why;
  const auto found = xid_lines(log, why);
  EXPECT_TRUE(why.empty()) << why;
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0], "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.");
  EXPECT_EQ(found[1], "NVRM: Xid (PCI:0000:86:00): 48, pid=99, An uncorrectable double bit error");
  // The control: a log without the driver's lines has none.
  const std::string clean = t.str("clean");
  std::ofstream(clean) << "6,1,1,-;eth0: link up\n6,2,2,-;NVRM: loading NVIDIA UNIX Open Kernel Module\n";
  EXPECT_TRUE(xid_lines(clean, why).empty());
}

TEST(GpuHealth, KeepsTheLastTwentyXids) {
  anchor::testing::TempDir t("xid-many");
  const std::string log = t.str("kmsg");
  {
    std::ofstream o(log);
    for (int i = 0; i < 50; ++i) o << "4," << i << ",0,-;NVRM: Xid (PCI:0000:3b:00): 13, n=" << i << "\n";
  }
  std::string why;
  const auto found = xid_lines(log, why);
  ASSERT_EQ(found.size(), 20u);
  EXPECT_EQ(found.back(), "NVRM: Xid (PCI:0000:3b:00): 13, n=49");
  EXPECT_EQ(found.front(), "NVRM: Xid (PCI:0000:3b:00): 13, n=30");
}

TEST(GpuHealth, ALogItCannotReadIsSaidNotPassed) {
  std::string why;
  EXPECT_TRUE(xid_lines("/nonexistent/kmsg", why).empty());
  EXPECT_NE(why.find("/nonexistent/kmsg: No such file or directory"), std::string::npos) << why;
}

TEST(GpuHealth, WithoutNvmlItSaysSoAndReadsNothingElse) {
  const auto h = gpu_health("libnvidia-ml-not-here.so.1", "/nonexistent");
  ASSERT_TRUE(h.contains("skipped")) << h.dump();
  EXPECT_NE(h["skipped"].get<std::string>().find("libnvidia-ml-not-here.so.1 could not be opened"), std::string::npos);
  EXPECT_FALSE(h.contains("failures"));
}

// Through an NVML that answers (support/fake_nvml.cpp, a stand-in where no
// driver is): a healthy GPU has no failures (the control); each fault the
// preflight must not start on is a failure naming the GPU; what costs speed
// is a warning.
class FakeNvml : public ::testing::Test {
 protected:
  nlohmann::json health(const std::string& state, const std::string& kmsg = "/nonexistent") {
    ::setenv("ANCHOR_FAKE_NVML", state.c_str(), 1);
    auto h = gpu_health(FAKE_NVML, kmsg);
    ::unsetenv("ANCHOR_FAKE_NVML");
    return h;
  }
};

TEST_F(FakeNvml, AHealthyGpuHasNoFailures) {
  const auto h = health("name=Fake A100,links=12/0");
  ASSERT_FALSE(h.contains("skipped")) << h.dump();
  EXPECT_EQ(h["driver"], "999.99-fake");
  ASSERT_EQ(h["devices"].size(), 1u);
  const auto& d = h["devices"][0];
  EXPECT_EQ(d["name"], "Fake A100");
  EXPECT_EQ(d["ecc_uncorrected"], 0);
  EXPECT_EQ(d["retired_pages_pending"], false);
  EXPECT_EQ(d["sm_clock_mhz"], 1410);
  EXPECT_EQ(d["max_sm_clock_mhz"], 1980);
  EXPECT_EQ(d["pcie"]["width"], 16);
  EXPECT_EQ(d["nvlinks_active"], 12);
  EXPECT_TRUE(h["failures"].empty()) << h["failures"];
  EXPECT_TRUE(h["warnings"].empty()) << h["warnings"];
  EXPECT_EQ(h["xid_read"].get<std::string>().rfind("not read: /nonexistent", 0), 0u);
}

TEST_F(FakeNvml, EachFaultIsAFailureNamingTheGpu) {
  auto h = health("name=Fake H100,ecc=3");
  ASSERT_EQ(h["failures"].size(), 1u) << h.dump();
  EXPECT_EQ(h["failures"][0], "GPU 0 (Fake H100): 3 uncorrected ECC errors since the driver loaded");
  h = health("pending=1");
  EXPECT_NE(h["failures"][0].get<std::string>().find("retired memory pages pending"), std::string::npos);
  h = health("reasons=0x48");  // hardware slowdown + hardware thermal slowdown
  ASSERT_EQ(h["failures"].size(), 2u) << h.dump();
  EXPECT_EQ(h["devices"][0]["clock_limits"], nlohmann::json({"hardware slowdown", "hardware thermal slowdown"}));
  // An Xid in the kernel log fails the node too.
  anchor::testing::TempDir t("xid-fail");
  std::ofstream(t.str("kmsg")) << "4,9,9,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n";
  std::ofstream(t.str("kmsg"), std::ios::app)
      << "4,10,10,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=77, Graphics Exception\n";
  h = health("", t.str("kmsg"));
  ASSERT_EQ(h["failures"].size(), 1u) << h.dump();
  EXPECT_EQ(h["failures"][0], "the driver logged NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
  // Xid 13, an application's fault: a warning, not the node's failure.
  ASSERT_EQ(h["warnings"].size(), 1u) << h.dump();
  EXPECT_NE(h["warnings"][0].get<std::string>().find("(Xid 13: an application's fault"), std::string::npos);
}

TEST_F(FakeNvml, WhatCostsSpeedIsAWarning) {
  const auto h = health("width=8/16,links=10/2,reasons=0x20");
  EXPECT_TRUE(h["failures"].empty()) << h["failures"];
  ASSERT_EQ(h["warnings"].size(), 3u) << h["warnings"];
  EXPECT_EQ(h["warnings"][0], "GPU 0 (Fake GPU): clocks held down by software thermal slowdown");
  EXPECT_EQ(h["warnings"][1], "GPU 0 (Fake GPU): PCIe link x8 of x16: host transfers run at 50%");
  EXPECT_EQ(h["warnings"][2], "GPU 0 (Fake GPU): 2 of 12 NVLinks down: peer traffic takes the others, or PCIe");
}

TEST_F(FakeNvml, ADriverThatDoesNotInitialiseIsSkippedAndSaysWhy) {
  const auto h = health("init=9");
  EXPECT_EQ(h["skipped"], "nvmlInit failed: Driver Not Loaded");
}

}  // namespace
