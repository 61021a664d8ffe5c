#pragma once
// A synthetic, signed run directory for the report tests:
//   <tmp>/keys/anchor.key, anchor.pub      (anchor keygen's layout)
//   <tmp>/run/manifest.json                (the pinned run manifest)
//   <tmp>/run/report.json                  (records both manifests)
//   <tmp>/run/report.md, config.json, events.jsonl, work/reference.json
//   <tmp>/run/checkpoints/step-00000002/   (a real checkpoint, written by checkpoint::Store:
//                                           model and optimizer safetensors, state.json,
//                                           manifest.json, COMMITTED)
//   <tmp>/run/checkpoints/step-00000004.tmp-1a2b3c4d/{manifest.json,COMMITTED}
//                                          (killed before its rename: not a checkpoint)
// Tests then sign it (sign_run) and tamper with copies of what it wrote.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/report/keys.hpp"

namespace anchor::report::testing {

namespace stdfs = std::filesystem;

inline std::string slurp(const std::string& path) { return fs::read_file(path); }

inline void spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

// Single-quotes a word for /bin/sh.
inline std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command line; returns (status, stdout+stderr).
inline proc::RunResult sh(const std::string& cmd) { return proc::run_capture({"/bin/sh", "-c", cmd + " 2>&1"}); }

inline mode_t file_mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = stdfs::temp_directory_path() / ("anchor-report-" + std::string(info->name()) + "-" + fs::random_suffix());
    stdfs::create_directories(root_);
    keys_ = (root_ / "keys").string();
    run_ = (root_ / "run").string();
    stdfs::create_directories(keys_);
    priv_ = keys_ + "/anchor.key";
    pub_ = keys_ + "/anchor.pub";
    KeygenOptions k;
    k.private_path = priv_;
    k.public_path = pub_;
    key_id_ = write_keypair(k).key_id;
    make_run();
  }
  void TearDown() override {
    std::error_code ec;
    stdfs::remove_all(root_, ec);
  }

  void make_run() {
    // A real checkpoint: verify checks its files against its manifest.
    std::vector<float> weights(16, 0.5f), moments(16, 0.25f);
    checkpoint::SaveRequest req;
    req.step = 2;
    req.files.push_back({"model.safetensors",
                         {{"wte.weight", checkpoint::DType::F32, {4, 4}, weights.data(), weights.size() * 4}},
                         {}});
    req.files.push_back({"optimizer.safetensors",
                         {{"wte.weight.exp_avg", checkpoint::DType::F32, {4, 4}, moments.data(), moments.size() * 4}},
                         {}});
    req.state = {{"format_version", 1}};
    checkpoint::Store(run_ + "/checkpoints").save(req);
    std::string ck = run_ + "/checkpoints/step-00000002";
    std::string manifest_sha = sha256_file(ck + "/manifest.json").sha256;
    std::string torn = run_ + "/checkpoints/step-00000004.tmp-1a2b3c4d";
    stdfs::create_directories(torn);
    spit(torn + "/manifest.json", "{\"torn\": true}\n");
    // Killed after COMMITTED, before the rename: still not a checkpoint.
    spit(torn + "/COMMITTED", sha256_file(torn + "/manifest.json").sha256 + "\n");

    nlohmann::ordered_json run_manifest = {{"config_digest", std::string(64, 'd')}, {"seeds", {{"root", 1234}}}};
    spit(run_ + "/manifest.json", run_manifest.dump(2));
    nlohmann::ordered_json report = {
        {"manifest", run_manifest},
        {"manifest_sha256", sha256_file(run_ + "/manifest.json").sha256},
        {"schema", "https://anchor.dev/report/v1"},
        {"run_id", "test-run"},
        {"verdict", "pass"},
        {"losses", {5.4123, 5.3987, 5.3871, 5.3702}},
        {"checkpoints", {{{"dir", "checkpoints/step-00000002"}, {"step", 2}, {"manifest_sha256", manifest_sha}}}},
    };
    spit(run_ + "/report.json", report.dump(2) + "\n");
    // The run's other files a reader trusts (run_files in src/report/run_dir.hpp).
    spit(run_ + "/report.md", "# anchor pilot test-run\n\n**passed**\n");
    spit(run_ + "/config.json", "{\"run_id\": \"test-run\"}\n");
    spit(run_ + "/events.jsonl", "{\"event\":\"start\",\"stage\":\"train\"}\n{\"event\":\"end\",\"loss\":5.4123}\n");
    stdfs::create_directories(run_ + "/work");
    spit(run_ + "/work/reference.json", "{\"train_steps\": [{\"loss\": 5.4123}]}\n");
  }

  // The subjects a sign_run of this run names: report.json, the five run
  // files, the one checkpoint's manifest.
  static constexpr std::size_t kSubjects = 7;

  std::string envelope() const { return run_ + "/report.intoto.json"; }
  std::string manifest() const { return run_ + "/checkpoints/step-00000002/manifest.json"; }

  // The decoded fields of the envelope, read with nlohmann only.
  nlohmann::json envelope_json() const { return nlohmann::json::parse(slurp(envelope())); }
  void write_envelope(const nlohmann::json& j) const { spit(envelope(), j.dump(2)); }

  // A second, unrelated key pair.
  std::pair<std::string, std::string> other_keypair() {
    KeygenOptions k;
    k.private_path = keys_ + "/other.key";
    k.public_path = keys_ + "/other.pub";
    write_keypair(k);
    return {k.private_path, k.public_path};
  }

  stdfs::path root_;
  std::string keys_, run_, priv_, pub_, key_id_;
};

// True when some failure starts with "<name>:" (and, if given, mentions `what`).
inline bool has_failure(const std::vector<std::string>& failures, const std::string& name,
                        const std::string& what = {}) {
  for (const auto& f : failures)
    if (f.rfind(name + ":", 0) == 0 && (what.empty() || f.find(what) != std::string::npos)) return true;
  return false;
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  " + s + "\n";
  return out;
}

}  // namespace anchor::report::testing
