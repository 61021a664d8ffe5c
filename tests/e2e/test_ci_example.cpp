// examples/github-actions/pilot.yml, run as GitHub Actions would run its `run:` steps: each with
// bash, in a checkout (here a copy of configs/ and data/tiny/), anchor on PATH and
// GITHUB_STEP_SUMMARY a file. The summary must end up holding the pilot's report.md.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace stdfs = std::filesystem;
using anchor::testing::TempDir;

struct Step {
  std::string name, run;
  bool always = false;
};

std::vector<Step> run_steps(const std::string& workflow) {
  std::vector<Step> out;
  const YAML::Node doc = YAML::LoadFile(workflow);
  for (const auto& job : doc["jobs"])
    for (const auto& s : job.second["steps"])
      if (s["run"])
        out.push_back({s["name"] ? s["name"].as<std::string>() : "", s["run"].as<std::string>(),
                       s["if"] && s["if"].as<std::string>() == "always()"});
  return out;
}

// Runs the steps in order as a runner does: a failed step skips the rest, but `if: always()` ones.
std::vector<int> run_workflow(const std::vector<Step>& steps, const TempDir& t) {
  std::vector<int> status;
  bool failed = false;
  for (const auto& s : steps) {
    if (failed && !s.always) {
      status.push_back(-1);
      continue;
    }
    anchor::proc::SpawnOptions o;
    o.cwd = t.str("checkout");
    o.merge_stderr = true;
    o.env = {{"PATH", stdfs::path(ANCHOR_BINARY).parent_path().string() + ":/usr/bin:/bin"},
             {"GITHUB_STEP_SUMMARY", t.str("summary.md")},
             {"HOME", t.str("home")},
             {"XDG_CONFIG_HOME", t.str("home/.config")},
             {"XDG_CACHE_HOME", t.str("home/.cache")}};
    const auto r = anchor::proc::run_capture({"/bin/bash", "-e", "-c", s.run}, o);
    std::cout << "step " << s.name << ": status " << r.status << "\n" << r.out.substr(0, 2000) << "\n";
    status.push_back(r.status);
    failed |= r.status != 0;
  }
  return status;
}

void checkout(const TempDir& t) {
  stdfs::create_directories(t.path() / "checkout" / "data");
  stdfs::create_directories(t.path() / "home");
  stdfs::copy(std::string(ANCHOR_SOURCE_DIR) + "/configs", t.path() / "checkout" / "configs",
              stdfs::copy_options::recursive);
  stdfs::copy(std::string(ANCHOR_SOURCE_DIR) + "/data/tiny", t.path() / "checkout" / "data" / "tiny",
              stdfs::copy_options::recursive);
}

TEST(CiExample, TheGithubActionsWorkflowWritesTheReportIntoTheStepSummary) {
  const auto steps = run_steps(std::string(ANCHOR_SOURCE_DIR) + "/examples/github-actions/pilot.yml");
  ASSERT_EQ(steps.size(), 3u) << "config check, pilot, summary";
  TempDir t("ci-example");
  checkout(t);
  EXPECT_EQ(run_workflow(steps, t), (std::vector<int>{0, 0, 0}));
  const std::string summary = anchor::fs::read_file(t.str("summary.md"));
  EXPECT_EQ(summary, anchor::fs::read_file(t.str("checkout/runs/ci/report.md")));
  EXPECT_NE(summary.find("resume"), std::string::npos) << summary;
  EXPECT_TRUE(stdfs::exists(t.str("checkout/runs/ci.junit.xml")));

  // Negative control: a config that does not check fails its step, skips the pilot, and the summary
  // step still runs and says there is no report.
  TempDir bad("ci-example-bad");
  checkout(bad);
  anchor::fs::atomic_write_file(bad.str("checkout/configs/pilot.yaml"), "train: {micro_batch: 0}\n");
  EXPECT_EQ(run_workflow(steps, bad), (std::vector<int>{2, -1, 0}));
  EXPECT_EQ(anchor::fs::read_file(bad.str("summary.md")), "anchor pilot wrote no report: see the job's log\n");
}

}  // namespace
