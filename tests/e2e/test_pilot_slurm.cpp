// End-to-end: `srun anchor pilot` under a real Slurm (a private cluster of
// this machine's own daemons, tests/support/slurm_cluster.hpp): the launched
// tasks find their ranks in Slurm's variables, rank 0 supervises the pilot
// with as many ranks as srun started, and the other task waits for its
// verdict (docs/distributed.md, "The pilot under torchrun or srun").
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>

#include "anchor/common/process.hpp"
#include "support/run_anchor.hpp"
#include "support/slurm_cluster.hpp"

namespace {

using anchor::testing::find_program;
using anchor::testing::read_json;
using anchor::testing::SlurmCluster;
using anchor::testing::source_path;
using anchor::testing::TempDir;

const std::string kPilot = source_path("configs/pilot.yaml");

struct SrunRun {
  int status = -1;
  std::string output;
  double seconds = 0;
};

SrunRun srun(const SlurmCluster& c, const std::vector<std::string>& srun_args, const std::vector<std::string>& args,
             std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {find_program("srun")};
  argv.insert(argv.end(), srun_args.begin(), srun_args.end());
  argv.push_back(ANCHOR_BINARY);
  argv.insert(argv.end(), args.begin(), args.end());
  anchor::proc::SpawnOptions o;
  for (const auto& [k, v] : c.env()) env[k] = v;
  o.env = env;
  o.merge_stderr = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = anchor::proc::run_capture(argv, o);
  return {r.status, r.out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

#define SKIP_WITHOUT_SLURM() \
  if (const auto why = SlurmCluster::unavailable_reason(); !why.empty()) GTEST_SKIP() << why

// srun -n 2 on one node: both tasks are Slurm ranks (SLURM_PROCID 0/1,
// SLURM_NTASKS 2), the store is at SLURM_LAUNCH_NODE_IPADDR on the port derived
// from the job id; the pilot passes with bitwise resume on each of its 2 ranks.
TEST(PilotSlurm, SrunTwoTasksOnOneNodePassWithBitwiseResumePerRank) {
  SKIP_WITHOUT_SLURM();
  TempDir t("slurm1");
  SlurmCluster cluster(t.path() / "cluster", 1);
  auto r = srun(cluster, {"-n", "2"}, {"pilot", kPilot, "--run-dir", t.str("run")});
  std::cout << "srun -n 2 anchor pilot: " << r.seconds << " s\n";
  ASSERT_EQ(r.status, 0) << r.output << cluster.logs();
  // Rank 0 saw Slurm's variables, not a self-launch; the port is 20000 + job id % 10000.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.output, m, std::regex(R"(rank 0/2 \(local 0/2\) via slurm, store 127\.0\.0\.1:(\d+))")))
      << r.output;
  const int port = std::stoi(m[1]);
  EXPECT_EQ(port, anchor::dist::kSlurmPortBase + cluster.first_job_id() % anchor::dist::kSlurmPortSpan);
  EXPECT_NE(r.output.find("rank 0 runs the pilot with 2 ranks; waiting for its verdict"), std::string::npos)
      << r.output;

  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (const auto& pr : report["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");
  EXPECT_EQ(report["distributed"]["world_size"], 2);
  EXPECT_TRUE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/rng-rank00001-of-00002.safetensors")));
}

// A program pilot under srun (docs/program.md, "How to pilot a torchrun
// script"): srun's two tasks are anchors; rank 0 supervises and starts the DDP
// example's two ranks itself, with torchrun's variables and without srun's task
// variables; the resume matches bitwise on both ranks. Over two nodes, srun's
// task on node 1 is the agent that starts the program's rank 1.
TEST(PilotSlurm, AProgramPilotUnderSrunOnOneNodeStartsTheProgramsRanks) {
  SKIP_WITHOUT_SLURM();
  TempDir t("slurmprog");
  std::filesystem::copy(source_path("examples/ddp"), t.path() / "ddp", std::filesystem::copy_options::recursive);
  // `python3`, as the example's pilot.yaml names it: this build's Python (its torch, its LibTorch line).
  std::filesystem::create_directories(t.path() / "bin");
  {
    std::ofstream w(t.str("bin/python3"));
    w << "#!/bin/sh\nexec '" << ANCHOR_TEST_PYTHON << "' \"$@\"\n";
  }
  std::filesystem::permissions(t.str("bin/python3"), std::filesystem::perms::owner_all);
  const char* path = std::getenv("PATH");
  const std::map<std::string, std::string> env = {{"PATH", t.str("bin") + ":" + (path ? path : "/usr/bin:/bin")},
                                                  {"PYTHONPATH", source_path("python")},
                                                  {"OMP_NUM_THREADS", "1"}};
  SlurmCluster cluster(t.path() / "cluster", 2);
  auto r =
      srun(cluster, {"-n", "2", "--nodes", "1"}, {"pilot", t.str("ddp/pilot.yaml"), "--run-dir", t.str("run")}, env);
  std::cout << "srun -n 2 anchor pilot (a program): " << r.seconds << " s\n";
  ASSERT_EQ(r.status, 0) << r.output << cluster.logs();
  EXPECT_NE(r.output.find("rank 0 runs the pilot with 2 ranks; waiting for its verdict"), std::string::npos)
      << r.output;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  EXPECT_EQ(report["program"]["world_size"], 2);
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (const auto& pr : report["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");

  // Over two nodes (issue 41, item 4): srun's task on node 1 is the agent that starts rank 1 of the program.
  auto two = srun(
      cluster, {"--nodes", "2", "--ntasks-per-node", "1"},
      {"pilot", t.str("ddp/pilot.yaml"), "--run-dir", t.str("run2"), "--set", "distributed.nproc_per_node=1"}, env);
  std::cout << "srun --nodes 2 anchor pilot (a program): " << two.seconds << " s\n";
  ASSERT_EQ(two.status, 0) << two.output << cluster.logs();
  EXPECT_NE(two.output.find("agent of node 1"), std::string::npos) << two.output;
  auto report2 = read_json(t.str("run2/report.json"));
  EXPECT_EQ(report2["status"], "passed");
  EXPECT_EQ(report2["resume"]["mode"], "bitwise");
  ASSERT_EQ(report2["resume"]["per_rank"].size(), 2u) << report2["resume"].dump(2);
  for (const auto& pr : report2["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");
}

// Under srun, a rank of the reference worker killed in the middle of a step:
// rank 0's pilot fails naming it, the waiting task exits with the same code,
// srun returns it, and nothing hangs: all within the distributed timeout.
TEST(PilotSlurm, ARankKilledMidStepEndsTheJobWithinTheTimeout) {
  SKIP_WITHOUT_SLURM();
  TempDir t("slurm1kill");
  SlurmCluster cluster(t.path() / "cluster", 1);
  auto r = srun(cluster, {"-n", "2"}, {"pilot", kPilot, "--run-dir", t.str("run"), "--set", "distributed.timeout_s=30"},
                {{"ANCHOR_DIST_FAULT", "sigkill:1:1"}});
  std::cout << "srun ended " << r.seconds << " s after its start (timeout 30 s)\n";
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 did not answer (dead or hung)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0's pilot exited with 1"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_EQ(read_json(t.str("run/report.json"))["status"], "failed");
}

// srun across two "nodes" (two slurmd of the private cluster, one task each:
// SLURM_NODEID 0/1, SLURM_LOCALID 0, SLURM_TASKS_PER_NODE 1(x2)): rank 0
// supervises, node 1's task is that node's agent and starts its rank of each
// worker, the kill is relayed to it, and the pilot passes with bitwise resume
// on both ranks. Slurm places the tasks; the host and filesystem are shared.
TEST(PilotSlurm, SrunAcrossTwoNodesPassesWithTheKillRelayed) {
  SKIP_WITHOUT_SLURM();
  TempDir t("slurm2");
  SlurmCluster cluster(t.path() / "cluster", 2);
  auto r = srun(cluster, {"--nodes", "2", "--ntasks-per-node", "1"},
                {"pilot", kPilot, "--set", "run.output_dir=" + t.str("runs")});
  std::cout << "srun --nodes 2 anchor pilot: " << r.seconds << " s\n";
  ASSERT_EQ(r.status, 0) << r.output << cluster.logs();
  EXPECT_NE(r.output.find("rank 0/2 (local 0/1) via slurm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 (local 0/1) via slurm"), std::string::npos) << r.output;
  // One run directory, chosen by rank 0 and used by both nodes.
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(t.str("runs"))) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  auto report = read_json((runs[0] / "report.json").string());
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (const auto& pr : report["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");
  EXPECT_EQ(report["distributed"]["nodes"], 2) << report["distributed"].dump(2);
  EXPECT_EQ(report["distributed"]["per_rank"][1]["node"], 1) << report["distributed"].dump(2);
  // Node 1's agent SIGKILLed its rank of the reference worker when told to.
  bool relayed = false;
  std::ifstream ev(runs[0] / "events.jsonl");
  for (std::string line; std::getline(ev, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.value("event", "") == "remote_ranks_ended")
      for (const auto& rr : e.value("ranks", nlohmann::json::array()))
        relayed |= rr.value("rank", -1) == 1 && rr.value("killed", false);
  }
  EXPECT_TRUE(relayed) << "no remote_ranks_ended event with rank 1 killed";
}

// A restart across two nodes: a first srun pilot commits step 2 into a shared
// checkpoint.dir; the next, with --start-from latest, starts both nodes' ranks
// of worker A from it (node 1's rank reads it through its agent's worker) and
// passes bitwise per rank. Negative control: the same second pilot without
// --start-from is refused (exit 2), since the directory already holds steps.
TEST(PilotSlurm, AcrossTwoNodesTheNextPilotStartsFromTheLastCommittedStep) {
  SKIP_WITHOUT_SLURM();
  TempDir t("slurm2start");
  SlurmCluster cluster(t.path() / "cluster", 2);
  const std::vector<std::string> two_nodes = {"--nodes", "2", "--ntasks-per-node", "1"};
  const std::string ckpt = "checkpoint.dir=" + t.str("ckpt");
  auto first = srun(cluster, two_nodes, {"pilot", kPilot, "--set", "run.output_dir=" + t.str("runs1"), "--set", ckpt});
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_TRUE(std::filesystem::exists(t.str("ckpt/step-00000002/COMMITTED")));

  auto refused =
      srun(cluster, two_nodes, {"pilot", kPilot, "--set", "run.output_dir=" + t.str("runs0"), "--set", ckpt});
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_NE(refused.output.find("already holds"), std::string::npos) << refused.output;

  auto next =
      srun(cluster, two_nodes,
           {"pilot", kPilot, "--set", "run.output_dir=" + t.str("runs2"), "--set", ckpt, "--start-from", "latest"});
  std::cout << "restart across 2 nodes: " << next.seconds << " s\n";
  ASSERT_EQ(next.status, 0) << next.output;
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(t.str("runs2"))) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  auto report = read_json((runs[0] / "report.json").string());
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["start"]["from"], "latest");
  EXPECT_EQ(report["start"]["step"], 2);
  EXPECT_EQ(report["distributed"]["nodes"], 2);
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u);
  for (const auto& pr : report["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");
  // Rank 1 (node 1) trained on from checkpoint step-2 too: its first step is step 3.
  auto rank1 = read_json((runs[0] / "work/reference-rank1.json").string());
  EXPECT_EQ(rank1["train_steps"][0]["step"], 3) << rank1["train_steps"].dump();
  EXPECT_TRUE(std::filesystem::exists(t.str("ckpt/step-00000004/COMMITTED")));
}

}  // namespace
