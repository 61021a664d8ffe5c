#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"

namespace {

std::string sha256sum_of(const std::string& path) {
  auto r = anchor::proc::run_capture({"/usr/bin/sha256sum", path});
  EXPECT_EQ(r.status, 0);
  return r.out.substr(0, 64);
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(anchor::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(anchor::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, FileDigestEqualsSha256sum) {
  auto dir = std::filesystem::temp_directory_path() / ("anchor-sha-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "blob.bin").string();
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 3 * (1 << 20) + 17; ++i) f.put(static_cast<char>((i * 131) ^ (i >> 7)));
  }
  auto d = anchor::sha256_file(path);
  EXPECT_EQ(d.size, 3u * (1u << 20) + 17u);
  EXPECT_EQ(d.sha256, sha256sum_of(path));
  std::filesystem::remove_all(dir);
}

TEST(Sha256, DirectoryAndMissingFileAreClearErrors) {
  try {
    anchor::sha256_file("/tmp");
    FAIL() << "expected an error";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  try {
    anchor::sha256_file("/nonexistent/anchor/file");
    FAIL() << "expected an error";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/anchor/file"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("ENOENT"), std::string::npos);
  }
}

}  // namespace
