// The supervisor's driver (pilot::run_supervisor) against a fake worker that
// speaks the worker protocol without LibTorch (tests/support/fake_worker.cpp):
// every exit code, a stage that fails, a worker that dies or crashes, SIGINT
// and SIGTERM in each stage of either worker, the report and the JUnit file
// of a failed run. The real supervisor, real processes and a real SIGKILL;
// only the worker is a stand-in. Each pilot runs in a forked child (its signal
// flag and handlers are the process's), in a fresh run directory.
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

class Supervisor : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp_{"supervisor"};

  // The embedded default under the fake worker, with `script` (ANCHOR_FAKE_WORKER).
  Ran pilot(const std::string& script, std::vector<std::string> sets = {}) {
    const std::string run_dir = (tmp_.path() / ("run-" + std::to_string(++n_))).string();
    anchor::pilot::PilotOptions o;
    o.config_path = std::string(ANCHOR_SOURCE_DIR) + "/configs/pilot.yaml";
    o.overrides = {"report.signing_key=none"};
    for (auto& s : sets) o.overrides.push_back(std::move(s));
    o.run_dir = run_dir;
    o.junit_path = run_dir + ".junit.xml";
    o.worker_binary = FAKE_WORKER;
    o.log_level = "error";
    return anchor::test::run_pilot(o, "ANCHOR_FAKE_WORKER", script);
  }

 private:
  int n_ = 0;
};

// The control: a fake that does as it is told passes, and the report says so.
TEST_F(Supervisor, AFakeThatDoesItsJobPasses) {
  const Ran r = pilot("");
  ASSERT_EQ(r.code, 0) << r.threw << r.report.dump(1);
  EXPECT_EQ(r.report["status"], "passed");
  EXPECT_EQ(r.report["exit_code"], 0);
  for (const char* s : {"load", "train", "checkpoint_save", "kill", "restore", "resume", "compare", "memory_probe"}) {
    const json* st = stage_of(r.report, s);
    ASSERT_NE(st, nullptr) << s;
    EXPECT_EQ((*st)["status"], "passed") << s;
  }
  EXPECT_EQ((*stage_of(r.report, "compare"))["figures"]["verdict"], "match");
  EXPECT_NE(r.junit.find("<testsuite"), std::string::npos);
  EXPECT_EQ(r.junit.find("<failure"), std::string::npos) << r.junit;
}

// Worker B's state after its steps is not worker A's: exit 3, naming the model.
TEST_F(Supervisor, AResumeThatDivergesExitsThreeAndNamesTheState) {
  const Ran r = pilot("diverge");
  EXPECT_EQ(r.code, static_cast<int>(ExitCode::kVerification)) << r.threw;
  EXPECT_EQ(r.report["status"], "failed");
  EXPECT_EQ(r.report["exit_code"], 3);
  EXPECT_NE(r.report["message"].get<std::string>().find("model"), std::string::npos) << r.report["message"];
  EXPECT_NE(r.junit.find("<failure"), std::string::npos) << r.junit;
}

// A worker that exits on its own in a stage fails that stage; 2 and 3 keep
// their meaning, any other status is 1.
TEST_F(Supervisor, AWorkerThatExitsFailsItsStageWithItsCode) {
  struct Case {
    const char* script;
    const char* stage;
    ExitCode code;
  };
  for (const Case& c :
       {Case{"exit@A.train=1", "train", ExitCode::kRuntime}, Case{"exit@A.load=2", "load", ExitCode::kUsage},
        Case{"exit@A.eval=3", "eval", ExitCode::kVerification},
        Case{"exit@A.reference=7", "reference", ExitCode::kRuntime},
        Case{"exit@B.restore=1", "restore", ExitCode::kRuntime}, Case{"exit@B.resume=2", "resume", ExitCode::kUsage}}) {
    SCOPED_TRACE(c.script);
    const Ran r = pilot(c.script);
    EXPECT_EQ(r.code, static_cast<int>(c.code)) << r.threw;
    EXPECT_EQ(r.report["status"], "failed");
    EXPECT_EQ(r.report["exit_code"], static_cast<int>(c.code));
    const json* st = stage_of(r.report, c.stage);
    ASSERT_NE(st, nullptr) << r.report.dump(1);
    EXPECT_EQ((*st)["status"], "failed");
    // Exit 1 is a crash, the stage never got to its answer: a JUnit <error>; 2 and 3 are a <failure>.
    const bool crash = c.code == ExitCode::kRuntime;
    EXPECT_NE(r.junit.find(crash ? "<error type=\"stage\"" : "<failure type=\"stage\""), std::string::npos) << r.junit;
    EXPECT_EQ(r.junit.find(crash ? "<failure" : "<error"), std::string::npos) << r.junit;
    EXPECT_NE(r.junit.find(crash ? "errors=\"1\"" : "errors=\"0\""), std::string::npos) << r.junit;
  }
}

// A worker that crashes, or says what went wrong before it exits: the stage
// fails with exit 1 and the report carries the crash or the worker's words.
TEST_F(Supervisor, ACrashOrAnErrorLineIsInTheReport) {
  Ran r = pilot("crash@A.load");
  EXPECT_EQ(r.code, 1) << r.threw;
  EXPECT_NE(r.report["message"].get<std::string>().find("SIGSEGV"), std::string::npos) << r.report["message"];
  r = pilot("crash@B.eval_after_restore");
  EXPECT_EQ(r.code, 1) << r.threw;
  EXPECT_NE(r.report["message"].get<std::string>().find("SIGSEGV"), std::string::npos) << r.report["message"];
  r = pilot("error@A.eval");
  EXPECT_EQ(r.code, 1) << r.threw;
  EXPECT_NE(r.report["message"].get<std::string>().find("the fake failed in eval"), std::string::npos)
      << r.report["message"];
}

// Worker A must be killed in its kill window: one that ends first fails the pilot.
TEST_F(Supervisor, AWorkerAThatEndsBeforeItsKillWindowFailsThePilot) {
  const Ran r = pilot("no_kill_window");
  EXPECT_EQ(r.code, 1) << r.threw;
  EXPECT_NE(r.report["message"].get<std::string>().find("before its kill window"), std::string::npos)
      << r.report["message"];
}

// SIGINT or SIGTERM to the supervisor in any stage of either worker: the
// workers are stopped, the report says interrupted, exit 130 or 143.
TEST_F(Supervisor, ASignalInEachStageInterruptsWith130Or143) {
  for (const char* who_stage : {"A.pin", "A.load", "A.train", "A.eval", "A.checkpoint_save", "A.reference", "A.kill",
                                "B.restore", "B.eval_after_restore", "B.resume", "B.memory_probe"}) {
    for (const char* sig : {"INT", "TERM"}) {
      SCOPED_TRACE(std::string(who_stage) + " SIG" + sig);
      const Ran r = pilot(std::string("signal@") + who_stage + "=" + sig);
      const int want = static_cast<int>(std::string(sig) == "INT" ? ExitCode::kInterrupted : ExitCode::kTerminated);
      EXPECT_EQ(r.code, want) << r.threw;
      EXPECT_EQ(r.report["status"], "interrupted");
      EXPECT_EQ(r.report["exit_code"], want);
    }
  }
}

// Exit 2 from the supervisor itself: a config it refuses throws before any
// run directory (main prints it and exits 2); checkpoint.dir holding another
// run's steps is a failed start with a report.
TEST_F(Supervisor, UsageErrorsExitTwo) {
  Ran r = pilot("", {"train.micro_batch=0"});
  EXPECT_EQ(r.code, -1);
  EXPECT_EQ(r.threw_kind, anchor::ErrorKind::kConfig) << r.threw;
  EXPECT_EQ(anchor::exit_code_for(r.threw_kind), ExitCode::kUsage);
  EXPECT_FALSE(stdfs::exists(r.run_dir + "/report.json"));

  const std::string ckpt = (tmp_.path() / "used-ckpt").string();
  stdfs::create_directories(ckpt + "/step-00000002");
  r = pilot("", {"checkpoint.dir=" + ckpt});
  EXPECT_EQ(r.code, static_cast<int>(ExitCode::kUsage)) << r.threw;
}

}  // namespace
