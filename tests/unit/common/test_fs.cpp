#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>

#include "anchor/common/fs.hpp"
#include "anchor/error.hpp"

namespace {

namespace fs = anchor::fs;

class FsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("anchor-fs-" + std::to_string(::getpid()) + "-" + fs::random_suffix());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(FsTest, AtomicWriteReplacesContent) {
  auto p = (dir_ / "a.json").string();
  fs::atomic_write_file(p, "one");
  fs::atomic_write_file(p, "two");
  EXPECT_EQ(fs::read_file(p), "two");
  // No temp files left behind.
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_)) (void)e, ++n;
  EXPECT_EQ(n, 1);
}

TEST_F(FsTest, FailedAtomicWriteKeepsOldFileAndNoTemp) {
  auto p = (dir_ / "a.json").string();
  fs::atomic_write_file(p, "good");
  for (auto op : {fs::Op::kWrite, fs::Op::kFsync, fs::Op::kRename}) {
    fs::FaultInjectingFs faulty;
    faulty.fail_on(op, 1, op == fs::Op::kFsync ? EIO : ENOSPC);
    try {
      fs::atomic_write_file(p, "bad", faulty);
      FAIL() << "expected failure on " << fs::op_name(op);
    } catch (const anchor::Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(op == fs::Op::kFsync ? "EIO" : "ENOSPC"), std::string::npos) << what;
      EXPECT_NE(what.find(dir_.string()), std::string::npos) << what;
    }
    EXPECT_EQ(fs::read_file(p), "good");
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir_)) (void)e, ++n;
    EXPECT_EQ(n, 1) << "temp file left after failed " << fs::op_name(op);
  }
}

TEST_F(FsTest, GlobMatchingNothingIsAConfigError) {
  try {
    fs::expand_glob((dir_ / "*.bin").string());
    FAIL();
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("matches no file"), std::string::npos);
  }
}

TEST_F(FsTest, ExchangeSwapsDirectories) {
  auto a = dir_ / "a", b = dir_ / "b";
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  fs::atomic_write_file((a / "x").string(), "A");
  fs::real_fs().exchange(a.string(), b.string());
  EXPECT_EQ(fs::read_file((b / "x").string()), "A");
  EXPECT_FALSE(std::filesystem::exists(a / "x"));
}

}  // namespace
