#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/error.hpp"
#include "support/in_child.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = anchor::fs;

class FsTest : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp_{"fs"};
  const std::filesystem::path& dir_ = tmp_.path();
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

// The descriptors this process holds (/proc/self/fd, less the directory's own).
int open_descriptors() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n - 1;
}

// create_excl's descriptor is owned: a write that fails on its way leaves no
// descriptor open, whichever step failed; the control counts one that is held.
TEST_F(FsTest, AFailedWriteLeavesNoDescriptorOpen) {
  const auto p = (dir_ / "b.json").string();
  const int before = open_descriptors();
  for (auto op : {fs::Op::kWrite, fs::Op::kFsync, fs::Op::kRename}) {
    fs::FaultInjectingFs faulty;
    faulty.fail_on(op, 1, EIO);
    EXPECT_THROW(fs::atomic_write_file(p, "bad", faulty), anchor::Error) << fs::op_name(op);
    EXPECT_EQ(open_descriptors(), before) << "a descriptor left open after a failed " << fs::op_name(op);
  }
  fs::UniqueFd held = fs::real_fs().create_excl((dir_ / "held").string());
  EXPECT_EQ(open_descriptors(), before + 1);
  fs::real_fs().close(std::move(held), (dir_ / "held").string());
  EXPECT_FALSE(held);
  EXPECT_EQ(open_descriptors(), before);
}

// UniqueFd::close reports what close(2) said; a second close is a no-op.
TEST(UniqueFd, CloseReportsTheErrnoOnce) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  fs::UniqueFd a(p[0]), b(p[1]);
  EXPECT_EQ(a.close(), 0);
  EXPECT_EQ(a.close(), 0);
  EXPECT_FALSE(a);
  const int raw = b.release();
  ASSERT_EQ(::close(raw), 0);
  fs::UniqueFd stale(raw);  // closed already: close(2) says EBADF
  EXPECT_EQ(stale.close(), EBADF);
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

// A FIFO where a file is expected: opening it for reading would wait for a
// writer forever. Each reader refuses it at once, naming what it is (run in a
// child with a deadline, so a regression fails instead of hanging).
TEST_F(FsTest, ReadersRefuseAFifoAtOnce) {
  const auto fifo = (dir_ / "model.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const char* reader : {"read_file", "sha256_file"}) {
    SCOPED_TRACE(reader);
    auto r = anchor::test::in_child(
        [&] {
          if (std::string(reader) == "read_file") return fs::read_file(fifo);
          return anchor::sha256_file(fifo).sha256;
        },
        10);
    ASSERT_FALSE(r.timed_out) << reader << " blocked on a FIFO";
    ASSERT_TRUE(r.threw) << r.text;
    EXPECT_EQ(r.kind, anchor::ErrorKind::kIo);
    EXPECT_NE(r.text.find("is a FIFO (named pipe), not a regular file"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find(fifo), std::string::npos) << r.text;
    EXPECT_LT(r.seconds, 5);
  }
}

TEST_F(FsTest, OpenRegularChecksTheDescriptorItReturns) {
  const auto file = (dir_ / "f").string();
  fs::atomic_write_file(file, "abc");
  struct stat st {};
  fs::UniqueFd fd = fs::open_regular(file, &st);
  ASSERT_TRUE(fd);
  EXPECT_EQ(st.st_size, 3);
  EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);  // blocking again once checked
  EXPECT_EQ(fs::read_all(fd.get(), file), "abc");
  const int raw = fd.get();
  fd.reset();
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // closed by the owner

  auto refused = [](const std::string& path, const fs::OpenRegular& how = {}) {
    try {
      fs::open_regular(path, nullptr, how);
    } catch (const anchor::Error& e) {
      return std::make_pair(e.kind(), std::string(e.what()) + " | " + e.hint());
    }
    return std::make_pair(anchor::ErrorKind::kRuntime, std::string("opened"));
  };
  auto dir = refused(dir_.string());
  EXPECT_EQ(dir.first, anchor::ErrorKind::kIo);
  EXPECT_NE(dir.second.find("is a directory, not a file"), std::string::npos) << dir.second;
  auto dev = refused("/dev/zero", {"data shard", anchor::ErrorKind::kConfig, {}});
  EXPECT_EQ(dev.first, anchor::ErrorKind::kConfig);
  EXPECT_NE(dev.second.find("data shard /dev/zero: is a character device, not a regular file"), std::string::npos)
      << dev.second;
  auto missing = refused((dir_ / "nope").string());
  EXPECT_EQ(missing.first, anchor::ErrorKind::kIo);
  EXPECT_NE(missing.second.find("ENOENT"), std::string::npos) << missing.second;
  // Negative control: a regular file opens.
  EXPECT_EQ(refused(file).second, "opened");
}

}  // namespace

namespace anchor {
namespace {

// A forked child draws its own temporary names, not its parent's next ones:
// two children publishing the same file at once must not collide.
TEST(RandomSuffix, AForkedChildDoesNotRepeatItsParent) {
  (void)fs::random_suffix();  // the parent's generator is seeded
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string s = fs::random_suffix();
    (void)!::write(p[1], s.data(), s.size());
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[16] = {0};
  const ssize_t n = ::read(p[0], buf, sizeof buf);
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_EQ(n, 8);
  const std::string child(buf, 8), parent = fs::random_suffix();
  EXPECT_NE(child, parent) << "the child drew the name its parent draws next";
  EXPECT_NE(fs::random_suffix(), parent);  // control: a generator that repeats itself
}

}  // namespace
}  // namespace anchor
