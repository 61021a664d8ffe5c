// The two binaries (src/cli/bridge.hpp): `anchor` runs the supervisor without
// LibTorch; anchor-torch trains and pins. These tests read the binaries'
// dynamic sections and drive the real commands.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <chrono>
#include <sstream>
#include <nlohmann/json.hpp>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::TempDir;
const std::string kPilot = std::string(ANCHOR_SOURCE_DIR) + "/configs/pilot.yaml";

// The NEEDED entries of an ELF file, as readelf -d lists them.
std::string needed(const std::string& elf) {
  auto r = anchor::proc::run_capture({"/usr/bin/readelf", "-d", elf});
  EXPECT_EQ(r.status, 0) << "readelf -d " << elf << " failed: " << r.out;
  std::string out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.find("(NEEDED)") != std::string::npos) out += line + "\n";
  return out;
}

// The pinned libraries as "path sha256" lines (the `cached` flags aside).
std::vector<std::string> pinned_libraries(const nlohmann::json& manifest) {
  std::vector<std::string> out;
  for (const auto& l : manifest["dependencies"]["shared_libraries"])
    out.push_back(l["path"].get<std::string>() + " " + l["sha256"].dump());
  return out;
}

bool pins_library(const nlohmann::json& manifest, const std::string& name) {
  for (const auto& l : manifest["dependencies"]["shared_libraries"])
    if (l["path"].get<std::string>().find(name) != std::string::npos) return true;
  return false;
}

TEST(FrontEnd, LinksNoLibTorchWhileTheWorkerBinaryDoes) {
  const std::string front = needed(ANCHOR_BINARY), torch = needed(ANCHOR_TORCH_BINARY);
  EXPECT_EQ(front.find("libtorch"), std::string::npos) << front;
  EXPECT_EQ(front.find("libc10"), std::string::npos) << front;
  EXPECT_NE(front.find("libcrypto"), std::string::npos) << "the check reads NEEDED entries: " << front;
  // Negative control: the same check sees LibTorch in anchor-torch.
  EXPECT_NE(torch.find("libtorch_cpu"), std::string::npos) << torch;
}

// PyTorch 2.x with CUDA (the torch2 build, what a GPU node runs): the worker
// binary links LibTorch's CUDA libraries and ProcessGroupNCCL for real, and the
// loader finds NCCL; a CPU LibTorch (Debian's) links none of them. The front
// end never does.
TEST(FrontEnd, WorkerBinaryLinksCudaAndNcclExactlyWhenItsLibTorchHasThem) {
  const std::string front = needed(ANCHOR_BINARY), torch = needed(ANCHOR_TORCH_BINARY);
  EXPECT_EQ(front.find("cuda"), std::string::npos) << front;
  if (!anchor::build::kLibTorchHasCuda) {
    EXPECT_EQ(torch.find("cuda"), std::string::npos) << torch;
    return;
  }
  EXPECT_NE(torch.find("libtorch_cuda.so"), std::string::npos) << torch;
  EXPECT_NE(torch.find("libc10_cuda.so"), std::string::npos) << torch;
  const auto ldd = anchor::proc::run_capture({"/usr/bin/ldd", ANCHOR_TORCH_BINARY});
  ASSERT_EQ(ldd.status, 0) << ldd.out;
  EXPECT_NE(ldd.out.find("libnccl.so.2 => /"), std::string::npos) << ldd.out;
  EXPECT_EQ(ldd.out.find("not found"), std::string::npos) << ldd.out;
  const auto nm = anchor::proc::run_capture({"/usr/bin/nm", "-D", "-C", "--undefined-only", ANCHOR_TORCH_BINARY});
  ASSERT_EQ(nm.status, 0) << nm.out;
  EXPECT_NE(nm.out.find("c10d::ProcessGroupNCCL::ProcessGroupNCCL("), std::string::npos)
      << "anchor-torch constructs the NCCL group itself (src/dist/process_group.cpp)";
}

// The GPU libraries the worker loaded are pinned with the versions torch
// itself reports for the same wheel (its Python, ANCHOR_TEST_PYTHON): CUDA
// runtime, cuDNN and NCCL answer without a GPU. A CPU LibTorch pins none.
TEST(FrontEnd, ManifestPinsTheGpuRuntimeVersionsTorchReports) {
  TempDir t("frontend-gpu-pins");
  auto r = run_anchor({"pin", kPilot, "-o", t.str("manifest.json")});
  ASSERT_EQ(r.status, 0) << r.output;
  const auto deps = nlohmann::json::parse(anchor::fs::read_file(t.str("manifest.json")))["dependencies"];
  anchor::proc::SpawnOptions o;
  o.merge_stderr = false;
  const auto py =
      anchor::proc::run_capture({ANCHOR_TEST_PYTHON, "-c",
                                 "import torch\n"
                                 "c = torch.backends.cudnn.version() if torch.version.cuda else None\n"
                                 "n = torch.cuda.nccl.version() if torch.version.cuda else None\n"
                                 "print(torch.__version__)\n"
                                 "print(torch.version.cuda or 'none')\n"
                                 "print('%d.%d.%d' % (c // 10000, c % 10000 // 100, c % 100) if c else 'none')\n"
                                 "print('.'.join(map(str, n)) if n else 'none')\n"},
                                o);
  ASSERT_EQ(py.status, 0) << py.out;
  std::istringstream in(py.out);
  std::string torch_version, cuda, cudnn, nccl;
  in >> torch_version >> cuda >> cudnn >> nccl;
  EXPECT_EQ(torch_version.rfind(deps["libtorch"].get<std::string>(), 0), 0u)
      << "the worker's LibTorch " << deps["libtorch"] << " is the Python's torch " << torch_version;
  EXPECT_EQ(deps["cuda_runtime"], cuda) << deps.dump(2);
  EXPECT_EQ(deps["cudnn"], cudnn) << deps.dump(2);
  EXPECT_EQ(deps["nccl"], nccl) << deps.dump(2);
  EXPECT_EQ(cuda != "none", anchor::build::kLibTorchHasCuda);
}

TEST(FrontEnd, PilotManifestPinsTheProcessThatTrains) {
  TempDir t("frontend-pilot");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run")});
  ASSERT_EQ(r.status, 0) << r.output;
  auto m = nlohmann::json::parse(anchor::fs::read_file(t.str("run") + "/manifest.json"));
  EXPECT_TRUE(pins_library(m, "libtorch_cpu")) << "worker A pins its own libraries, LibTorch among them";
  EXPECT_EQ(std::filesystem::path(m["dependencies"]["executable"]["path"].get<std::string>()).filename(),
            "anchor-torch");
  auto report = nlohmann::json::parse(anchor::fs::read_file(t.str("run") + "/report.json"));
  EXPECT_EQ(report["manifest"], m) << "the report embeds the manifest worker A wrote";
  EXPECT_EQ(report["stages"][0]["stage"], "preflight");  // the node, before anything is pinned
  EXPECT_EQ(report["stages"][1]["stage"], "pin");
  EXPECT_EQ(report["stages"][1]["figures"]["reused"], false);
}

// `anchor pin` runs in the front end and pins anchor-torch's process: it asks
// anchor-torch once (source "probed") and reuses the answer (source "cached")
// until the binary, the loader's environment or configuration, or a library
// changes. The answer is the one anchor-torch gives when it pins itself.
TEST(FrontEnd, PinAsksTheTorchBinaryOnceAndReusesTheAnswerUntilSomethingChanges) {
  TempDir t("frontend-pin");
  // A copy of both binaries: touching it must not disturb the build tree.
  std::filesystem::create_directories(t.str("bin"));
  const std::string front = t.str("bin/anchor"), torch = t.str("bin/anchor-torch");
  std::filesystem::copy_file(ANCHOR_BINARY, front);
  std::filesystem::copy_file(ANCHOR_TORCH_BINARY, torch);
  // An answer is cached once what it rests on is 100 ms old (docs/manifest.md).
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::map<std::string, std::string> env = {{"ANCHOR_CACHE_DIR", t.str("cache")}};
  int n = 0;
  auto pin = [&](const std::map<std::string, std::string>& extra = {}, std::vector<std::string> more = {}) {
    const std::string out = t.str("m" + std::to_string(++n) + ".json");
    anchor::proc::SpawnOptions o;
    o.env = env;
    for (auto& [k, v] : extra) o.env[k] = v;
    o.merge_stderr = true;
    std::vector<std::string> argv = {front, "pin", kPilot, "-o", out};
    argv.insert(argv.end(), more.begin(), more.end());
    const auto r = anchor::proc::run_capture(argv, o);
    EXPECT_EQ(r.status, 0) << r.out;
    return std::make_pair(nlohmann::json::parse(anchor::fs::read_file(out)), r.out);
  };
  auto source = [](const nlohmann::json& m) { return m["hashing"]["training_process"]["source"].get<std::string>(); };

  const auto [first, first_out] = pin();
  EXPECT_EQ(source(first), "probed") << first_out;
  EXPECT_TRUE(pins_library(first, "libtorch_cpu")) << "the libraries of the process that trains";
  EXPECT_EQ(first["dependencies"]["executable"]["path"], std::filesystem::canonical(torch).string());
  const auto [second, second_out] = pin();
  EXPECT_EQ(source(second), "cached") << second_out;
  EXPECT_EQ(pinned_libraries(second), pinned_libraries(first));
  for (const char* k : {"libtorch", "cuda_runtime", "cudnn", "nccl"})
    EXPECT_EQ(second["dependencies"][k], first["dependencies"][k]) << k;
  EXPECT_EQ(second["device"], first["device"]);

  // anchor-torch pinning itself lists the same libraries (its own path aside).
  {
    anchor::proc::SpawnOptions o;
    o.env = env;
    o.merge_stderr = true;
    const auto r = anchor::proc::run_capture({torch, "pin", kPilot, "-o", t.str("self.json")}, o);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto self = nlohmann::json::parse(anchor::fs::read_file(t.str("self.json")));
    EXPECT_EQ(source(self), "this process");
    EXPECT_EQ(pinned_libraries(self), pinned_libraries(first));
    EXPECT_EQ(self["device"], first["device"]);
  }

  // Each change asks again; the answer after it is cached in turn.
  EXPECT_EQ(source(pin({{"LD_LIBRARY_PATH", t.str("nowhere")}}).first), "probed") << "the loader's environment";
  EXPECT_EQ(source(pin({{"LD_LIBRARY_PATH", t.str("nowhere")}}).first), "cached");
  EXPECT_EQ(source(pin().first), "probed") << "one answer per binary and device: the latest";
  EXPECT_EQ(source(pin().first), "cached");
  const timespec later[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, torch.c_str(), later, 0), 0);
  EXPECT_EQ(source(pin().first), "probed") << "anchor-torch changed";
  const std::string cache = t.str("cache/process-facts.json");
  const std::string before = anchor::fs::read_file(cache);
  EXPECT_EQ(source(pin({}, {"--no-cache"}).first), "probed") << "--no-cache never reads the cache";
  EXPECT_EQ(anchor::fs::read_file(cache), before) << "nor writes it";

  // A cache that is not one, or whose answer is nonsense: a warning, asked again, rewritten.
  anchor::fs::atomic_write_file(cache, "{not json");
  const auto [garbled, garbled_out] = pin();
  EXPECT_EQ(source(garbled), "probed");
  EXPECT_NE(garbled_out.find("cannot be read"), std::string::npos) << garbled_out;
  EXPECT_EQ(source(pin().first), "cached") << "rewritten by the probe";
  auto poisoned = nlohmann::json::parse(anchor::fs::read_file(cache));
  for (auto& [name, entry] : poisoned["entries"].items()) entry["facts"]["libraries"][0]["path"] = "relative.so";
  anchor::fs::atomic_write_file(cache, poisoned.dump());
  const auto [refused, refused_out] = pin();
  EXPECT_EQ(source(refused), "probed");
  EXPECT_NE(refused_out.find("libraries[0].path is not an absolute path"), std::string::npos) << refused_out;
  EXPECT_EQ(pinned_libraries(refused), pinned_libraries(first));
}

TEST(FrontEnd, MissingTorchBinaryIsAClearErrorThatWritesNothing) {
  TempDir t("frontend-alone");
  const std::string alone = t.str("anchor");
  std::filesystem::copy_file(ANCHOR_BINARY, alone);
  ::chmod(alone.c_str(), 0755);
  anchor::proc::SpawnOptions o;
  o.merge_stderr = true;
  auto pin = anchor::proc::run_capture({alone, "pin", kPilot, "-o", t.str("m.json")}, o);
  EXPECT_EQ(pin.status, 1) << pin.out;
  EXPECT_NE(pin.out.find("cannot start " + t.str("anchor-torch")), std::string::npos) << pin.out;
  EXPECT_NE(pin.out.find("No such file"), std::string::npos) << pin.out;
  EXPECT_FALSE(std::filesystem::exists(t.str("m.json")));

  auto pilot = anchor::proc::run_capture({alone, "pilot", kPilot, "--run-dir", t.str("run")}, o);
  EXPECT_EQ(pilot.status, 1) << pilot.out;
  EXPECT_NE(pilot.out.find("worker binary"), std::string::npos) << pilot.out;
  EXPECT_NE(pilot.out.find("anchor-torch"), std::string::npos) << pilot.out;
  EXPECT_FALSE(std::filesystem::exists(t.str("run"))) << "no run directory for a pilot that cannot start";
  // `anchor --version` and `config check` need no LibTorch and still work alone.
  auto check = anchor::proc::run_capture({alone, "config", "check", kPilot}, o);
  EXPECT_EQ(check.status, 0) << check.out;
}

}  // namespace

namespace {

// Runs `anchor args...` with stderr and stdout on a pseudo-terminal and returns what it wrote there.
// The environment is this process's with `set` applied and `unset` removed, built before the fork
// (nothing but execve runs in the child). It is killed and the test fails after 120 s.
std::string run_on_a_terminal(const std::vector<std::string>& args, const std::map<std::string, std::string>& set,
                              const std::vector<std::string>& unset) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e, key = kv.substr(0, kv.find('='));
    if (!set.count(key) && std::find(unset.begin(), unset.end(), key) == unset.end()) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  std::vector<char*> envp, argv{const_cast<char*>(ANCHOR_BINARY)};
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) {
    ADD_FAILURE() << "forkpty: " << std::strerror(errno);
    return {};
  }
  if (pid == 0) {
    ::execve(ANCHOR_BINARY, argv.data(), envp.data());
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{master, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      ADD_FAILURE() << "anchor wrote nothing more for 120 s; killed. So far:\n" << out;
      ::kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0)
      out.append(buf, static_cast<std::size_t>(n));
    else if (n < 0 && errno == EINTR)
      continue;
    else
      break;  // EIO: the child closed the terminal
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  return out;
}

}  // namespace

// NO_COLOR (no-color.org): set and not empty, anchor's log lines carry no colour even on a
// terminal. The negative control: without it the same warning is coloured there.
TEST(FrontEnd, NoColorTurnsColourOffOnATerminal) {
  TempDir t("no-color");
  const std::string cache = (t.path() / "cache").string();
  std::filesystem::create_directories(cache);
  auto warned = [&](const std::map<std::string, std::string>& set, const std::vector<std::string>& unset) {
    // A garbled process-facts cache: anchor warns and rewrites it, so write it again each time.
    std::ofstream(cache + "/process-facts.json") << "garbage";
    std::string out = run_on_a_terminal({"pin", kPilot, "-o", (t.path() / "m.json").string()}, set, unset);
    const auto first = out.find("process-facts cache");
    EXPECT_NE(first, std::string::npos) << out;
    EXPECT_EQ(out.find("process-facts cache", first + 1), std::string::npos) << "warned twice:\n" << out;
    return out;
  };
  std::map<std::string, std::string> env = {{"ANCHOR_CACHE_DIR", cache}, {"TERM", "xterm-256color"}};
  EXPECT_NE(warned(env, {"NO_COLOR", "ANCHOR_LOG_LEVEL"}).find("\x1b["), std::string::npos)
      << "no colour on a terminal without NO_COLOR";
  env["NO_COLOR"] = "1";
  EXPECT_EQ(warned(env, {"ANCHOR_LOG_LEVEL"}).find("\x1b["), std::string::npos);
  env["NO_COLOR"] = "";  // empty: as unset
  EXPECT_NE(warned(env, {"ANCHOR_LOG_LEVEL"}).find("\x1b["), std::string::npos);
}

// -q/--quiet is --log-level warn and -v/--verbose --log-level debug, over ANCHOR_LOG_LEVEL;
// the two together are a usage error. A pilot that fails at its start shows the difference at once.
TEST(FrontEnd, QuietKeepsWarningsAndErrorsOnly) {
  TempDir t("quiet");
  auto pilot = [&](std::vector<std::string> flags, const std::map<std::string, std::string>& env = {}) {
    std::error_code ec;
    std::filesystem::remove_all(t.path() / "run", ec);
    // An unsigned run: its UNSIGNED warning is the warning -q must keep.
    const std::vector<std::string> args = {"pilot",     kPilot,
                                           "--run-dir", (t.path() / "run").string(),
                                           "--set",     "pilot.start_from=latest",
                                           "--set",     "report.signing_key=none"};
    flags.insert(flags.end(), args.begin(), args.end());
    return run_anchor(flags, env);
  };
  const std::string run_line = "[pilot] run ", failed = "pilot failed in stage start", unsigned_ = "UNSIGNED";
  auto plain = pilot({}, {{"ANCHOR_LOG_LEVEL", "info"}});
  EXPECT_EQ(plain.status, 2) << plain.output;
  EXPECT_NE(plain.output.find(run_line), std::string::npos) << plain.output;  // the negative control
  for (const auto& [flags, env] : std::vector<std::pair<std::vector<std::string>, std::map<std::string, std::string>>>{
           {{"-q"}, {{"ANCHOR_LOG_LEVEL", "info"}}}, {{"--quiet"}, {{"ANCHOR_LOG_LEVEL", "debug"}}}}) {
    auto q = pilot(flags, env);
    EXPECT_EQ(q.status, 2) << q.output;
    EXPECT_EQ(q.output.find(run_line), std::string::npos) << q.output;
    EXPECT_NE(q.output.find(unsigned_), std::string::npos) << q.output;
    EXPECT_NE(q.output.find(failed), std::string::npos) << q.output;
  }
  auto v = pilot({"--verbose"}, {{"ANCHOR_LOG_LEVEL", "error"}});
  EXPECT_EQ(v.status, 2) << v.output;
  EXPECT_NE(v.output.find(run_line), std::string::npos) << v.output;
  // -q never raises the level: with error or off it stays there.
  auto q_off = pilot({"-q", "--log-level", "off"});
  EXPECT_EQ(q_off.status, 2) << q_off.output;
  EXPECT_EQ(q_off.output.find(unsigned_), std::string::npos) << q_off.output;
  EXPECT_NE(q_off.output.find(failed), std::string::npos) << q_off.output;  // the error is not a log line
  auto both = pilot({"-q", "-v"});
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.output.find("--quiet excludes --verbose"), std::string::npos) << both.output;
}

namespace {

// Command-line conventions: a mistyped command is named with the nearest one,
// a number outside its range is refused in words, help has no CLI11 noise,
// and --version says what the binary was built against and from which commit.
TEST(FrontEnd, CommandLineConventions) {
  auto typo = run_anchor({"pilto", kPilot});
  EXPECT_EQ(typo.status, 2) << typo.output;
  EXPECT_NE(typo.output.find("unknown command 'pilto' (did you mean 'pilot'?)"), std::string::npos) << typo.output;
  EXPECT_NE(typo.output.find("the commands are pilot, reproduce,"), std::string::npos) << typo.output;
  EXPECT_EQ(typo.output.find("__worker"), std::string::npos) << "internal commands are not offered: " << typo.output;
  auto far = run_anchor({"--log-level", "warn", "frobnicate"});
  EXPECT_EQ(far.status, 2) << far.output;
  EXPECT_NE(far.output.find("unknown command 'frobnicate'\n"), std::string::npos)
      << "nothing is near it: " << far.output;

  auto zero = run_anchor({"pilot", kPilot, "--nproc-per-node", "0"});
  EXPECT_EQ(zero.status, 2) << zero.output;
  EXPECT_NE(
      zero.output.find("--nproc-per-node: must be a whole number of at least 1 (and at most 2147483647), got '0'"),
      std::string::npos)
      << zero.output;
  auto huge = run_anchor({"pilot", kPilot, "--nproc-per-node", "3000000000"});
  EXPECT_EQ(huge.status, 2) << huge.output;
  EXPECT_NE(huge.output.find("must be a whole number of at least 1 (and at most 2147483647), got '3000000000'"),
            std::string::npos)
      << huge.output;
  // A mistyped option before the command is about the option, not the word after it.
  auto option = run_anchor({"--log-lvl", "debug", "pilot", kPilot});
  EXPECT_EQ(option.status, 2) << option.output;
  EXPECT_EQ(option.output.find("unknown command"), std::string::npos) << option.output;
  EXPECT_NE(option.output.find("--log-lvl"), std::string::npos) << option.output;
  EXPECT_EQ(zero.output.find("179769"), std::string::npos) << zero.output;
  auto words = run_anchor({"pin", kPilot, "--threads", "two"});
  EXPECT_EQ(words.status, 2) << words.output;
  EXPECT_NE(words.output.find("--threads: must be a whole number of at least 0 (and at most 2147483647), got 'two'"),
            std::string::npos)
      << words.output;

  for (const char* cmd : {"pilot", "reproduce", "pin"}) {
    auto help = run_anchor({cmd, "--help"});
    EXPECT_EQ(help.status, 0) << help.output;
    EXPECT_EQ(help.output.find("{false}"), std::string::npos) << cmd << ":\n" << help.output;
    EXPECT_NE(help.output.find("--"), std::string::npos) << cmd << ":\n" << help.output;
    // Its name, not the path it was run by (issue 43.13).
    EXPECT_NE(help.output.find(std::string("Usage: anchor ") + cmd), std::string::npos) << help.output;
    EXPECT_EQ(help.output.find(std::string("Usage: ") + ANCHOR_BINARY), std::string::npos) << help.output;
  }

  auto version = run_anchor({"--version"});
  EXPECT_EQ(version.status, 0) << version.output;
  EXPECT_NE(version.output.find(std::string("built against LibTorch ") + anchor::build::kLibTorchVersion),
            std::string::npos)
      << version.output;
  EXPECT_NE(version.output.find(anchor::build::kLibTorchHasCuda ? ", CUDA " : ", CPU only"), std::string::npos)
      << version.output;
  EXPECT_NE(version.output.find(std::string("build ") + anchor::build::kBuildType), std::string::npos)
      << version.output;
  // The commit is read when the binary is built, not when the build was configured.
  auto head = anchor::proc::run_capture({"/usr/bin/git", "-C", ANCHOR_SOURCE_DIR, "rev-parse", "HEAD"});
  const std::string commit = head.status == 0 ? head.out.substr(0, head.out.find('\n')) : "unknown";
  EXPECT_NE(version.output.find("anchor " + std::string(anchor::build::kVersion) + " (" + commit), std::string::npos)
      << version.output << "(HEAD is " << commit << "; rebuild after a commit)";
}

// -v shows debug lines, which the default level does not: the front end's
// hand-over to anchor-torch is one.
TEST(FrontEnd, VerboseShowsDebugLines) {
  TempDir t("verbose");
  const std::string line = "[cli] handing over to ", refused = "anchor: error: open " + t.str("none.json");
  auto plain = run_anchor({"reproduce", t.str("none.json")}, {{"ANCHOR_LOG_LEVEL", "info"}});
  EXPECT_NE(plain.output.find(refused), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find(line), std::string::npos) << plain.output;
  auto verbose = run_anchor({"-v", "reproduce", t.str("none.json")}, {{"ANCHOR_LOG_LEVEL", "info"}});
  EXPECT_NE(verbose.output.find(refused), std::string::npos) << verbose.output;
  EXPECT_NE(verbose.output.find(line), std::string::npos) << verbose.output;
}

// An error that quotes a hostile name (a path holding ESC sequences that
// would clear the screen and retitle the window) shows the escapes, not
// sends them: every error line goes through for_terminal. The control: the
// same name's printable text is in the message.
TEST(FrontEnd, AnErrorShowsTerminalEscapesInsteadOfSendingThem) {
  TempDir t("escapes");
  const std::string hostile = t.str("\x1b]0;owned\x07\x1b[2Jreport.json");
  auto r = run_anchor({"verify", hostile});
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\x07'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\\x1b]0;owned\\x07\\x1b[2Jreport.json"), std::string::npos) << r.output;
}

}  // namespace
