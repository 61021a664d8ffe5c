// proc::find_on_path: PATH first, then the extra directories; proc::host_name.
#include <gtest/gtest.h>

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

}  // namespace
