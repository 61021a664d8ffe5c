// End-to-end: a signed pilot, then `anchor reproduce` from its report —
// bitwise when nothing drifted, and a named drift when a data shard changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

using anchor::testing::read_json;

class Reproduce : public ::testing::Test {
 protected:
  void SetUp() override {
    // The data lives in the temp dir so the drift case can change it.
    std::filesystem::copy_file(source_path("data/tiny/train.txt"), t_.str("train.txt"));
    std::filesystem::copy_file(source_path("data/tiny/val.txt"), t_.str("val.txt"));
    ASSERT_EQ(run_anchor({"keygen", "-o", t_.str("keys")}).status, 0);
    auto r = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t_.str("orig"), "--set",
                         "data.train=[" + t_.str("train.txt") + "]", "--set", "data.val=[" + t_.str("val.txt") + "]",
                         "--set", "report.signing_key=" + t_.str("keys/anchor.key")});
    ASSERT_EQ(r.status, 0) << r.output;
  }
  TempDir t_{"repro"};
};

TEST_F(Reproduce, ReproducesBitwiseAndLinksTheOriginal) {
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no drift"), std::string::npos) << r.output;
  auto rep = read_json(t_.str("again/report.json"));
  EXPECT_EQ(rep["reproduction"]["verdict"], "reproduced");
  EXPECT_EQ(rep["reproduction"]["mode"], "bitwise");
  EXPECT_GT(rep["reproduction"]["checks"].size(), 10u);
  EXPECT_EQ(rep["reproduces"]["run_id"], read_json(t_.str("orig/report.json"))["run_id"]);
  EXPECT_TRUE(rep["reproduces"]["verified"].get<bool>());
  EXPECT_TRUE(rep["reproduces"]["drift"].empty());
  // The re-run is signed with the recorded key too and verifies on its own.
  EXPECT_EQ(run_anchor({"verify", t_.str("again/report.intoto.json"), "--key", t_.str("keys/anchor.pub")}).status, 0);
}

TEST_F(Reproduce, AChangedDataShardIsNamedAndRefusedWithoutAllowDrift) {
  {
    std::ofstream f(t_.str("train.txt"), std::ios::app);
    f << "one more sentence changes the shard.";
  }
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("train.txt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--allow-drift"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t_.str("again/report.json")));

  auto d = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("drifted"), "--allow-drift"});
  auto rep = read_json(t_.str("drifted/report.json"));
  EXPECT_TRUE(rep["reproduces"]["allow_drift"].get<bool>());
  ASSERT_FALSE(rep["reproduces"]["drift"].empty());
  EXPECT_EQ(rep["reproduction"]["mode"], "tolerance");
  // Changed data means other batches: the re-run differs, and says so (exit 3).
  EXPECT_EQ(d.status, 3) << d.output;
  EXPECT_EQ(rep["reproduction"]["verdict"], "differs");
}

TEST_F(Reproduce, AnUnsignedReportIsRefusedUnlessAllowed) {
  auto r = run_anchor({"reproduce", t_.str("orig/report.json"), "--run-dir", t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("unsigned"), std::string::npos) << r.output;
  auto ok = run_anchor({"reproduce", t_.str("orig/report.json"), "--allow-unsigned", "--run-dir", t_.str("again")});
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_FALSE(read_json(t_.str("again/report.json"))["reproduces"]["verified"].get<bool>());
}

TEST_F(Reproduce, ATamperedReportIsNotReproduced) {
  auto env = read_json(t_.str("orig/report.intoto.json"));
  env["payloadType"] = "application/json";
  anchor::fs::atomic_write_file(t_.str("orig/report.intoto.json"), env.dump());
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("does not verify"), std::string::npos) << r.output;
}

}  // namespace
