#pragma once
// Helpers for end-to-end tests that drive the real `anchor` binary.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"

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
inline AnchorRun run_anchor(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {ANCHOR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  proc::SpawnOptions o;
  o.env = env;
  o.merge_stderr = true;
  auto r = proc::run_capture(argv, o);
  return {r.status, r.out};
}

// A fresh temporary directory, removed when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("anchor-" + tag + "-" + std::to_string(::getpid()) + "-" + fs::random_suffix())) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const { return child.empty() ? path_.string() : (path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string source_path(const std::string& rel) { return std::string(ANCHOR_SOURCE_DIR) + "/" + rel; }

}  // namespace anchor::testing
