// anchor checkpoint verify/list on the real binary, and the ANCHOR_FAULT seam
// is exercised by the unit tests (fork) and the kill loop (ckpt_saver).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/process.hpp"
#include "support/checkpoint_fixture.hpp"

namespace {

namespace ck = anchor::checkpoint;

class CheckpointCli : public anchor::test::CheckpointDir {
 protected:
  // Under /usr/bin/timeout: a command that blocks (a FIFO opened for reading)
  // exits 124 instead of hanging the test.
  anchor::proc::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/timeout", "-s", "KILL", "60", ANCHOR_BINARY});
    anchor::proc::SpawnOptions o;
    o.env["ANCHOR_LOG_LEVEL"] = "warn";
    return anchor::proc::run_capture(args, o);
  }
};

// `anchor ARGS...` with stdout and stderr to /dev/null: its exit status and its peak RSS in bytes
// (wait4). Through fork, not posix_spawn: a child that shares this process's memory until its exec
// (vfork) inherits this process's high-water RSS in ru_maxrss; a forked one starts from what this
// process holds now.
std::pair<int, long long> status_and_peak_rss(const std::vector<std::string>& args) {
  std::vector<std::string> all = {ANCHOR_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(all.size() + 1);
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (pid < 0) return {-1, 0};
  int status = 0;
  rusage ru{};
  if (::wait4(pid, &status, 0, &ru) != pid) return {-1, 0};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, static_cast<long long>(ru.ru_maxrss) * 1024};
}

// Issue 43.6: verify and list stream every file (the header and a 1 MiB chunk in memory), so a
// 256 MiB tensor costs no 256 MiB of RSS; they took ~1x the file (2x for other files) before. The
// negative control: one byte changed in the middle of the tensor is still found.
TEST_F(CheckpointCli, VerifyAndListHoldAChunkNotTheFile) {
  constexpr std::size_t kBytes = 256u << 20;
  std::string dir;
  {
    std::vector<float> w(kBytes / sizeof(float), 0.5F);
    ck::SaveRequest req;
    req.step = 3;
    req.files.push_back(
        {"model.safetensors", {{"w", ck::DType::F32, {static_cast<std::int64_t>(w.size())}, w.data(), kBytes}}, {}});
    dir = ck::Store(root()).save(req).dir;
  }
  const long long kBound = 96LL << 20;  // the binary, its libraries and the chunk: ~20 MB here
  auto [status, rss] = status_and_peak_rss({"checkpoint", "verify", dir});
  EXPECT_EQ(status, 0);
  EXPECT_LT(rss, kBound) << "peak RSS of verify on a 256 MiB file: " << rss;
  std::tie(status, rss) = status_and_peak_rss({"checkpoint", "list", root()});
  EXPECT_EQ(status, 0);
  EXPECT_LT(rss, kBound) << "peak RSS of list: " << rss;
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kBytes / 2));
    f.put('\x55');
  }
  const auto r = run({"checkpoint", "verify", dir});
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("model.safetensors: tensor 'w' SHA-256 is "), std::string::npos) << r.out;
}

TEST_F(CheckpointCli, VerifyValidAndInvalid) {
  ck::Store store(root());
  auto dir = store.save(anchor::test::make_request(2, 100)).dir;
  auto r = run({"checkpoint", "verify", dir});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(": ok (step 2, committed"), std::string::npos) << r.out;

  // Two problems: a corrupt data byte and a missing file; both explained.
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x55');
  }
  std::filesystem::remove(dir + "/optimizer.safetensors");
  r = run({"checkpoint", "verify", dir});
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("INVALID (invalid), 2 problems"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.safetensors: tensor '"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("' SHA-256 is "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer.safetensors is missing"), std::string::npos) << r.out;

  r = run({"checkpoint", "verify", dir, "--json"});
  EXPECT_EQ(r.status, 3);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["problems"].size(), 2u);

  r = run({"checkpoint", "verify", root() + "/nope"});
  EXPECT_EQ(r.status, 2);
}

TEST_F(CheckpointCli, ListShowsEveryStepWithState) {
  ck::Store store(root());
  store.save(anchor::test::make_request(2, 100));
  store.save(anchor::test::make_request(4, 100));
  std::filesystem::remove(root() + "/step-00000004/COMMITTED");
  std::filesystem::create_directory(root() + "/step-00000006.tmp-abcd");
  auto r = run({"checkpoint", "list", root()});
  EXPECT_EQ(r.status, 0) << r.out;
  auto row = [&](const std::string& s) { return r.out.find(s) != std::string::npos; };
  EXPECT_TRUE(row("6          temporary")) << r.out;
  EXPECT_TRUE(row("4          uncommitted")) << r.out;
  EXPECT_TRUE(row("2          committed*")) << r.out;
  EXPECT_TRUE(row("- no COMMITTED marker: the save did not finish")) << r.out;
  EXPECT_LT(r.out.find("step-00000006"), r.out.find("step-00000002"));  // newest first

  r = run({"checkpoint", "list", root(), "--json"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[2]["state"], "committed");
  EXPECT_EQ(j[2]["ok"], true);
}

// --- issue 14 ---------------------------------------------------------------

// JSON that the binary printed; "" and a failure when it is not JSON.
nlohmann::json parse_or_fail(const std::string& out) {
  try {
    return nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "):\n" << out;
    return nullptr;
  }
}

// Sets the byte at the first `needle` in the file to 0xff (inside the header).
void poison(const std::string& path, const std::string& needle) {
  std::string bytes = anchor::fs::read_file(path);
  auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at] = '\xff';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors header with a byte that is not UTF-8 used to make --json
// report an internal error (exit 1): verify exits 3 with JSON naming the
// problem (the byte as \xff), list exits 0 and marks the older step.
TEST_F(CheckpointCli, JsonOnAHeaderThatIsNotUtf8) {
  ck::Store store(root());
  store.save(anchor::test::make_request(2, 100));
  auto dir = store.save(anchor::test::make_request(4, 100)).dir;
  poison(dir + "/model.safetensors", "\"kind\"");
  auto r = run({"checkpoint", "verify", dir, "--json"});
  EXPECT_EQ(r.status, 3) << r.out;
  auto j = parse_or_fail(r.out);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["ok"], false);
  EXPECT_NE(j["problems"].dump().find("header is not valid JSON"), std::string::npos) << j.dump(2);
  EXPECT_NE(j["problems"].dump().find("\\\\xff"), std::string::npos) << j.dump(2);
  r = run({"checkpoint", "list", root(), "--json"});
  EXPECT_EQ(r.status, 0) << r.out;
  j = parse_or_fail(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["state"], "invalid");
  EXPECT_EQ(j[1]["state"], "committed");
  r = run({"checkpoint", "verify", dir});  // the text form names it too
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("header is not valid JSON"), std::string::npos) << r.out;
}

// A checkpoint root whose name holds a byte that is not UTF-8: "dir" shows it
// as \xff, and the JSON is valid.
TEST_F(CheckpointCli, JsonUnderADirectoryWhoseNameIsNotUtf8) {
  const std::string odd = (dir_ / "runs\xff" / "ckpt").string();
  ck::Store store(odd);
  store.save(anchor::test::make_request(2, 100));
  auto dir4 = store.save(anchor::test::make_request(4, 100)).dir;
  std::filesystem::resize_file(dir4 + "/optimizer.safetensors", 10);
  auto r = run({"checkpoint", "list", odd, "--json"});
  EXPECT_EQ(r.status, 0) << r.out;
  auto j = parse_or_fail(r.out);
  ASSERT_EQ(j.size(), 2u) << r.out;
  EXPECT_NE(j[0]["dir"].get<std::string>().find("runs\\xff/ckpt/step-00000004"), std::string::npos) << j.dump(2);
  EXPECT_EQ(j[1]["ok"], true);
  r = run({"checkpoint", "verify", dir4, "--json"});
  EXPECT_EQ(r.status, 3) << r.out;
  j = parse_or_fail(r.out);
  EXPECT_NE(j["problems"].dump().find("runs\\\\xff/ckpt/step-00000004/optimizer.safetensors"), std::string::npos)
      << j.dump(2);
  r = run({"checkpoint", "verify", store.save(anchor::test::make_request(6, 100)).dir, "--json"});
  EXPECT_EQ(r.status, 0) << r.out;  // negative control: a good one under the same root
  EXPECT_EQ(parse_or_fail(r.out)["ok"], true);
}

// A FIFO in place of a checkpoint file used to hang verify and list forever:
// they answer at once (timeout(1) would kill them at 60 s: status 137).
TEST_F(CheckpointCli, FifoInPlaceOfAFileDoesNotHang) {
  for (const char* name : {"model.safetensors", "manifest.json", "COMMITTED"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(root());
    ck::Store store(root());
    store.save(anchor::test::make_request(2, 100));
    auto dir = store.save(anchor::test::make_request(4, 100)).dir;
    std::filesystem::remove(dir + "/" + name);
    ASSERT_EQ(::mkfifo((dir + "/" + name).c_str(), 0644), 0);
    auto r = run({"checkpoint", "verify", dir});
    EXPECT_EQ(r.status, 3) << r.out;
    EXPECT_NE(r.out.find(std::string(name) + ": cannot be read: read " + dir + "/" + name +
                         ": is a FIFO (named pipe), not a regular file"),
              std::string::npos)
        << r.out;
    r = run({"checkpoint", "list", root()});
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("4          invalid"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2          committed*"), std::string::npos) << r.out;
  }
}

// A step directory without read permission is listed as unreadable with the
// errno, not as "uncommitted: the save did not finish". The tests run as root,
// which reads it anyway: the binary runs as nobody (setpriv) when we are root.
TEST_F(CheckpointCli, UnreadableStepDirectorySaysWhy) {
  ck::Store store(root());
  store.save(anchor::test::make_request(2, 100));
  auto dir = store.save(anchor::test::make_request(4, 100)).dir;
  ASSERT_EQ(::chmod(dir.c_str(), 0), 0);
  std::vector<std::string> args = {"/usr/bin/timeout", "-s", "KILL", "60"};
  if (::geteuid() == 0) {
    if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "running as root without setpriv";
    args.insert(args.end(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
  }
  args.insert(args.end(), {ANCHOR_BINARY, "checkpoint", "list", root()});
  anchor::proc::SpawnOptions o;
  o.env["ANCHOR_LOG_LEVEL"] = "warn";
  auto r = anchor::proc::run_capture(args, o);
  ::chmod(dir.c_str(), 0755);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("4          unreadable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot list " + dir + ": Permission denied (EACCES)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("save did not finish"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2          committed*"), std::string::npos) << r.out;
}

}  // namespace
