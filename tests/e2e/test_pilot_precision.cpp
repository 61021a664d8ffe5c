// End-to-end: the pilot at bf16 (the precision stage, bitwise resume) and with
// the loss scaler on and an injected inf gradient: the skip and the back-off
// are in the report, the scaler state survives save/SIGKILL/restore, and a
// restore that drops it is caught (docs/precision.md).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

using anchor::testing::read_json;

std::vector<std::string> stage_names(const json& report) {
  std::vector<std::string> out;
  for (const auto& s : report["stages"]) out.push_back(s["stage"]);
  return out;
}

TEST(PilotPrecision, Bf16RunsTheValidationStageAndResumesBitwise) {
  TempDir t("bf16");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--set", "train.precision=bf16"});
  ASSERT_EQ(r.status, 0) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  const auto stages = stage_names(report);
  ASSERT_GE(stages.size(), 4u);
  EXPECT_EQ(stages[2], "load");
  EXPECT_EQ(stages[3], "precision");
  const auto& p = report["precision"];
  EXPECT_EQ(p["precision"], "bf16 autocast") << p.dump(2);
  EXPECT_TRUE(p["verdict"] == "ok" || p["verdict"] == "flagged");
  EXPECT_GT(p["loss"]["rel_diff"].get<double>(), 0.0) << "bf16 equal to fp32: autocast was not on";
  EXPECT_LT(p["loss"]["rel_diff"].get<double>(), 0.05);
  EXPECT_GT(p["grad_norm"]["rel_diff"].get<double>(), 0.0);
  EXPECT_TRUE(p["non_finite"].empty());
  EXPECT_EQ(report["measurements"]["memory"]["precision"], "bf16");
  const auto md = anchor::fs::read_file(t.str("run/report.md"));
  EXPECT_NE(md.find("## Precision"), std::string::npos) << md;
}

std::vector<std::string> scaler_args(const TempDir& t) {
  // K = 2, R = 2, growth after 2 clean steps: step 2 is skipped (inf), the
  // scale halves and is saved so in the checkpoint of step 2; steps 3 and 4
  // are clean and it grows back at step 4. Steps count from 1, as the log's.
  return {"pilot",     kPilot,
          "--run-dir", t.str("run"),
          "--set",     "train.precision=bf16",
          "--set",     "train.loss_scale.enabled=true",
          "--set",     "train.loss_scale.growth_interval=2"};
}

TEST(PilotPrecision, InjectedInfIsSkippedBacksOffAndTheScalerSurvivesTheKill) {
  TempDir t("scaler");
  auto r = run_anchor(scaler_args(t), {{"ANCHOR_GRAD_FAULT", "inf:2"}});
  ASSERT_EQ(r.status, 0) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "match") << report["resume"].dump(2);
  const auto& train = report["steps"]["train"];
  ASSERT_EQ(train.size(), 2u);
  EXPECT_FALSE(train[0]["skipped"].get<bool>());
  EXPECT_EQ(train[0]["loss_scale"], 65536.0);
  EXPECT_TRUE(train[1]["skipped"].get<bool>()) << train.dump(2);
  EXPECT_FALSE(train[1]["nonfinite_grad"].get<std::string>().empty());
  const auto& ref = report["steps"]["reference"];
  const auto& res = report["steps"]["resume"];
  ASSERT_EQ(ref.size(), 2u);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(ref[0]["loss_scale"], 32768.0);  // backed off
  EXPECT_EQ(res[0]["loss_scale"], 32768.0);  // and restored as saved, not reset to 65536
  EXPECT_EQ(ref[1]["loss_scale"], 32768.0);
  const auto& ls = report["loss_scaler"];
  EXPECT_TRUE(ls["enabled"].get<bool>());
  EXPECT_EQ(ls["saved_scale"], 32768.0);
  EXPECT_EQ(ls["restored_scale"], 32768.0);
  EXPECT_EQ(ls["final_scale"], 65536.0);  // grew after 2 clean steps, in the resumed run too
  ASSERT_EQ(ls["skipped_steps"].size(), 1u);
  EXPECT_EQ(ls["skipped_steps"][0]["step"], 2);
  EXPECT_EQ(train[1]["step"], 2) << "the second step is step 2, as the log says";
  EXPECT_EQ(report["steps"]["numbered_from"], 1);
  EXPECT_EQ(report["resume"]["state_digests"]["saved"]["scaler"],
            report["resume"]["state_digests"]["restored"]["scaler"]);
  const auto md = anchor::fs::read_file(t.str("run/report.md"));
  EXPECT_NE(md.find("## Loss scaler"), std::string::npos) << md;
}

TEST(PilotPrecision, ARestoreThatDropsTheScalerStateIsCaught) {
  TempDir t("scaler-neg");
  auto r = run_anchor(scaler_args(t), {{"ANCHOR_GRAD_FAULT", "inf:2"}, {"ANCHOR_PILOT_FAULT", "drop_scaler"}});
  ASSERT_EQ(r.status, 3) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "mismatch");
  ASSERT_FALSE(report["resume"]["cause"].empty());
  EXPECT_EQ(report["resume"]["cause"][0], "scaler") << report["resume"].dump(2);
  EXPECT_EQ(report["loss_scaler"]["restored_scale"], 65536.0);  // reset to init_scale: the known divergence
}

// A negative control that changes nothing proves nothing: drop_scaler with the scaler off (fp32,
// loss_scale auto) and diverge_replica on one rank are refused before anything runs (exit 2), and no
// run is written; the test above is the control that does change the run.
TEST(PilotPrecision, AFaultThatDoesNothingInThisRunIsRefused) {
  TempDir t("scaler-off");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run")}, {{"ANCHOR_PILOT_FAULT", "drop_scaler"}});
  ASSERT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("ANCHOR_PILOT_FAULT=drop_scaler does nothing in this run: the loss scaler is off in this "
                          "run (train.precision fp32, train.loss_scale.enabled auto)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("train.loss_scale.enabled=true"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t.str("run/report.json")));
  auto d =
      run_anchor({"pilot", kPilot, "--run-dir", t.str("one")}, {{"ANCHOR_PILOT_FAULT", "drop_rng,diverge_replica"}});
  ASSERT_EQ(d.status, 2) << d.output;
  EXPECT_NE(d.output.find("ANCHOR_PILOT_FAULT=diverge_replica does nothing in this run: it nudges rank 1, and this "
                          "pilot runs 1 rank"),
            std::string::npos)
      << d.output;
}

TEST(PilotPrecision, ANonFiniteGradientFailsTheValidationStageWithTheTensorNamed) {
  // The inf injected at step 1 reaches the validation's bf16 side (and would reach training).
  TempDir t("nonfinite");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--set", "train.precision=bf16"},
                      {{"ANCHOR_GRAD_FAULT", "inf:1"}});
  ASSERT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("non-finite"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wte.weight"), std::string::npos) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
  EXPECT_EQ(report["stages"].back()["stage"], "precision");
  EXPECT_EQ(report["stages"].back()["status"], "failed");
  EXPECT_EQ(report["precision"]["verdict"], "non_finite");
  ASSERT_EQ(report["precision"]["non_finite"].size(), 1u) << report["precision"].dump(2);
  EXPECT_EQ(report["precision"]["non_finite"][0]["tensor"], "wte.weight");
  EXPECT_EQ(report["precision"]["non_finite"][0]["what"], "bf16 autocast gradient");
}

TEST(PilotPrecision, ANonFiniteGradientWithoutTheScalerFailsTheStepWithTheTensorNamed) {
  // Negative control of the scaler test: the same fault at step 2 with loss scaling off
  // goes into the update; the pilot stops there (exit 3), not at a report full of NaN.
  TempDir t("nan-noscaler");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--set", "train.precision=bf16"},
                      {{"ANCHOR_GRAD_FAULT", "nan:2"}});
  ASSERT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("step 2: non-finite"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wte.weight"), std::string::npos) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["stages"].back()["stage"], "train");
  EXPECT_EQ(report["stages"].back()["status"], "failed");
}

}  // namespace
