#pragma once
// Small helpers shared by the manifest unit tests: the temp dir, file
// writers, and mtime control (the hash cache refuses files modified in the
// last 100 ms, so tests backdate what they want cached).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "anchor/common/process.hpp"
#include "support/temp_dir.hpp"

namespace anchor::manifest::testing {

namespace stdfs = std::filesystem;

// The tests' one temporary directory (support/temp_dir.hpp).
using anchor::testing::TempDir;

inline void write_file(const std::string& path, const std::string& content) {
  stdfs::create_directories(stdfs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
}

// Deterministic pseudo-random bytes, different per seed.
inline std::string bytes(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = 2463534242u ^ (seed * 2654435761u);
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x & 0xff);
  }
  return s;
}

// Sets the mtime `seconds_ago` seconds in the past.
inline void backdate(const std::string& path, int seconds_ago = 3600) {
  stdfs::last_write_time(path, stdfs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
}

inline std::string sha256sum_of(const std::string& path) {
  auto r = anchor::proc::run_capture({"/usr/bin/sha256sum", path});
  return r.status == 0 ? r.out.substr(0, 64) : "sha256sum failed";
}

}  // namespace anchor::manifest::testing
