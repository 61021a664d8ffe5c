// fs::DirLock: one holder at a time, the refusal names the holder, the lock
// dies with its process (a killed holder never blocks), and a symlink at the
// lock's name is refused rather than followed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "anchor/common/dir_lock.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/error.hpp"

namespace {

using namespace anchor;
namespace stdfs = std::filesystem;

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override { stdfs::create_directories(dir_); }
  void TearDown() override { stdfs::remove_all(dir_); }
  const std::string dir_ = (stdfs::temp_directory_path() / ("anchor-lock-" + fs::random_suffix())).string();
};

std::string refusal(const std::string& dir) {
  try {
    fs::DirLock::acquire(dir, "checkpoint.dir " + dir, "second-run");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

TEST_F(DirLockTest, ASecondHolderIsRefusedNamingTheFirstUntilItLets) {
  {
    auto held = fs::DirLock::acquire(dir_, "checkpoint.dir " + dir_, "first-run");
    ASSERT_TRUE(held.held());
    const std::string why = refusal(dir_);
    EXPECT_NE(why.find("checkpoint.dir " + dir_ + " is in use by pilot run first-run"), std::string::npos) << why;
    EXPECT_NE(why.find("pid " + std::to_string(::getpid())), std::string::npos) << why;
    EXPECT_NE(why.find("on host " + proc::host_name()), std::string::npos) << why;
    EXPECT_NE(why.find("another directory"), std::string::npos) << why;
  }
  // Released with the object: the next one takes it.
  EXPECT_EQ(refusal(dir_), "");
}

TEST_F(DirLockTest, ALockWhoseHolderWasKilledDoesNotBlock) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = fs::DirLock::acquire(dir_, "d", "doomed-run");
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_NE(refusal(dir_).find("doomed-run (pid " + std::to_string(child)), std::string::npos);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(stdfs::exists(stdfs::path(dir_) / fs::DirLock::kFile)) << "the file stays; the lock does not";
  EXPECT_EQ(refusal(dir_), "");
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(DirLockTest, ASymlinkAtTheLocksNameIsRefusedNotFollowed) {
  const auto target = stdfs::path(dir_) / "elsewhere";
  stdfs::create_symlink(target, stdfs::path(dir_) / fs::DirLock::kFile);
  try {
    fs::DirLock::acquire(dir_, "d", "r");
    FAIL() << "a symlinked lock file was followed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
  }
  EXPECT_FALSE(stdfs::exists(target)) << "nothing was created through the link";
}

}  // namespace
