// One pilot per directory (docs/pilot.md, "One pilot per directory"): a second
// pilot on a checkpoint.dir or a run directory that a running pilot holds is
// refused with exit 2, naming that pilot (run id, pid, host), before it writes
// or deletes anything there, and the first pilot ends as if alone. The first
// pilot is held still with SIGSTOP once it has its locks (it has printed its
// run line), so nothing here depends on timing.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "anchor/common/process.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::read_json;
using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;

struct Held {
  anchor::proc::Child child;
  std::string run_id;
  std::string output;
};

// Starts `anchor pilot args...`, waits for its "[pilot] run <id> in <dir>"
// line (printed once both directories are locked) and stops it there.
Held start_and_stop(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ANCHOR_BINARY, "pilot", source_path("configs/pilot.yaml")};
  argv.insert(argv.end(), args.begin(), args.end());
  anchor::proc::SpawnOptions o;
  o.capture_stdout = true;
  o.merge_stderr = true;
  Held h{anchor::proc::spawn(argv, o), "", ""};
  while (auto line = anchor::proc::read_line(h.child.stdout_fd.get())) {
    h.output += *line + "\n";
    const auto at = line->find("[pilot] run ");
    if (at == std::string::npos) continue;
    h.run_id = line->substr(at + 12, line->find(' ', at + 12) - (at + 12));
    ::kill(h.child.pid, SIGSTOP);
    break;
  }
  return h;
}

// Lets it go on and returns its exit status.
int resume_and_wait(Held& h) {
  ::kill(h.child.pid, SIGCONT);
  while (auto line = anchor::proc::read_line(h.child.stdout_fd.get())) h.output += *line + "\n";
  return anchor::proc::wait_exit(h.child.pid);
}

TEST(PilotLock, ASecondPilotOnTheSameCheckpointDirIsRefusedNamingTheFirst) {
  TempDir t("pilot-lock-ckpt");
  const std::string ckpt = "checkpoint.dir=" + t.str("ckpt");
  Held first = start_and_stop({"--run-dir", t.str("run1"), "--set", ckpt});
  ASSERT_FALSE(first.run_id.empty()) << first.output;

  auto second = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t.str("run2"), "--set", ckpt});
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_NE(second.output.find("checkpoint.dir " + t.str("ckpt") + " is in use by pilot run " + first.run_id +
                               " (pid " + std::to_string(first.child.pid)),
            std::string::npos)
      << second.output;
  EXPECT_FALSE(std::filesystem::exists(t.str("run2"))) << "the refused pilot left its run directory behind";

  ASSERT_EQ(resume_and_wait(first), 0) << first.output;
  EXPECT_EQ(read_json(t.str("run1/report.json"))["status"], "passed");
  EXPECT_TRUE(std::filesystem::exists(t.str("ckpt/step-00000002/COMMITTED")));
}

TEST(PilotLock, ASecondPilotOnTheSameRunDirectoryIsRefusedAndTouchesNothing) {
  TempDir t("pilot-lock-run");
  Held first = start_and_stop({"--run-dir", t.str("run")});
  ASSERT_FALSE(first.run_id.empty()) << first.output;
  const auto config_before = anchor::fs::read_file(t.str("run/config.json"));

  auto second = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t.str("run")});
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_NE(second.output.find("is in use by pilot run " + first.run_id), std::string::npos) << second.output;
  EXPECT_EQ(anchor::fs::read_file(t.str("run/config.json")), config_before) << "the refused pilot wrote into the run";

  ASSERT_EQ(resume_and_wait(first), 0) << first.output;
  EXPECT_EQ(read_json(t.str("run/report.json"))["run_id"], first.run_id);
  // Once the first pilot has ended the directory is free again: a restart from
  // its newest checkpoint, in the same run directory, runs.
  auto third =
      run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t.str("run"), "--start-from", "latest"});
  EXPECT_EQ(third.status, 0) << third.output;
}

// checkpoint.dir may be the run directory itself: one lock covers both (a
// second flock of the same file on another descriptor would make the pilot
// refuse itself, exit 2, naming its own pid).
TEST(PilotLock, CheckpointDirEqualToTheRunDirectoryIsNotRefused) {
  TempDir t("pilot-lock-same");
  auto r = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t.str("run"), "--set",
                       "checkpoint.dir=" + t.str("run")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("is in use by"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(t.str("run/step-00000002/COMMITTED")));
}

}  // namespace
