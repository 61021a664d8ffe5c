#pragma once
// Helpers for end-to-end tests that drive the real `anchor` binary.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/temp_dir.hpp"

namespace anchor::testing {

struct AnchorRun {
  int status = -1;
  std::string output;  // stdout and stderr, interleaved
};

// A JSON file the run wrote (report.json, manifest.json, work/*.json).
inline nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(fs::read_file(path.string()));
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
