// The download and preprocess commands timed on a sample
// (src/pilot/pipeline_timing.cpp): real processes, real files.
#include "anchor/pilot/pipeline_timing.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "anchor/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using anchor::pilot::time_pipeline;

anchor::config::Config config_in(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << "data: {train: [x.txt]}\nbudget:\n" << extra;
  return anchor::config::load(path, {});
}

TEST(PipelineTiming, SubstitutesInsideArguments) {
  EXPECT_EQ(anchor::pilot::substitute({"cp", "{in}", "--to={out}/x", "{in}{in}"}, "/a", "/b"),
            (std::vector<std::string>{"cp", "/a", "--to=/b/x", "/a/a"}));
}

// The download's size is what it wrote; the preprocess's is its input, here
// what the download wrote (no sample named); both are MEASURED, and the work
// directory holds only their logs afterwards.
TEST(PipelineTiming, TimesBothOnTheDownloadedSample) {
  anchor::testing::TempDir t("pipeline");
  const auto cfg = config_in(
      t.str(),
      "  download_command: [sh, -c, 'head -c 3000000 /dev/zero > {out}/a.bin && head -c 1000 /dev/zero > {out}/b']\n"
      "  preprocess_command: [sh, -c, 'cat {in}/a.bin {in}/b | gzip -1 > {out}/all.gz']\n");
  const auto j = time_pipeline(cfg, t.str("work"));
  EXPECT_EQ(j["download"]["bytes"].get<double>(), 3001000);
  EXPECT_EQ(j["preprocess"]["bytes"].get<double>(), 3001000);
  for (const char* stage : {"download", "preprocess"}) {
    EXPECT_EQ(j[stage]["kind"], "MEASURED");
    EXPECT_GT(j[stage]["seconds"].get<double>(), 0);
    EXPECT_NEAR(j[stage]["mb_per_s"].get<double>(), 3.001 / j[stage]["seconds"].get<double>(), 1e-9);
  }
  EXPECT_EQ(j["preprocess"]["command"][2], "cat " + t.str("work") + "/download/a.bin " + t.str("work") +
                                               "/download/b | gzip -1 > " + t.str("work") + "/preprocess/all.gz");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(t.str("work"))) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"download.log", "preprocess.log"}));
}

TEST(PipelineTiming, ANamedSampleIsThePreprocessInput) {
  anchor::testing::TempDir t("pipeline-sample");
  std::filesystem::create_directories(t.str("raw/sub"));
  std::ofstream(t.str("raw/one")) << std::string(500, 'x');
  std::ofstream(t.str("raw/sub/two")) << std::string(700, 'y');
  const auto cfg =
      config_in(t.str(), "  preprocess_sample: raw\n  preprocess_command: [cp, -r, '{in}', '{out}/copy']\n");
  const auto j = time_pipeline(cfg, t.str("work"));
  EXPECT_FALSE(j.contains("download"));
  EXPECT_EQ(j["preprocess"]["bytes"].get<double>(), 1200);
  // A sample that is not there is a config error naming it.
  const auto missing = config_in(t.str(), "  preprocess_sample: nothere\n  preprocess_command: [true]\n");
  try {
    time_pipeline(missing, t.str("work"));
    FAIL() << "a missing sample passed";
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("nothere does not exist"), std::string::npos) << e.what();
  }
}

// A command that fails, one that runs past its timeout (killed with what it
// started), and one that writes nothing: each an error that says so.
TEST(PipelineTiming, FailuresAreNamedWithTheirOutput) {
  anchor::testing::TempDir t("pipeline-fails");
  const auto failing =
      config_in(t.str(), "  download_command: [sh, -c, 'echo fetching; echo 403 Forbidden >&2; exit 22']\n");
  try {
    time_pipeline(failing, t.str("work"));
    FAIL() << "a failing download passed";
  } catch (const anchor::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kRuntime);
    EXPECT_NE(what.find("exited with status 22"), std::string::npos) << what;
    EXPECT_NE(what.find("403 Forbidden"), std::string::npos) << what;
    EXPECT_NE(e.hint().find(t.str("work") + "/download.log"), std::string::npos) << e.hint();
  }
  const auto slow =
      config_in(t.str(), "  pipeline_timeout_s: 0.5\n  download_command: [sh, -c, 'sleep 30 & sleep 30']\n");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    time_pipeline(slow, t.str("work"));
    FAIL() << "a download past its timeout passed";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ran past budget.pipeline_timeout_s"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  const auto empty = config_in(t.str(), "  download_command: ['true']\n");
  try {
    time_pipeline(empty, t.str("work"));
    FAIL() << "a download that wrote nothing passed";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrote nothing to {out}"), std::string::npos) << e.what();
  }
}

}  // namespace
