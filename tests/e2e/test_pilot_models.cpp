// End-to-end (issue 8): the pilot on the long run's real options.
// - A user's TorchScript model, built here by the torch of this build (ANCHOR_TEST_PYTHON):
//   the whole pilot passes with bitwise resume; its dropout draws from the
//   checkpointed generator (dropping the RNG state changes the resumed losses);
//   a module that breaks the contract is a config error (exit 2) naming the file
//   and the problem.
// - Activation checkpointing: the pilot still resumes bitwise, and the report
//   states the measured trade.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

using anchor::testing::read_json;

// The fixtures, built once for the suite. No torch for ANCHOR_TEST_PYTHON is a
// failure, not a skip: the test exists to run the pilot on a real module.
class TorchScriptPilot : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("torchscript");
    anchor::proc::SpawnOptions o;
    o.merge_stderr = true;
    auto r = anchor::proc::run_capture(
        {ANCHOR_TEST_PYTHON, source_path("tests/support/make_torchscript.py"), dir_->str()}, o);
    build_status_ = r.status;
    build_output_ = r.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(build_status_, 0) << ANCHOR_TEST_PYTHON << " could not build the TorchScript fixtures (needs torch):\n"
                                << build_output_;
  }
  static std::string module(const std::string& name) { return dir_->str(name + ".pt"); }
  static std::vector<std::string> pilot_args(const std::string& pt, const std::string& run_dir) {
    return {
        "pilot", kPilot, "--run-dir", run_dir, "--set", "model.source=torchscript", "--set", "model.torchscript=" + pt};
  }

  static TempDir* dir_;
  static int build_status_;
  static std::string build_output_;
};
TempDir* TorchScriptPilot::dir_ = nullptr;
int TorchScriptPilot::build_status_ = -1;
std::string TorchScriptPilot::build_output_;

TEST_F(TorchScriptPilot, FullPilotPassesWithBitwiseResume) {
  TempDir t("ts-pilot");
  auto r = run_anchor(pilot_args(module("gpt"), t.str("run")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("passed: resume matches the uninterrupted run (bitwise)"), std::string::npos) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  EXPECT_EQ(report["eval"]["before_save"], report["eval"]["after_restore"]);
  // It trained: the loss moved, and the module's own parameter names are the checkpoint's keys.
  const auto& steps = report["steps"]["train"];
  ASSERT_GE(steps.size(), 2u);
  EXPECT_NE(steps[0]["loss"], steps[1]["loss"]);
  const auto& model = report["measurements"]["model"];
  EXPECT_EQ(model["source"], "torchscript");
  EXPECT_NE(model["flops_per_token_note"].get<std::string>().find("6N"), std::string::npos);
  EXPECT_DOUBLE_EQ(model["flops_per_token"].get<double>(), 6.0 * model["parameters"].get<double>());
  const std::string ckpt = anchor::fs::read_file(t.str("run/checkpoints/step-00000002/model.safetensors"));
  EXPECT_NE(ckpt.find("blocks.0.attn.in_proj_weight"), std::string::npos);
  EXPECT_NE(ckpt.find("blocks.1.mask"), std::string::npos) << "buffers are checkpointed by name too";
  // The module file is pinned by SHA-256.
  const auto digest = anchor::sha256_file(module("gpt")).sha256;
  EXPECT_NE(anchor::fs::read_file(t.str("run/manifest.json")).find(digest), std::string::npos);
}

// Tied weights (one tensor under two names): the checkpoint holds both names,
// the restore copies into the one tensor twice, and the state digests (which
// hash such names again rather than reuse the file's digests) still match.
TEST_F(TorchScriptPilot, ATiedModuleResumesBitwise) {
  TempDir t("ts-tied");
  auto r = run_anchor(pilot_args(module("tied"), t.str("run")));
  ASSERT_EQ(r.status, 0) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["state_digests"]["saved"], report["resume"]["state_digests"]["restored"]);
  const auto m = read_json(t.str("run/checkpoints/step-00000002/manifest.json"));
  for (const auto& f : m["files"])
    if (f["path"] == "model.safetensors") {
      ASSERT_TRUE(f["tensors"].contains("wte.weight")) << f.dump();
      ASSERT_TRUE(f["tensors"].contains("head.weight")) << f.dump();
      EXPECT_EQ(f["tensors"]["wte.weight"], f["tensors"]["head.weight"]) << "one tensor, saved under both names";
    }
}

TEST_F(TorchScriptPilot, ItsDropoutDrawsFromTheCheckpointedGenerator) {
  // Negative control: a restore without the RNG state resumes with other
  // dropout masks inside the scripted module, so the resumed losses differ.
  TempDir t("ts-neg");
  auto r = run_anchor(pilot_args(module("gpt"), t.str("run")), {{"ANCHOR_PILOT_FAULT", "drop_rng"}});
  ASSERT_EQ(r.status, 3) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "mismatch");
  ASSERT_FALSE(report["steps"]["resume"].empty());
  EXPECT_NE(report["steps"]["reference"][0]["loss"], report["steps"]["resume"][0]["loss"]);
}

struct BadModule {
  const char* name;
  const char* problem;  // in the message
};

class TorchScriptContract : public TorchScriptPilot, public ::testing::WithParamInterface<BadModule> {};

TEST_P(TorchScriptContract, BrokenContractIsAConfigErrorNamingFileAndProblem) {
  TempDir t("ts-bad");
  const std::string pt = module(GetParam().name);
  auto r = run_anchor(pilot_args(pt, t.str("run")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(pt), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(GetParam().problem), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("docs/models.md"), std::string::npos) << "the hint points at the contract\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(Modules, TorchScriptContract,
                         ::testing::Values(BadModule{"no_targets", "forward takes 1 argument(s)"},
                                           BadModule{"non_scalar", "not a scalar loss"},
                                           BadModule{"tuple_return", "not a Tensor"},
                                           BadModule{"frozen", "no trainable parameters"},
                                           BadModule{"pickled", "cannot load it as a TorchScript module"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ActivationCheckpointingPilot, ResumesBitwiseAndReportsTheTrade) {
  TempDir t("ackpt");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--set", "train.activation_checkpointing=1"});
  ASSERT_EQ(r.status, 0) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_TRUE(report["measurements"].contains("activation_checkpointing")) << report["measurements"].dump(2);
  const auto& ac = report["measurements"]["activation_checkpointing"];
  EXPECT_EQ(ac["every"], 1);
  EXPECT_EQ(ac["blocks_checkpointed"], 2);
  EXPECT_EQ(ac["source"], "counting_allocator");
  EXPECT_GT(ac["memory_saved_bytes"].get<double>(), 0) << ac.dump(2);
  EXPECT_EQ(ac["memory_saved_bytes"].get<double>(),
            ac["peak_allocated_bytes"]["without"].get<double>() - ac["peak_allocated_bytes"]["with"].get<double>());
  EXPECT_GT(ac["step_seconds"]["with"].get<double>(), 0);
  EXPECT_GT(ac["step_seconds"]["without"].get<double>(), 0);
  EXPECT_TRUE(ac["same_parameters"].get<bool>()) << "the recompute must not change the run";
  EXPECT_NE(ac["trade"].get<std::string>().find("saves"), std::string::npos);
  EXPECT_NE(anchor::fs::read_file(t.str("run/report.md")).find("## Activation checkpointing"), std::string::npos);
  bool stage = false;
  for (const auto& s : report["stages"]) stage |= s["stage"] == "activation_ckpt";
  EXPECT_TRUE(stage);
}

}  // namespace
