// `anchor config check|dump` driven as a user would: the real binary, its exit
// codes, and every problem printed with file:line:column.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace stdfs = std::filesystem;

const std::string kPilot = std::string(ANCHOR_SOURCE_DIR) + "/configs/pilot.yaml";

std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// Runs the binary with stderr folded into stdout (problems go to stderr).
anchor::proc::RunResult anchor_run(const std::vector<std::string>& args) {
  std::string cmd = sh_quote(ANCHOR_BINARY);
  for (const auto& a : args) cmd += " " + sh_quote(a);
  return anchor::proc::run_capture({"/bin/sh", "-c", cmd + " 2>&1"});
}

class ConfigCli : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    auto p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  anchor::testing::TempDir tmp_{"e2e-config"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_F(ConfigCli, BadConfigPrintsEveryProblemAndExits2) {
  const std::string bad = write("bad.yaml",
                                "run:\n"
                                "  threads: 0\n"
                                "model:\n"
                                "  n_layr: 4\n"
                                "data:\n"
                                "  train: [a.txt]\n"
                                "train:\n"
                                "  precision: fp8\n");
  auto r = anchor_run({"config", "check", bad});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("anchor: error: config " + bad + " has 3 problems"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bad + ":2:12: run.threads: must be >= 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bad + ":4:3: model.n_layr: unknown key 'n_layr' (did you mean "
                             "'model.n_layer'?)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(bad + ":8:14: train.precision: 'fp8' is not allowed; allowed: fp32, "
                             "bf16, fp16"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("hint: see docs/config.md"), std::string::npos) << r.out;

  // --json: the same problems as one document on stdout, the same exit code; a good config's digest.
  auto j = anchor::proc::run_capture({ANCHOR_BINARY, "config", "check", bad, "--json"});
  EXPECT_EQ(j.status, 2) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_FALSE(doc["ok"].get<bool>());
  ASSERT_EQ(doc["problems"].size(), 3u) << doc.dump(2);
  EXPECT_EQ(doc["problems"][1]["key"], "model.n_layr");
  EXPECT_EQ(doc["problems"][1]["line"], 4);
  EXPECT_EQ(doc["problems"][1]["column"], 3);
  auto good = anchor::proc::run_capture({ANCHOR_BINARY, "config", "check", kPilot, "--json"});
  EXPECT_EQ(good.status, 0) << good.out;
  const auto ok = nlohmann::json::parse(good.out);
  EXPECT_TRUE(ok["ok"].get<bool>());
  EXPECT_TRUE(ok["problems"].empty());
  EXPECT_EQ(ok["config_digest"].get<std::string>().size(), 64u);
}

TEST_F(ConfigCli, PilotConfigChecksOk) {
  auto r = anchor_run({"config", "check", kPilot});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("ok \\(config digest [0-9a-f]{64}\\)"))) << r.out;
}

TEST_F(ConfigCli, DumpReflectsSet) {
  auto plain = anchor_run({"config", "dump", kPilot, "--json"});
  ASSERT_EQ(plain.status, 0) << plain.out;
  auto set = anchor_run({"config", "dump", kPilot, "--json", "--set", "train.micro_batch=8", "--set", "run.name=e2e"});
  ASSERT_EQ(set.status, 0) << set.out;
  auto j0 = nlohmann::json::parse(plain.out);
  auto j1 = nlohmann::json::parse(set.out);
  EXPECT_EQ(j0["train"]["micro_batch"], 4);  // from the file
  EXPECT_EQ(j1["train"]["micro_batch"], 8);  // --set wins
  EXPECT_EQ(j1["run"]["name"], "e2e");
  EXPECT_EQ(j1["train"]["grad_accum"], j0["train"]["grad_accum"]);

  auto y = anchor_run({"config", "dump", kPilot, "--set", "train.micro_batch=8"});
  ASSERT_EQ(y.status, 0) << y.out;
  EXPECT_NE(y.out.find("\ntrain:\n  micro_batch: 8\n"), std::string::npos) << y.out;
}

TEST_F(ConfigCli, BadSetExits2) {
  auto r = anchor_run({"config", "dump", kPilot, "--set", "train.micro_bach=8"});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--set: train.micro_bach: unknown key (did you mean 'train.micro_batch'?)"), std::string::npos)
      << r.out;
}

TEST_F(ConfigCli, MissingFileIsRuntimeErrorNamingPath) {
  const std::string missing = (dir_ / "missing.yaml").string();
  auto r = anchor_run({"config", "check", missing});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(missing), std::string::npos) << r.out;
}

// Issue 14: `--set key=` skipped the checks, so `config check` passed an empty
// device, precision and architecture.
TEST_F(ConfigCli, EmptyOverridesAreCheckedByConfigCheck) {
  auto r =
      anchor_run({"config", "check", kPilot, "--set", "device=", "--set", "train.precision=", "--set", "model.arch="});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("has 3 problems"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--set: device: '' is not a device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--set: train.precision: '' is not allowed; allowed: fp32, bf16, fp16"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--set: model.arch: '' is not allowed; allowed: gpt"), std::string::npos) << r.out;
  // Negative control: a key whose empty value means something (unsigned) may be emptied.
  auto ok = anchor_run({"config", "check", kPilot, "--set", "report.signing_key="});
  EXPECT_EQ(ok.status, 0) << ok.out;
}

// Issue 14: `anchor pilot ... --set run.output_dir=` put its run directory at
// the filesystem root. It is a config problem (exit 2), and nothing is written:
// not in the current directory, not at /.
TEST_F(ConfigCli, PilotWithAnEmptyOutputDirWritesNothing) {
  const std::string name = "e2e-empty-output-dir-" + std::to_string(::getpid());
  auto at_root = [&] {
    std::vector<stdfs::path> found;
    for (const auto& e : stdfs::directory_iterator("/"))
      if (e.path().filename().string().rfind(name, 0) == 0) found.push_back(e.path());
    return found;
  };
  ASSERT_TRUE(at_root().empty());
  const std::string cmd = "cd " + sh_quote(dir_.string()) + " && exec " + sh_quote(ANCHOR_BINARY) + " pilot " +
                          sh_quote(kPilot) + " --set run.output_dir= --set run.name=" + name + " 2>&1";
  auto r = anchor::proc::run_capture({"/bin/sh", "-c", cmd});
  const auto leftovers = at_root();
  for (const auto& p : leftovers) stdfs::remove_all(p);  // what the bug left behind, if it ran as root
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--set: run.output_dir: must not be empty"), std::string::npos) << r.out;
  EXPECT_TRUE(leftovers.empty()) << "the pilot wrote " << leftovers.front();
  EXPECT_TRUE(stdfs::is_empty(dir_)) << "the pilot wrote into the current directory";
}

// Issue 14: a NUL byte in a path (YAML's "\0" escape) is a problem at its line
// and column, not a path that C APIs see cut short.
TEST_F(ConfigCli, NulByteInAPathIsAProblemWithItsPosition) {
  const std::string bad = write("nul.yaml", "data:\n  train: [\"a\\0b.txt\"]\ncheckpoint: {dir: \"ck\\0\"}\n");
  auto r = anchor_run({"config", "check", bad});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(bad + ":2:11: data.train: a list entry contains a NUL byte"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(bad + ":3:19: checkpoint.dir: the value contains a NUL byte"), std::string::npos) << r.out;
}

}  // namespace
