// End-to-end: `anchor pilot --nproc-per-node 2`, the self-launch: the
// supervisor starts 2 ranks of each worker (DDP over Gloo), kills every rank
// in the second save, restores and resumes per rank (docs/distributed.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/dist/launch.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

using anchor::testing::read_json;

TEST(PilotDist, TwoSelfLaunchedRanksPassWithBitwiseResumePerRank) {
  for (const char* v : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"}) ::unsetenv(v);
  TempDir t("pilot2");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("passed: resume matches the uninterrupted run (bitwise)"), std::string::npos) << r.output;

  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(report["resume"]["per_rank"][rank]["rank"], rank);
    EXPECT_EQ(report["resume"]["per_rank"][rank]["verdict"], "match");
  }
  // DDP: the train stage ran on 2 ranks and measured its all-reduce.
  bool train_seen = false;
  for (const auto& s : report["stages"])
    if (s["stage"] == "train") {
      train_seen = true;
      EXPECT_EQ(s["figures"]["world_size"], 2);
      EXPECT_GT(s["figures"]["comm_s"].get<double>(), 0.0);
    }
  EXPECT_TRUE(train_seen);
  // Two ranks: worker A's step held DDP's buffers, so the probe measured the configured shape too.
  const auto& pts = report["measurements"]["memory"]["points"];
  ASSERT_EQ(pts.size(), 3u) << pts.dump(2);
  for (const auto& pt : pts) EXPECT_EQ(pt["from"], "probe");
  EXPECT_EQ(std::make_pair(pts[0]["micro_batch"], pts[0]["seq_len"]), std::make_pair(json(4), json(64)));
  // The measured step says how many ranks ran it; tokens/s is one rank's (the plan's per-GPU figure).
  const auto& step = report["measurements"]["step"];
  EXPECT_EQ(step["world_size"], 2);
  EXPECT_DOUBLE_EQ(step["tokens_per_s_all_ranks"].get<double>(), 2 * step["tokens_per_s"].get<double>());
  // Several ranks are started with the pools' wait settings too (threads::pool_wait_env): rank 0's manifest.
  const json wait = read_json(t.str("run/manifest.json"))["threads"]["wait_env"];
  EXPECT_EQ(wait["GOMP_SPINCOUNT"], "10000") << wait.dump();
  EXPECT_EQ(wait["OPENBLAS_THREAD_TIMEOUT"], "4") << wait.dump();
  // No GPU here: distributed.backend auto chose Gloo, and the report says so.
  EXPECT_EQ(report["distributed"]["backend"], "gloo") << report["distributed"].dump(2);

  // One committed checkpoint: model and optimizer once (replicated), an RNG file per rank.
  const std::string c = t.str("run/checkpoints/step-00000002/");
  for (const char* f : {"COMMITTED", "model.safetensors", "optimizer.safetensors", "rng-rank00000-of-00002.safetensors",
                        "rng-rank00001-of-00002.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(c + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(c + "rng.safetensors"));
  // Data sharded by rank (different batches), parameters replicated (equal digests).
  auto ref0 = read_json(t.str("run/work/reference.json"));
  auto ref1 = read_json(t.str("run/work/reference-rank1.json"));
  EXPECT_EQ(ref1["rank"], 1);
  EXPECT_NE(ref0["train_steps"][0]["batch_digest"], ref1["train_steps"][0]["batch_digest"]) << "data not sharded";
  EXPECT_EQ(ref0["final_state"]["model"], ref1["final_state"]["model"]) << "replicas differ";
  EXPECT_TRUE(std::filesystem::exists(t.str("run/work/resume-rank1.json")));

  // The kill stage killed every rank.
  std::ifstream ev(t.str("run/events.jsonl"));
  bool all_killed = false;
  for (std::string line; std::getline(ev, line);) {
    auto e = json::parse(line);
    if (e.value("event", "") == "sigkill_sent") all_killed = e["pids"].size() == 2;
  }
  EXPECT_TRUE(all_killed);
}

// Negative control: rank 1 (and rank 0) restore without their RNG state; the
// per-rank comparison catches it and names rank 1.
TEST(PilotDist, ABrokenRestoreOnRankOneIsCaughtAndNamed) {
  TempDir t("pilot2neg");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2"},
                      {{"ANCHOR_PILOT_FAULT", "drop_rng"}});
  ASSERT_EQ(r.status, 3) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["resume"]["verdict"], "mismatch");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u);
  EXPECT_EQ(report["resume"]["per_rank"][1]["verdict"], "mismatch");
  EXPECT_EQ(report["resume"]["per_rank"][1]["cause"][0], "rng") << report["resume"].dump(2);
  bool named = false;
  for (const auto& c : report["resume"]["cause"]) named |= c == "rank 1: rng";
  EXPECT_TRUE(named) << report["resume"]["cause"].dump();
}

// The replicas are compared before each save and at the end, not after every
// step: the check before the first save still catches rank 1's parameters
// nudged right before that save (ANCHOR_PILOT_FAULT=diverge_replica), fails
// with exit 3 naming rank 1, and no checkpoint of those replicas is written.
// The passing pilot's steps carry no per-step check; its save and resume do.
TEST(PilotDist, ReplicasAreComparedBeforeTheSaveAndADivergedRankIsNamed) {
  TempDir t("pilot2rep");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2"},
                      {{"ANCHOR_PILOT_FAULT", "diverge_replica"}});
  ASSERT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("the parameters of rank(s) 1 differ from rank 0's"), std::string::npos) << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
  EXPECT_FALSE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/COMMITTED")));
  // ZeRO too: its broadcast at the end of a step does not hide a divergence made after it.
  auto z = run_anchor(
      {"pilot", kPilot, "--run-dir", t.str("zero1"), "--nproc-per-node", "2", "--set", "distributed.strategy=zero1"},
      {{"ANCHOR_PILOT_FAULT", "diverge_replica"}});
  ASSERT_EQ(z.status, 3) << z.output;
  EXPECT_NE(z.output.find("the parameters of rank(s) 1 differ from rank 0's"), std::string::npos) << z.output;

  auto ok = run_anchor({"pilot", kPilot, "--run-dir", t.str("ok"), "--nproc-per-node", "2"});
  ASSERT_EQ(ok.status, 0) << ok.output;
  const auto ref0 = read_json(t.str("ok/work/reference.json"));
  for (const auto& st : ref0["train_steps"]) EXPECT_EQ(st["replica_check_s"], 0.0) << "checked every step";
  const auto good = read_json(t.str("ok/report.json"));
  int checked = 0;
  for (const auto& s : good["stages"])
    if (s["stage"] == "checkpoint_save" || s["stage"] == "resume") {
      EXPECT_GT(s["figures"]["replica_check_s"].get<double>(), 0.0) << s.dump();
      ++checked;
    }
  EXPECT_EQ(checked, 2);
}

// The torch version `python` imports, "" when it has none.
std::string torch_version_of(const std::string& python) {
  anchor::proc::SpawnOptions o;
  auto r = anchor::proc::run_capture({python, "-c", "import torch; print(torch.__version__)"}, o);
  if (r.status != 0) return "";
  std::string v = r.out;
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v.substr(v.rfind('\n') == std::string::npos ? 0 : v.rfind('\n') + 1);
}

// torchrun launching the binary: 2 processes; rank 0 supervises the pilot with
// 2 ranks, rank 1 waits for its verdict and exits with it. Both LibTorch lines'
// torchrun (this build's torch, and the other line's: python3-torch 1.13 and
// torch2's 2.x), whose stores speak different protocols. `static`:
// --master_port, the agent hosts a store (TORCHELASTIC_USE_AGENT_STORE=True)
// that anchor's ranks do not use: rank 0 publishes its own in torchrun's
// attempt directory. `c10d` (the dynamic rendezvous --standalone uses): rank 0
// hosts it on MASTER_PORT.
struct TorchrunCase {
  bool c10d;
  bool other_line;
};
void PrintTo(const TorchrunCase& c, std::ostream* os) {
  *os << (c.c10d ? "c10d" : "static") << (c.other_line ? ", the other line's torchrun" : ", this line's torchrun");
}
class PilotTorchrun : public ::testing::TestWithParam<TorchrunCase> {};

TEST_P(PilotTorchrun, TwoRanksPassWithBitwiseResume) {
  const std::string python = GetParam().other_line ? ANCHOR_OTHER_TORCH_PYTHON : ANCHOR_TEST_PYTHON;
  const std::string torch = torch_version_of(python);
  if (GetParam().other_line && torch.empty())
    GTEST_SKIP() << python << " has no torch here: the other LibTorch line is not installed (make test installs both)";
  ASSERT_FALSE(torch.empty()) << python << " cannot import torch";
  std::cout << "torchrun of torch " << torch << " (" << python << ")\n";
  TempDir t("pilottr");
  std::vector<std::string> argv = {
      python, "-m", "torch.distributed.run", "--no_python", "--nproc_per_node", "2", "--redirects", "1", "--tee", "1"};
  if (GetParam().c10d) {
    // What --standalone sets up, on a free port: --standalone always takes
    // 29400, which any other torchrun on the machine may hold.
    for (const auto& a : {std::string("--rdzv_backend"), std::string("c10d"), std::string("--rdzv_endpoint"),
                          "127.0.0.1:" + std::to_string(anchor::dist::free_loopback_port()), std::string("--rdzv_id"),
                          std::string("anchor-test"), std::string("--nnodes"), std::string("1")})
      argv.push_back(a);
  } else {
    argv.push_back("--master_addr");
    argv.push_back("127.0.0.1");
    argv.push_back("--master_port");
    argv.push_back(std::to_string(anchor::dist::free_loopback_port()));
  }
  for (const auto& a :
       {std::string(ANCHOR_BINARY), std::string("pilot"), kPilot, std::string("--run-dir"), t.str("run")})
    argv.push_back(a);
  anchor::proc::SpawnOptions o;
  o.merge_stderr = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = anchor::proc::run_capture(argv, o);
  std::cout << "pilot under torchrun: " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("rank 0's pilot exited with 0"), std::string::npos) << r.out;
  if (GetParam().c10d) {
    EXPECT_NE(r.out.find("(hosted here)"), std::string::npos) << r.out;
  } else {
    // Rank 0's store, published in the attempt directory, which every rank names; the file goes with the store.
    const std::string mark = "store rank 0's, published in ";
    const auto at = r.out.find(mark);
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string dir = r.out.substr(at + mark.size(), r.out.find(" (not the agent's)", at) - at - mark.size());
    EXPECT_NE(dir.find("attempt_0"), std::string::npos) << dir;
    EXPECT_NE(r.out.find(mark, at + 1), std::string::npos) << "rank 1 met it there too: " << r.out;
    EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
    EXPECT_FALSE(std::filesystem::exists(dir + "/anchor-launch-store")) << "rank 0 leaves its port file behind";
    EXPECT_EQ(r.out.find("(agent's"), std::string::npos) << r.out;
  }
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u);
  EXPECT_EQ(report["resume"]["per_rank"][1]["verdict"], "match");
  EXPECT_TRUE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/rng-rank00001-of-00002.safetensors")));
}

INSTANTIATE_TEST_SUITE_P(Rendezvous, PilotTorchrun,
                         ::testing::Values(TorchrunCase{false, false}, TorchrunCase{true, false},
                                           TorchrunCase{false, true}, TorchrunCase{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.c10d ? "c10d" : "static") +
                                  (info.param.other_line ? "_OtherLinesTorchrun" : "_ThisLinesTorchrun");
                         });

// Rank 1 of the reference worker SIGKILLs itself in step 1 after backward,
// before the all-reduce: rank 0 ends with an error naming rank 1 well within
// the timeout, and the pilot fails in the train stage instead of hanging.
TEST(PilotDist, KillingOneRankMidStepEndsEveryRankWithAnErrorNamingIt) {
  TempDir t("pilot2kill");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_anchor(
      {"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set", "distributed.timeout_s=30"},
      {{"ANCHOR_DIST_FAULT", "sigkill:1:1"}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 kills itself in step 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failed on rank 0/2: rank 1 did not answer (dead or hung)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pilot failed in stage train"), std::string::npos) << r.output;
  std::cout << "pilot ended " << s << " s after its start (timeout 30 s)\n";
  EXPECT_LT(s, 30.0);
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
}

// Rank 1 dies before it joins the process group, where rank 0 cannot notice:
// it would wait out the whole rendezvous timeout (120 s here). The supervisor
// sees its child end and, after a grace of 15 s (longer than rank 0's own
// diagnosis of a dead peer takes), stops the worker and names the rank and how
// it ended in one line, with no LibTorch stack trace.
TEST(PilotDist, ARankKilledBeforeTheRendezvousIsNamedWithinSecondsNotTheTimeout) {
  TempDir t("pilot2rdv");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_anchor(
      {"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set", "distributed.timeout_s=120"},
      {{"ANCHOR_DIST_FAULT", "sigkill_rendezvous:1"}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "pilot ended " << s << " s after its start (rendezvous timeout 120 s)\n";
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("worker A rank 1 exited with status 137 (killed by SIGKILL) while rank 0 was starting"),
            std::string::npos)
      << r.output;
  EXPECT_LT(s, 60.0);
  const auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
  const std::string message = report["message"];
  EXPECT_NE(message.find("rank 1 exited with status 137 (killed by SIGKILL)"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  EXPECT_EQ(report.dump().find("frame #"), std::string::npos) << "a LibTorch stack trace in the report";
}

// Rank 0 of the reference worker SIGKILLs itself mid-step: the failure names
// rank 0 and the signal, not just a status number.
TEST(PilotDist, KillingRankZeroNamesItAndTheSignal) {
  TempDir t("pilot2kill0");
  auto r = run_anchor(
      {"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set", "distributed.timeout_s=30"},
      {{"ANCHOR_DIST_FAULT", "sigkill:0:1"}});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("worker A rank 0 exited with status 137 (killed by SIGKILL) in stage train"),
            std::string::npos)
      << r.output;
}

// A typo in the fault seam is refused, so a fault test cannot pass without its fault.
TEST(PilotDist, AnUnknownDistFaultIsRefused) {
  TempDir t("pilot2badfault");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2"},
                      {{"ANCHOR_DIST_FAULT", "sigkil:1:1"}});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("ANCHOR_DIST_FAULT item 'sigkil:1:1': unknown point 'sigkil'"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find(
          "use sigkill:<rank>:<step>, sigkill_save:<rank>:<step>, sigkill_rendezvous:<rank> or sigkill_probe:<rank>"),
      std::string::npos)
      << r.output;
}

TEST(PilotDist, APartialLaunchEnvironmentIsAConfigError) {
  TempDir t("pilot2part");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run")}, {{"RANK", "0"}});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << r.output;
}

// distributed.backend nccl on a machine without a GPU (device auto resolves
// to the CPU on every rank): each rank refuses before it joins a group or
// trains (the preflight's all-reduce probe's ranks first, which take the
// pilot's device and backend), the pilot fails with exit 2 and says why, and
// nothing is committed.
// The nccl code itself is compiled by the dist.nccl_backend_compiles check.
TEST(PilotDist, NcclWithoutAGpuIsAConfigErrorBeforeAnyTraining) {
  TempDir t("pilot2nccl");
  auto r = run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--nproc-per-node", "2", "--set", "device=auto",
                       "--set", "distributed.backend=nccl"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("distributed.backend nccl needs a GPU, and this rank has none visible"), std::string::npos)
      << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
  EXPECT_EQ(report["exit_code"], 2);
  EXPECT_NE(report["message"].get<std::string>().find("needs a GPU"), std::string::npos) << report["message"];
  EXPECT_FALSE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/COMMITTED")));
}

}  // namespace
