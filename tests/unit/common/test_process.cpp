// proc::find_on_path: PATH first, then the extra directories; proc::host_name;
// what proc::spawn hands a child of this process's descriptors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"

namespace {

using namespace anchor;

TEST(FindOnPath, FindsAnExecutableOnPathOrInTheExtraDirectories) {
  const auto sh = proc::find_on_path("sh");
  ASSERT_FALSE(sh.empty());
  EXPECT_EQ(sh.front(), '/');
  EXPECT_EQ(proc::find_on_path("anchor-no-such-tool-" + fs::random_suffix()), "");

  // A tool only in an extra directory, and a non-executable file that does not count.
  const auto dir = std::filesystem::temp_directory_path() / ("anchor-path-" + fs::random_suffix());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "anchor-extra-tool") << "#!/bin/sh\n";
  std::ofstream(dir / "anchor-not-executable") << "data\n";
  std::filesystem::permissions(dir / "anchor-extra-tool", std::filesystem::perms::owner_all);
  EXPECT_EQ(proc::find_on_path("anchor-extra-tool"), "");
  EXPECT_EQ(proc::find_on_path("anchor-extra-tool", "/nonexistent:" + dir.string()),
            (dir / "anchor-extra-tool").string());
  EXPECT_EQ(proc::find_on_path("anchor-not-executable", dir.string()), "");
  std::filesystem::remove_all(dir);
}

// The kernel's host name, as /proc/sys/kernel/hostname has it.
TEST(HostName, IsTheKernelsHostName) {
  std::ifstream f("/proc/sys/kernel/hostname");
  std::string expected;
  ASSERT_TRUE(std::getline(f, expected));
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(proc::host_name(), expected);
}

TEST(DescribeExit, SaysTheStatusAndTheSignal) {
  EXPECT_EQ(proc::describe_exit(0), "exited with status 0");
  EXPECT_EQ(proc::describe_exit(3), "exited with status 3");
  EXPECT_EQ(proc::describe_exit(137), "exited with status 137 (killed by SIGKILL)");
  EXPECT_EQ(proc::describe_exit(139), "exited with status 139 (killed by SIGSEGV: a crash)");
}

// A child gets stdin, stdout and stderr, nothing else this process holds: a
// descriptor opened without close-on-exec is closed in it (the control: the
// same check sees the child's stdout, and the descriptor is open here).
TEST(Spawn, OnlyTheStandardDescriptorsReachTheChild) {
  const int leaky = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(leaky, 3);
  ASSERT_NE(::fcntl(leaky, F_GETFD), -1);
  proc::SpawnOptions o;
  o.capture_stdout = true;
  const std::string check = "for fd in 1 " + std::to_string(leaky) +
                            "; do if test -e /proc/self/fd/$fd; then echo open; else echo closed; fi; done";
  auto c = proc::spawn({"/bin/sh", "-c", check}, o);
  const auto stdout_line = proc::read_line(c.stdout_fd.get());
  const auto leaky_line = proc::read_line(c.stdout_fd.get());
  c.stdout_fd.reset();
  EXPECT_EQ(proc::wait_exit(c.pid), 0);
  ::close(leaky);
  EXPECT_EQ(stdout_line.value_or("eof"), "open");
  EXPECT_EQ(leaky_line.value_or("eof"), "closed") << "descriptor " << leaky << " leaked into the child";
}

// A parent whose stdin and stdout are closed gets descriptors 0 and 1 for the
// pipe it reads the child's stdout from: the child's end is already 1, and it
// must still be open after exec (dup2 onto itself would leave it close-on-exec).
// SpawnOptions::unset: an inherited variable the child does not get, while
// others still reach it and `env` may still set a listed one. Control: the same
// variable without `unset` does reach it.
TEST(Spawn, UnsetVariablesAreNotInheritedButEnvStillSetsThem) {
  ::setenv("ANCHOR_TEST_OUTER_A", "outer", 1);
  ::setenv("ANCHOR_TEST_OUTER_B", "outer", 1);
  auto child_env = [](const proc::SpawnOptions& base) {
    proc::SpawnOptions o = base;
    o.capture_stdout = true;
    auto c = proc::spawn({"/usr/bin/env"}, o);
    std::string all;
    while (auto l = proc::read_line(c.stdout_fd.get())) all += *l + "\n";
    proc::wait_exit(c.pid);
    return all;
  };
  proc::SpawnOptions o;
  o.unset = {"ANCHOR_TEST_OUTER_A", "ANCHOR_TEST_OUTER_B"};
  o.env["ANCHOR_TEST_OUTER_B"] = "mine";
  const std::string with = child_env(o);
  EXPECT_EQ(with.find("ANCHOR_TEST_OUTER_A="), std::string::npos) << with;
  EXPECT_NE(with.find("ANCHOR_TEST_OUTER_B=mine\n"), std::string::npos) << with;
  EXPECT_NE(with.find("PATH="), std::string::npos) << "the rest is inherited";
  const std::string without = child_env({});
  EXPECT_NE(without.find("ANCHOR_TEST_OUTER_A=outer\n"), std::string::npos) << without;
  ::unsetenv("ANCHOR_TEST_OUTER_A");
  ::unsetenv("ANCHOR_TEST_OUTER_B");
}

TEST(Spawn, AStdoutPipeThatIsAlreadyDescriptorOneReachesTheChild) {
  const pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    ::close(STDIN_FILENO);
    ::close(STDOUT_FILENO);
    int code = 1;
    try {
      proc::SpawnOptions o;
      o.capture_stdout = true;
      auto c = proc::spawn({"/bin/echo", "through"}, o);
      if (c.stdout_fd.get() != STDIN_FILENO) ::_exit(3);  // not the case this test is for
      const auto line = proc::read_line(c.stdout_fd.get());
      code = proc::wait_exit(c.pid) == 0 && line && *line == "through" ? 0 : 1;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child's stdout was closed; 2: spawn threw; 3: the pipe was not 0 and 1";
}

// A parent with 0, 1 and 2 all closed: the stdout pipe takes 0 and 1, the
// stdin pipe 2 and 3. The child's stdin end (2) must not be overwritten by the
// stderr move before it is moved onto 0: the line written to its stdin comes back.
TEST(Spawn, PipesOnEveryStandardDescriptorReachTheChildIntact) {
  const pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    for (int fd = 0; fd < 1024; ++fd) ::close(fd);  // ctest may hand down more than 0-2: the pipes then take 0-3
    int code = 1;
    try {
      proc::SpawnOptions o;
      o.capture_stdout = true;
      o.merge_stderr = true;
      o.pipe_stdin = true;
      auto c = proc::spawn({"/bin/sh", "-c", "read x; echo \"got $x\""}, o);
      // stdout's pipe on 0 and 1 leaves 2 and 3 for stdin's: its read end on 2, the write end 3.
      if (c.stdout_fd.get() != STDIN_FILENO || c.stdin_fd.get() != 3) ::_exit(3);  // not the case this test is for
      const char line[] = "ping\n";
      if (::write(c.stdin_fd.get(), line, sizeof line - 1) != static_cast<ssize_t>(sizeof line - 1)) ::_exit(2);
      c.stdin_fd.reset();
      const auto got = proc::read_line(c.stdout_fd.get());
      code = proc::wait_exit(c.pid) == 0 && got && *got == "got ping" ? 0 : 1;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child did not read its stdin; 2: spawn or write failed; 3: the pipes "
                                       "were not on 0-3";
}

}  // namespace

// An exec the kernel refuses says which program and why, in the child (issue 43, item 7: E2BIG said
// only "exec failed"), and exits 127 as a shell does.
TEST(Spawn, AnExecThatFailsSaysWhichProgramAndWhy) {
  auto failed = [](const std::vector<std::string>& argv) {
    proc::SpawnOptions o;
    o.capture_stdout = true;
    o.merge_stderr = true;
    auto c = proc::spawn(argv, o);
    std::string all;
    while (auto l = proc::read_line(c.stdout_fd.get())) all += *l + "\n";
    return std::make_pair(proc::wait_exit(c.pid), all);
  };
  // One argument over the kernel's 128 KiB limit for a single string (MAX_ARG_STRLEN).
  const auto [big_status, big] = failed({"/bin/true", std::string(200000, 'x')});
  EXPECT_EQ(big_status, 127);
  EXPECT_NE(big.find("anchor: error: exec of /bin/true: its arguments and environment are too large (E2BIG"),
            std::string::npos)
      << big;
  const auto [none_status, none] = failed({"/no/such/program"});
  EXPECT_EQ(none_status, 127);
  EXPECT_NE(none.find("exec of /no/such/program: no such file (ENOENT"), std::string::npos) << none;
}
