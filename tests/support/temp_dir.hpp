#pragma once
// The one temporary directory of the tests: a fresh directory under the
// system's temp dir, named anchor-<tag>-<pid>-<random>, removed with
// everything in it when the object goes away (a fixture holds one as a
// member; no SetUp/TearDown of its own).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "anchor/common/fs.hpp"

namespace anchor::testing {

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
  std::string str(const std::string& child = "") const {
    return child.empty() ? path_.string() : (path_ / child).string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace anchor::testing
