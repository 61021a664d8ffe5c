#pragma once
// Helpers for end-to-end tests that drive the real `anchor` binary.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/run_report/run_report.hpp"
#include "support/temp_dir.hpp"

namespace anchor::testing {

struct AnchorRun {
  int status = -1;
  std::string output;  // stdout and stderr, interleaved
};

// A JSON file the run wrote (report.json, manifest.json, work/*.json). A
// report.json must also read into run_report::RunReport and write back to the
// same bytes: every report an e2e test reads checks the typed document.
inline nlohmann::json read_json(const std::filesystem::path& path) {
  nlohmann::json j = nlohmann::json::parse(fs::read_file(path.string()));
  if (path.filename() == "report.json") {
    const std::string again = run_report::RunReport::from_json(j).to_json().dump(2);
    EXPECT_EQ(again, j.dump(2)) << path << " does not round-trip through run_report::RunReport";
  }
  return j;
}

// Runs `anchor args...` from the source directory with extra environment.
inline AnchorRun run_anchor(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {ANCHOR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  proc::SpawnOptions o;
  o.env = env;
  o.merge_stderr = true;
  auto r = proc::run_capture(argv, o);
  return {r.status, r.out};
}

inline std::string source_path(const std::string& rel) { return std::string(ANCHOR_SOURCE_DIR) + "/" + rel; }

}  // namespace anchor::testing
