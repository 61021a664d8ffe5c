// The program pilot's driver (pilot::run_program_pilot, through
// run_supervisor with program.command) against a fake program that speaks the
// worker protocol without Python or LibTorch (tests/support/fake_program.cpp):
// every exit code, a program that fails at each point, dies, crashes, hangs
// past program.timeout_s or writes what the protocol refuses, SIGINT and
// SIGTERM in each worker, a resume that does not match named by its cause, one
// failing rank of two, the report and the JUnit file of a failed run. Real
// processes, a real SIGKILL inside a real save, real checkpoints; only the
// program is a stand-in. Each pilot runs in a forked child (its signal flag
// and handlers are the process's), in a fresh run directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/error.hpp"
#include "anchor/pilot/pilot.hpp"
#include "support/run_pilot.hpp"
#include "support/temp_dir.hpp"

namespace {

using anchor::ExitCode;
using nlohmann::json;
namespace stdfs = std::filesystem;

using anchor::test::stage_of;
using Ran = anchor::test::PilotRan;

constexpr std::int64_t kK = 3, kR = 2;  // steps before the save, and after the restore

class ProgramPilot : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp_{"program-pilot"};

  void SetUp() override {
    // The program's directory: its config and the one source the fake reports.
    std::ofstream(tmp_.path() / "train.py") << "# what the fake program reports as its source\n";
  }

  // A program pilot of the fake program with `script` (ANCHOR_FAKE_PROGRAM).
  Ran pilot(const std::string& script, std::vector<std::string> sets = {}) {
    const std::string n = std::to_string(++n_);
    const std::string run_dir = (tmp_.path() / ("run-" + n)).string();
    const std::string config = (tmp_.path() / ("pilot-" + n + ".yaml")).string();
    std::ofstream(config) << "run: {name: fake-program, seed: 0}\n"
                          << "program:\n  command: [" << json(FAKE_PROGRAM).dump() << "]\n  timeout_s: 20\n"
                          << "pilot: {steps_before_save: " << kK << ", steps_after_resume: " << kR << "}\n";
    anchor::pilot::PilotOptions o;
    o.config_path = config;
    o.overrides = {"report.signing_key=none"};
    for (auto& s : sets) o.overrides.push_back(std::move(s));
    o.run_dir = run_dir;
    o.junit_path = run_dir + ".junit.xml";
    o.catalog = std::string(ANCHOR_SOURCE_DIR) + "/configs/catalog.yaml";
    o.log_level = "error";
    return anchor::test::run_pilot(o, "ANCHOR_FAKE_PROGRAM", script);
  }

 private:
  int n_ = 0;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A failed run: its exit code in the report, a failure in the JUnit file.
void expect_failed(const Ran& r, ExitCode code, const std::string& says) {
  EXPECT_EQ(r.code, static_cast<int>(code)) << r.threw << r.message();
  EXPECT_EQ(r.report.value("status", ""),
            code == ExitCode::kInterrupted || code == ExitCode::kTerminated ? "interrupted" : "failed");
  EXPECT_EQ(r.report.value("exit_code", -1), static_cast<int>(code));
  EXPECT_TRUE(has(r.message(), says)) << "the report's message: " << r.message() << "\nexpected it to say: " << says;
  // A crash (exit 1) is a JUnit <error>: the stage never got to its answer; a check that failed a <failure>.
  EXPECT_TRUE(has(r.junit, code == ExitCode::kRuntime ? "<error" : "<failure")) << r.junit;
}

// The control: a program that does its job passes; the report has every
// stage, the verdict, the real checkpoint the program committed and the one
// the kill tore, the program's pins and a plan from its measurements.
TEST_F(ProgramPilot, AProgramThatDoesItsJobPasses) {
  const Ran r = pilot("");
  ASSERT_EQ(r.code, 0) << r.threw << r.report.dump(1);
  EXPECT_EQ(r.report["status"], "passed");
  for (const char* s : {"preflight", "reference", "checkpoint_save", "pin", "kill", "restore", "resume", "compare",
                        "memory_probe", "plan"}) {
    const json* st = stage_of(r.report, s);
    ASSERT_NE(st, nullptr) << s << r.report.dump(1);
    EXPECT_EQ((*st)["status"], "passed") << s;
  }
  EXPECT_EQ(r.report["resume"]["verdict"], "match") << r.report["resume"].dump(1);
  // Worker A committed step K through the store and was killed inside its save of K+R.
  ASSERT_EQ(r.report["checkpoints"].size(), 2U) << r.report["checkpoints"].dump(1);  // K, and B's K+R
  EXPECT_EQ(r.report["checkpoints"][0]["step"], kK);
  const json& kill = (*stage_of(r.report, "kill"))["figures"];
  EXPECT_EQ(kill["signal"], "SIGKILL");
  ASSERT_EQ(kill["torn_checkpoints"].size(), 1U) << kill.dump();
  EXPECT_TRUE(has(kill["torn_checkpoints"][0].get<std::string>(), "step-00000005.tmp-")) << kill.dump();
  EXPECT_EQ((*stage_of(r.report, "restore"))["figures"]["step"], kK);
  EXPECT_EQ(r.report["steps"]["resumed"].size(), static_cast<std::size_t>(kR));
  EXPECT_EQ(r.report["program"]["anchor_pilot"], "fake");
  EXPECT_EQ(r.report["measurements"]["memory"]["points"].size(), 3U)  // the reference's and two probes'
      << r.report["measurements"].dump(1);
  EXPECT_NE(r.report["plan"].value("status", ""), "not planned") << r.report["plan"].dump(1);
  EXPECT_TRUE(has(r.junit, "<testsuite"));
  EXPECT_FALSE(has(r.junit, "<failure")) << r.junit;
}

// Two ranks, as torchrun starts them: both pass, each rank's account compared.
TEST_F(ProgramPilot, TwoRanksPass) {
  const Ran r = pilot("", {"distributed.nproc_per_node=2"});
  ASSERT_EQ(r.code, 0) << r.threw << r.message();
  EXPECT_EQ(r.report["program"]["world_size"], 2);
  EXPECT_EQ((*stage_of(r.report, "reference"))["figures"]["ranks"], 2);
}

// A save that leaves the optimizer out: the resume does not match, exit 3,
// and the verdict says it is the optimizer, in the report and the JUnit file.
TEST_F(ProgramPilot, ASaveThatLeavesAComponentOutIsNamed) {
  Ran r = pilot("forget=optimizer");
  expect_failed(r, ExitCode::kVerification, "optimizer");
  EXPECT_EQ(r.report["resume"]["verdict"], "mismatch");
  EXPECT_EQ(r.report["resume"]["cause"][0], "optimizer") << r.report["resume"].dump(1);
  EXPECT_EQ(r.report["plan"]["status"], "not planned");
  EXPECT_TRUE(has(r.junit, "optimizer")) << r.junit;
  // The helper's own restore check raises RestoreError having reported what it
  // restored: still the verdict's to name (exit 3), not a crash of the program.
  r = pilot("forget=optimizer,restore_error");
  expect_failed(r, ExitCode::kVerification, "optimizer");
  // RestoreError with a restore that brought everything back is the program's failure.
  r = pilot("restore_error");
  expect_failed(r, ExitCode::kRuntime, "a component differs after load_state_dict");
}

// A resume that restores nothing, or whose loss is off: exit 3 with that cause.
TEST_F(ProgramPilot, AResumeThatDoesNotMatchSaysWhy) {
  Ran r = pilot("skip_restore");
  expect_failed(r, ExitCode::kVerification, "");
  EXPECT_EQ(r.report["resume"]["cause"][0], "checkpoint") << r.report["resume"].dump(1);
  r = pilot("loss_off");
  expect_failed(r, ExitCode::kVerification, "");
  EXPECT_EQ(r.report["resume"]["cause"][0], "loss") << r.report["resume"].dump(1);
}

// A program that exits, crashes or says why it failed at any point of either
// worker fails that worker's stage with exit 1, and the report says how.
TEST_F(ProgramPilot, AProgramThatFailsFailsItsWorkersStage) {
  struct Case {
    std::string script, stage, says;
  };
  for (const Case& c : {
           Case{"exit@A.start=2", "reference", "worker A exited with status 2"},
           Case{"exit@A.train=1", "reference", "exited with status 1"},
           Case{"exit@A.save=7", "reference", "exited with status 7"},
           Case{"crash@A.train", "reference", "SIGSEGV"},
           Case{"error@A.save", "reference", "the fake failed in save"},
           Case{"exit@B.start=1", "resume", "worker B exited with status 1"},
           Case{"crash@B.restore", "resume", "SIGSEGV"},
           Case{"error@B.train", "resume", "worker B: the fake failed in train"},
           Case{"exit@P.train=1", "memory_probe", "the memory probe at"},
           Case{"crash@P.start", "memory_probe", "SIGSEGV"},
       }) {
    SCOPED_TRACE(c.script);
    const Ran r = pilot(c.script);
    expect_failed(r, ExitCode::kRuntime, c.says);
    const json* st = stage_of(r.report, c.stage);
    ASSERT_NE(st, nullptr) << r.report.dump(1);
    EXPECT_EQ((*st)["status"], "failed");
  }
}

// One rank of two fails: the others are stopped, and the report names the rank.
TEST_F(ProgramPilot, OneFailingRankIsNamed) {
  Ran r = pilot("exit@A1.train=4", {"distributed.nproc_per_node=2"});
  expect_failed(r, ExitCode::kRuntime, "worker A rank 1 exited with status 4");
  r = pilot("crash@B1.restore", {"distributed.nproc_per_node=2"});
  expect_failed(r, ExitCode::kRuntime, "worker B rank 1");
}

// What the protocol refuses ends the worker with exit 1 and says what: no
// hello, a line that is not JSON, a step past stop_at, a probe that did not
// run at the shape it was given; and a program that hangs past program.timeout_s.
TEST_F(ProgramPilot, WhatTheProtocolRefusesFailsThePilot) {
  Ran r = pilot("no_hello");
  expect_failed(r, ExitCode::kRuntime, "never said hello");
  r = pilot("garbage@A.train");
  expect_failed(r, ExitCode::kRuntime, "reference.events.jsonl");
  r = pilot("past_stop@A.train");
  expect_failed(r, ExitCode::kRuntime, "past step " + std::to_string(kK + kR));
  r = pilot("wrong_tokens");
  expect_failed(r, ExitCode::kRuntime, "tokens at step 1");
  EXPECT_EQ(r.report["plan"]["status"], "not planned");
  r = pilot("hang@B.train", {"program.timeout_s=1"});
  expect_failed(r, ExitCode::kRuntime, "ran past program.timeout_s");
}

// A program that declares no shape is not planned, and its pilot still passes.
TEST_F(ProgramPilot, NoShapeIsNotPlannedButPasses) {
  const Ran r = pilot("no_shape");
  ASSERT_EQ(r.code, 0) << r.threw << r.message();
  EXPECT_EQ(r.report["plan"]["status"], "not planned");
  EXPECT_TRUE(has(r.report["plan"].value("why", ""), "anchor_pilot.shape")) << r.report["plan"].dump(1);
  EXPECT_EQ(stage_of(r.report, "memory_probe"), nullptr);
}

// SIGINT or SIGTERM to anchor while either worker or the probe runs: every
// rank is stopped, the report says interrupted, exit 130 or 143.
TEST_F(ProgramPilot, ASignalInEachWorkerInterruptsWith130Or143) {
  for (const char* who_point : {"A.start", "A.train", "A.save", "B.restore", "B.train", "P.train"}) {
    for (const char* sig : {"INT", "TERM"}) {
      SCOPED_TRACE(std::string(who_point) + " SIG" + sig);
      const Ran r = pilot(std::string("signal@") + who_point + "=" + sig);
      expect_failed(r, std::string(sig) == "INT" ? ExitCode::kInterrupted : ExitCode::kTerminated, "");
    }
  }
}

// Exit 2: a program.command that is not there is a config error with a
// report; checkpoint.dir holding another run's steps is a failed start.
TEST_F(ProgramPilot, UsageErrorsExitTwo) {
  Ran r = pilot("", {"program.command=[/nonexistent/train]"});
  expect_failed(r, ExitCode::kUsage, "is not an executable");
  const std::string ckpt = (tmp_.path() / "used-ckpt").string();
  stdfs::create_directories(ckpt + "/step-00000002");
  r = pilot("", {"checkpoint.dir=" + ckpt});
  expect_failed(r, ExitCode::kUsage, "");
}

}  // namespace
