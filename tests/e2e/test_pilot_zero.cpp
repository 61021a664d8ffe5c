// End-to-end: `anchor pilot --nproc-per-node 2` with distributed.strategy
// zero1 / zero2 (docs/distributed.md, "Sharded strategies"): every rank writes
// its optimizer shard and RNG file into the commit, the kill stage kills every
// rank, each rank restores its shard and resumes bitwise; the report gives each
// rank's optimizer (and gradient) bytes next to DDP's.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

using anchor::testing::read_json;

class PilotZero : public ::testing::TestWithParam<std::string> {};

TEST_P(PilotZero, TwoRanksPassWithBitwiseResumeAndShardedState) {
  const std::string strategy = GetParam();
  TempDir t("pilot" + strategy);
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set",
                       "distributed.strategy=" + strategy});
  ASSERT_EQ(r.status, 0) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(report["resume"]["per_rank"][rank]["verdict"], "match");

  // Each rank's shard, each rank's RNG file, the model once; no replicated optimizer file.
  const std::string c = t.str("run/checkpoints/step-00000002/");
  for (const char* f : {"COMMITTED", "model.safetensors", "optimizer-rank00000-of-00002.safetensors",
                        "optimizer-rank00001-of-00002.safetensors", "rng-rank00000-of-00002.safetensors",
                        "rng-rank00001-of-00002.safetensors", "scaler.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(c + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(c + "optimizer.safetensors"));
  // The files above but COMMITTED, plus state.json (the loss scaler's file is written once, by rank 0).
  EXPECT_EQ(read_json(c + "manifest.json")["files"].size(), 7u);

  // The memory saving, per rank, in the report.
  const auto& d = report["distributed"];
  EXPECT_EQ(d["strategy"], strategy);
  ASSERT_EQ(d["per_rank"].size(), 2u) << d.dump(2);
  std::int64_t sum = 0;
  for (const auto& row : d["per_rank"]) {
    std::cout << strategy << " rank " << row["rank"] << ": optimizer " << row["optimizer_bytes"] << " of "
              << row["optimizer_bytes_ddp"] << " bytes, gradients " << row["gradient_bytes"] << " of "
              << row["gradient_bytes_ddp"] << ", comm_s " << row["comm_s"] << "\n";
    EXPECT_LT(row["optimizer_bytes"].get<std::int64_t>(), row["optimizer_bytes_ddp"].get<std::int64_t>());
    if (strategy == "zero2")
      EXPECT_LT(row["gradient_bytes"].get<std::int64_t>(), row["gradient_bytes_ddp"].get<std::int64_t>());
    else
      EXPECT_EQ(row["gradient_bytes"], row["gradient_bytes_ddp"]);
    EXPECT_GT(row["comm_s"].get<double>(), 0.0);
    sum += row["optimizer_bytes"].get<std::int64_t>();
  }
  EXPECT_EQ(sum, d["per_rank"][0]["optimizer_bytes_ddp"].get<std::int64_t>());
  EXPECT_NE(anchor::fs::read_file(t.str("run/report.md")).find("## Ranks"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Strategy, PilotZero, ::testing::Values("zero1", "zero2"),
                         [](const auto& info) { return info.param; });

// Rank 1 of the reference worker SIGKILLs itself in the first save (step 2),
// after writing its shard, before reporting it: rank 0 fails naming rank 1, the
// pilot fails in checkpoint_save, and nothing is committed.
TEST(PilotZeroKill, KillingOneRankInTheSaveFailsNamingItWithoutACommit) {
  TempDir t("pilotzkill");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set",
                       "distributed.strategy=zero1", "--set", "distributed.timeout_s=20"},
                      {{"ANCHOR_DIST_FAULT", "sigkill_save:1:2"}});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 did not answer (dead or hung)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pilot failed in stage checkpoint_save"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/COMMITTED")));
}

}  // namespace
