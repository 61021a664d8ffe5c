// End-to-end: `anchor plan` on a synthetic report.json and on a DSSE envelope
// around it, with --set overrides and the shipped catalog.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "anchor/common/process.hpp"
#include "anchor/report/dsse.hpp"
#include "unit/plan/synthetic_report.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;

class PlanCli : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp{"e2e-plan"};
  const stdfs::path& dir = tmp.path();
  std::string catalog = std::string(ANCHOR_SOURCE_DIR) + "/configs/catalog.yaml";

  void SetUp() override { write(dir / "report.json", anchor::plan::synthetic::synthetic_report().dump(2)); }
  static void write(const stdfs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  anchor::proc::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), ANCHOR_BINARY);
    anchor::proc::SpawnOptions o;
    o.capture_stdout = true;
    o.merge_stderr = true;
    return anchor::proc::run_capture(args, o);
  }
};

TEST_F(PlanCli, JsonPlanFromReportWithOverrides) {
  auto r = run({"plan", (dir / "report.json").string(), "--catalog", catalog, "--json", "--set", "budget.nodes=2",
                "--set", "train.precision=bf16"});
  ASSERT_EQ(r.status, 0) << r.out;
  json p = json::parse(r.out);
  EXPECT_EQ(p["target"]["nodes"], 2);
  EXPECT_EQ(p["target"]["world_size"], 16);
  EXPECT_EQ(p["target"]["precision"], "bf16");
  EXPECT_EQ(p["devices"].size(), 4u);
  // Negative control: without the override the stored config's values come back.
  auto plain = run({"plan", (dir / "report.json").string(), "--catalog", catalog, "--json"});
  ASSERT_EQ(plain.status, 0) << plain.out;
  json q = json::parse(plain.out);
  EXPECT_EQ(q["target"]["nodes"], 1);
  EXPECT_EQ(q["target"]["precision"], "fp32");
  // The MI300X gets the ROCm checklist; the built-in model declares no custom ops.
  bool rocm = false;
  for (const auto& d : q["devices"])
    if (d["platform"] == "rocm") {
      rocm = true;
      EXPECT_NE(d["rocm_qualification"]["custom_ops_note"].get<std::string>().find("none"), std::string::npos);
      EXPECT_FALSE(d["rocm_qualification"]["qualified"].get<bool>());
    }
  EXPECT_TRUE(rocm);
}

TEST_F(PlanCli, TableFromADsseEnvelope) {
  json statement = {{"_type", "https://in-toto.io/Statement/v1"},
                    {"predicate", {{"report", anchor::plan::synthetic::synthetic_report()}}}};
  json env = {{"payloadType", "application/vnd.in-toto+json"},
              {"payload", anchor::report::base64_encode(statement.dump())},
              {"signatures", json::array({{{"keyid", ""}, {"sig", "AAAA"}}})}};
  write(dir / "report.intoto.json", env.dump());
  auto r = run({"plan", (dir / "report.intoto.json").string(), "--catalog", catalog});
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("H100-80GB-SXM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Recommendation"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ESTIMATE"), std::string::npos) << r.out;
}

TEST_F(PlanCli, BadOverrideAndBadCatalogExitTwo) {
  auto r = run({"plan", (dir / "report.json").string(), "--catalog", catalog, "--set", "budget.nodes=zero"});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("budget.nodes"), std::string::npos) << r.out;
  write(dir / "cat.yaml", "devices:\n  - name: X\n    speed: 3\n");
  auto c = run({"plan", (dir / "report.json").string(), "--catalog", (dir / "cat.yaml").string()});
  EXPECT_EQ(c.status, 2) << c.out;
  EXPECT_NE(c.out.find("cat.yaml:3:5: devices[0].speed: unknown key"), std::string::npos) << c.out;
  // A report without measurements: exit 2 naming the missing field.
  json bare = anchor::plan::synthetic::synthetic_report();
  bare.erase("measurements");
  write(dir / "bare.json", bare.dump());
  auto b = run({"plan", (dir / "bare.json").string(), "--catalog", catalog});
  EXPECT_EQ(b.status, 2) << b.out;
  EXPECT_NE(b.out.find("measurements"), std::string::npos) << b.out;
}

}  // namespace
