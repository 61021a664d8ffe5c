// End-to-end: `anchor pilot` over several nodes (docs/distributed.md, "The
// pilot over several nodes"). Here the two "nodes" are two launches on one
// machine sharing its filesystem: LOCAL_WORLD_SIZE 1, WORLD_SIZE 2. Node 0's
// process supervises; node 1's is its agent and starts rank 1 of each worker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/dist/launch.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::read_json;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

struct NodeRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Starts every argv at once (each with its environment), reads their outputs
// concurrently (none may block on a full pipe) and waits for all.
std::vector<NodeRun> run_together(const std::vector<std::vector<std::string>>& argvs,
                                  const std::vector<std::map<std::string, std::string>>& envs) {
  std::vector<anchor::proc::Child> kids;
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    anchor::proc::SpawnOptions o;
    o.env = envs[i];
    o.capture_stdout = true;
    o.merge_stderr = true;
    o.die_with_parent = true;
    kids.push_back(anchor::proc::spawn(argvs[i], o));
  }
  std::vector<NodeRun> res(kids.size());
  std::vector<std::thread> readers;
  for (std::size_t i = 0; i < kids.size(); ++i)
    readers.emplace_back([&, i] {
      while (auto l = anchor::proc::read_line(kids[i].stdout_fd.get())) res[i].out += *l + "\n";
      kids[i].stdout_fd.reset();
      res[i].status = anchor::proc::wait_exit(kids[i].pid);
    });
  for (auto& t : readers) t.join();
  return res;
}

// The variables srun or torchrun give launched process `rank` of 2, one per node.
std::map<std::string, std::string> node_env(int rank, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", "2"},
          {"LOCAL_RANK", "0"},
          {"LOCAL_WORLD_SIZE", "1"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
}

// Two hand-launched nodes: node 0 with --run-dir <t>/run, node 1 without (it
// must use the run directory node 0 published), `extra` after both.
std::vector<NodeRun> run_two_nodes(const TempDir& t, const std::vector<std::string>& extra,
                                   const std::map<std::string, std::string>& node1_env = {}) {
  const int port = anchor::dist::free_loopback_port();
  std::vector<std::string> a0 = {ANCHOR_BINARY, "pilot", kPilot, "--run-dir", t.str("run")};
  std::vector<std::string> a1 = {ANCHOR_BINARY, "pilot", kPilot};
  a0.insert(a0.end(), extra.begin(), extra.end());
  a1.insert(a1.end(), extra.begin(), extra.end());
  auto e1 = node_env(1, port);
  for (const auto& [k, v] : node1_env) e1[k] = v;
  return run_together({a0, a1}, {node_env(0, port), e1});
}

// The pilot passed over 2 nodes with bitwise resume on each rank.
void expect_passed_on_two_nodes(const TempDir& t) {
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["verdict"], "match");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(report["resume"]["per_rank"][rank]["verdict"], "match");
  ASSERT_TRUE(report.contains("distributed"));
  EXPECT_EQ(report["distributed"]["nodes"], 2);
  EXPECT_EQ(report["distributed"]["world_size"], 2);
  ASSERT_EQ(report["distributed"]["per_rank"].size(), 2u);
  EXPECT_EQ(report["distributed"]["per_rank"][0]["node"], 0);
  EXPECT_EQ(report["distributed"]["per_rank"][1]["node"], 1);
  EXPECT_FALSE(report["distributed"]["per_rank"][1].value("host", "").empty());
  EXPECT_NE(anchor::fs::read_file(t.str("run/report.md")).find("2 ranks on 2 nodes"), std::string::npos);
  // Rank 1 ran (on node 1) and wrote its share of the committed checkpoint and its results.
  EXPECT_TRUE(std::filesystem::exists(t.str("run/checkpoints/step-00000002/rng-rank00001-of-00002.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(t.str("run/work/resume-rank1.json")));
  EXPECT_FALSE(std::filesystem::exists(t.str("run/.anchor-node-check")));  // the visibility mark is removed
  // The kill reached node 1: its agent SIGKILLed rank 1 of the reference worker.
  std::ifstream ev(t.str("run/events.jsonl"));
  bool relayed = false, remote_killed = false;
  for (std::string line; std::getline(ev, line);) {
    auto e = json::parse(line);
    if (e.value("event", "") == "sigkill_sent") relayed = e.value("nodes", 0) == 2;
    if (e.value("event", "") == "remote_ranks_ended" && e["worker"] == "reference")
      remote_killed = e["ranks"].size() == 1 && e["ranks"][0]["rank"] == 1 && e["ranks"][0]["killed"] == true &&
                      e["ranks"][0]["status"] == 137;
  }
  EXPECT_TRUE(relayed);
  EXPECT_TRUE(remote_killed);
}

TEST(PilotMultinode, TwoHandLaunchedNodesPassWithBitwiseResumePerRank) {
  for (const char* v : {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"}) ::unsetenv(v);
  TempDir t("pilotmn");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_two_nodes(t, {});
  std::cout << "two-node pilot (hand launch): "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  ASSERT_EQ(r[0].status, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
  ASSERT_EQ(r[1].status, 0) << r[1].out;
  EXPECT_NE(r[0].out.find("supervises the pilot over 2 nodes"), std::string::npos) << r[0].out;
  EXPECT_NE(r[1].out.find("agent of node 1"), std::string::npos) << r[1].out;
  EXPECT_NE(r[1].out.find("rank 0's pilot exited with 0"), std::string::npos) << r[1].out;
  expect_passed_on_two_nodes(t);
  // The supervisor's node starts its rank with the pools' wait settings (threads::pool_wait_env); what
  // rank 0 ran with is in the manifest (a rank on another node writes none).
  const json wait = read_json(t.str("run/manifest.json"))["threads"]["wait_env"];
  EXPECT_EQ(wait["GOMP_SPINCOUNT"], "10000") << wait.dump();
  EXPECT_EQ(wait["OPENBLAS_THREAD_TIMEOUT"], "4") << wait.dump();
}

// srun's variables (one task per node), no --run-dir on either node: the
// supervisor's run.output_dir/<run-id> is the only run directory made.
TEST(PilotMultinode, TwoSrunStyleNodesShareTheSupervisorsRunDirectory) {
  TempDir t("pilotmnslurm");
  const std::string port = std::to_string(anchor::dist::free_loopback_port());
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int node = 0; node < 2; ++node) {
    argvs.push_back({ANCHOR_BINARY, "pilot", kPilot, "--set", "run.output_dir=" + t.str("runs")});
    envs.push_back({{"SLURM_PROCID", std::to_string(node)},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NTASKS_PER_NODE", "1"},
                    {"SLURM_NODEID", std::to_string(node)},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}});
  }
  auto r = run_together(argvs, envs);
  ASSERT_EQ(r[0].status, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
  ASSERT_EQ(r[1].status, 0) << r[1].out;
  EXPECT_NE(r[1].out.find("via slurm"), std::string::npos) << r[1].out;
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(t.str("runs"))) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  std::filesystem::create_symlink(runs[0], t.str("run"));  // where expect_passed_on_two_nodes looks
  expect_passed_on_two_nodes(t);
}

// Two torchrun agents (`python`'s torch), one per "node", static rendezvous
// on node 0's agent store (TORCHELASTIC_USE_AGENT_STORE=True), each starting
// one anchor pilot; node 0's with --run-dir <t>/run.
std::vector<NodeRun> torchrun_two_nodes(const TempDir& t, const std::string& python) {
  const std::string port = std::to_string(anchor::dist::free_loopback_port());
  std::vector<std::vector<std::string>> argvs;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> a = {python,
                                  "-m",
                                  "torch.distributed.run",
                                  "--no_python",
                                  "--nnodes",
                                  "2",
                                  "--node_rank",
                                  std::to_string(node),
                                  "--nproc_per_node",
                                  "1",
                                  "--master_addr",
                                  "127.0.0.1",
                                  "--master_port",
                                  port,
                                  "--redirects",
                                  "1",
                                  "--tee",
                                  "1",
                                  ANCHOR_BINARY,
                                  "pilot",
                                  kPilot};
    if (node == 0) {
      a.push_back("--run-dir");
      a.push_back(t.str("run"));
    }
    argvs.push_back(a);
  }
  return run_together(argvs, {{}, {}});
}

// torchrun (this build's torch: 1.13 or 2.x): the ranks on two nodes meet
// through node 0's agent store.
TEST(PilotMultinode, TorchrunWithTwoNodesPassesWithBitwiseResume) {
  TempDir t("pilotmntr");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = torchrun_two_nodes(t, ANCHOR_TEST_PYTHON);
  std::cout << "two-node pilot (torchrun): "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  ASSERT_EQ(r[0].status, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
  ASSERT_EQ(r[1].status, 0) << r[1].out;
  EXPECT_NE(r[0].out.find("(agent's, /worker/attempt_0)"), std::string::npos) << r[0].out;
  EXPECT_NE(r[1].out.find("agent of node 1"), std::string::npos) << r[1].out;
  expect_passed_on_two_nodes(t);
}

// The other LibTorch line's torchrun over two nodes: its agent's store speaks
// another protocol than this build's LibTorch (1.13's client hangs on 2.x's
// store, 2.x's client is dropped by 1.13's), and over several nodes it is the
// only place the ranks can meet. Each node refuses at once, before it touches
// the store, naming both versions and what to launch instead; no run starts.
TEST(PilotMultinode, TheOtherLinesTorchrunOverTwoNodesIsRefusedNamingBothVersions) {
  const std::string other = ANCHOR_OTHER_TORCH_PYTHON;
  {
    anchor::proc::SpawnOptions o;
    if (anchor::proc::run_capture({other, "-c", "import torch"}, o).status != 0)
      GTEST_SKIP() << other << " has no torch here: the other LibTorch line is not installed (make test installs both)";
  }
  TempDir t("pilotmnother");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = torchrun_two_nodes(t, other);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "refused after " << s << " s\n";
  for (const auto& n : r) {
    EXPECT_NE(n.status, 0) << n.out;
    EXPECT_NE(n.out.find("speak different c10d store protocols"), std::string::npos) << n.out;
    EXPECT_NE(n.out.find("exitcode  : 2"), std::string::npos) << "anchor's exit code for a config error: " << n.out;
    EXPECT_NE(n.out.find("on one node either torchrun works"), std::string::npos) << n.out;
  }
  EXPECT_LT(s, 60.0) << "no wait for a store that cannot answer";
  EXPECT_FALSE(std::filesystem::exists(t.str("run/report.json")));
}

// Node 1 does not see the run directory (fault injection: it looks for the
// supervisor's mark elsewhere, as a node without the shared mount would):
// both end with exit 2 and say what, why and what to do; no report passes.
TEST(PilotMultinode, ARunDirectoryANodeCannotSeeIsAConfigErrorOnBothNodes) {
  TempDir t("pilotmnhide");
  auto r = run_two_nodes(t, {"--set", "distributed.timeout_s=10"}, {{"ANCHOR_NODE_FAULT", "hide_run_dir"}});
  EXPECT_EQ(r[1].status, 2) << r[1].out;
  EXPECT_EQ(r[0].status, 2) << r[0].out;
  for (const auto& n : r) {
    EXPECT_NE(n.out.find("is not visible on node 1"), std::string::npos) << n.out;
    EXPECT_NE(n.out.find("needs one filesystem for its run directory and checkpoints"), std::string::npos) << n.out;
    EXPECT_NE(n.out.find("--run-dir, run.output_dir or checkpoint.dir on a shared filesystem"), std::string::npos)
        << n.out;
  }
  EXPECT_NE(r[0].out.find("pilot failed in stage nodes"), std::string::npos) << r[0].out;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
  EXPECT_FALSE(std::filesystem::exists(t.str("run/work/reference.json")));  // no worker ran
}

// Rank 1, on node 1, SIGKILLs itself in step 1 before the all-reduce: rank 0
// (node 0) fails naming rank 1, the supervisor names it with its node, the
// agent reports it, and both processes end well within the timeout.
TEST(PilotMultinode, ARemoteRankThatDiesFailsThePilotNamingItAndItsNode) {
  TempDir t("pilotmnkill");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_two_nodes(t, {"--set", "distributed.timeout_s=15"}, {{"ANCHOR_DIST_FAULT", "sigkill:1:1"}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "two-node pilot with a dead remote rank ended after " << s << " s (timeout 15 s)\n";
  EXPECT_EQ(r[0].status, 1) << r[0].out;
  EXPECT_EQ(r[1].status, 1) << r[1].out;
  EXPECT_NE(r[1].out.find("rank 1 kills itself in step 1"), std::string::npos) << r[1].out;
  EXPECT_NE(r[0].out.find("pilot failed in stage train"), std::string::npos) << r[0].out;
  EXPECT_NE(r[0].out.find("rank 1 (node 1"), std::string::npos) << r[0].out;
  EXPECT_NE(r[0].out.find("exited with status 137"), std::string::npos) << r[0].out;
  EXPECT_LT(s, 15.0);
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "failed");
}

// Rank 0 (node 0) SIGKILLs itself in step 1: the supervisor's side failed, so
// it relays a stop and node 1's agent SIGKILLs rank 1 at once, long before
// rank 1's collectives would time out (60 s).
TEST(PilotMultinode, WhenTheSupervisorsSideFailsTheAgentStopsItsRanks) {
  TempDir t("pilotmnstop");
  const int port = anchor::dist::free_loopback_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto e0 = node_env(0, port);
  e0["ANCHOR_DIST_FAULT"] = "sigkill:0:1";
  auto r =
      run_together({{ANCHOR_BINARY, "pilot", kPilot, "--run-dir", t.str("run"), "--set", "distributed.timeout_s=60"},
                    {ANCHOR_BINARY, "pilot", kPilot, "--set", "distributed.timeout_s=60"}},
                   {e0, node_env(1, port)});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "two-node pilot with a dead rank 0 ended after " << s << " s (timeout 60 s)\n";
  EXPECT_EQ(r[0].status, 1) << r[0].out;
  EXPECT_EQ(r[1].status, 1) << r[1].out;
  EXPECT_NE(r[1].out.find("SIGKILLed its ranks of the reference worker"), std::string::npos) << r[1].out;
  EXPECT_LT(s, 30.0);
  std::ifstream ev(t.str("run/events.jsonl"));
  bool stopped = false;
  for (std::string line; std::getline(ev, line);) {
    auto e = json::parse(line);
    if (e.value("event", "") == "remote_ranks_ended")
      stopped = e["ranks"].size() == 1 && e["ranks"][0]["killed"] == true && e["ranks"][0]["status"] == 137;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(read_json(t.str("run/report.json"))["status"], "failed");
}

// Node 1 never comes: the supervisor gives up after distributed.timeout_s
// naming it, instead of hanging.
TEST(PilotMultinode, ANodeThatNeverComesIsNamedAfterTheTimeout) {
  TempDir t("pilotmnalone");
  const int port = anchor::dist::free_loopback_port();
  auto r = anchor::testing::run_anchor({"pilot", kPilot, "--run-dir", t.str("run"), "--set", "distributed.timeout_s=2"},
                                       node_env(0, port));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("node 1 (rank 1) did not answer within 2 s (distributed.timeout_s)"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_json(t.str("run/report.json"))["status"], "failed");
}

TEST(PilotMultinode, UnevenNodesAreRefused) {
  TempDir t("pilotmnuneven");
  auto r = anchor::testing::run_anchor({"pilot", kPilot, "--run-dir", t.str("run")}, {{"RANK", "0"},
                                                                                      {"WORLD_SIZE", "3"},
                                                                                      {"LOCAL_RANK", "0"},
                                                                                      {"LOCAL_WORLD_SIZE", "2"},
                                                                                      {"MASTER_ADDR", "127.0.0.1"},
                                                                                      {"MASTER_PORT", "29500"}});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("3 ranks do not fill nodes of 2 evenly"), std::string::npos) << r.output;
}

// A program pilot over two hand-launched nodes (issue 41, item 4): node 0's anchor supervises and
// starts rank 0 of the DDP example; node 1's agent starts rank 1 with the same command, environment
// and spec, SIGKILLs it on the relayed kill, and reports how it ended. The resume matches bitwise on
// both ranks; rank 1's events reach the supervisor through the shared run directory.
TEST(PilotMultinode, AProgramPilotRunsItsRanksOnBothNodes) {
  TempDir t("pilotmnprog");
  std::filesystem::copy(source_path("examples/ddp"), t.path() / "ddp", std::filesystem::copy_options::recursive);
  std::filesystem::create_directories(t.path() / "bin");  // `python3`, as the example names it: this build's
  {
    std::ofstream w(t.str("bin/python3"));
    w << "#!/bin/sh\nexec '" << ANCHOR_TEST_PYTHON << "' \"$@\"\n";
  }
  std::filesystem::permissions(t.str("bin/python3"), std::filesystem::perms::owner_all);
  const char* path = std::getenv("PATH");
  const int port = anchor::dist::free_loopback_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> a = {ANCHOR_BINARY, "pilot", t.str("ddp/pilot.yaml"), "--set",
                                  "distributed.nproc_per_node=1"};
    if (node == 0) a.insert(a.end(), {"--run-dir", t.str("run")});
    argvs.push_back(a);
    auto env = node_env(node, port);
    env.insert({{"PATH", t.str("bin") + ":" + (path ? path : "/usr/bin:/bin")},
                {"PYTHONPATH", source_path("python")},
                {"OMP_NUM_THREADS", "1"}});
    envs.push_back(env);
  }
  auto r = run_together(argvs, envs);
  ASSERT_EQ(r[0].status, 0) << r[0].out << "\n--- node 1:\n" << r[1].out;
  ASSERT_EQ(r[1].status, 0) << r[1].out;
  EXPECT_NE(r[0].out.find("supervises the pilot over 2 nodes"), std::string::npos) << r[0].out;
  EXPECT_NE(r[1].out.find("started ranks 1..1 of the reference worker"), std::string::npos) << r[1].out;
  EXPECT_NE(r[1].out.find("started ranks 1..1 of the resume worker"), std::string::npos) << r[1].out;
  auto report = read_json(t.str("run/report.json"));
  EXPECT_EQ(report["status"], "passed");
  EXPECT_EQ(report["resume"]["mode"], "bitwise");
  EXPECT_EQ(report["program"]["world_size"], 2);
  ASSERT_EQ(report["resume"]["per_rank"].size(), 2u) << report["resume"].dump(2);
  for (const auto& pr : report["resume"]["per_rank"]) EXPECT_EQ(pr["verdict"], "match");
  // Node 1's rank of worker A was killed by its agent on the relayed kill; of worker B it ended by itself.
  std::ifstream ev(t.str("run/events.jsonl"));
  bool killed = false, ended = false;
  for (std::string line; std::getline(ev, line);) {
    auto e = json::parse(line);
    if (e.value("event", "") != "remote_ranks_ended") continue;
    const auto& rank1 = e["ranks"].at(0);
    if (e["worker"] == "reference") killed = rank1["rank"] == 1 && rank1["killed"] == true;
    if (e["worker"] == "resume") ended = rank1["rank"] == 1 && rank1["status"] == 0;
  }
  EXPECT_TRUE(killed);
  EXPECT_TRUE(ended);

  // The negative control: rank 1's data cursor not restored is named on rank 1, and both nodes exit 3. The
  // determinism control (a third worker group, on both nodes) finds the program repeatable.
  for (auto& a : argvs) {
    a.insert(a.end(), {"--set", "program.command=[python3, train.py, --forget, data]"});
    if (a.size() > 7 && a[5] == "--run-dir") a[6] = t.str("forgot");
  }
  auto f = run_together(argvs, envs);
  ASSERT_EQ(f[0].status, 3) << f[0].out << "\n--- node 1:\n" << f[1].out;
  EXPECT_EQ(f[1].status, 3) << f[1].out;
  EXPECT_NE(f[1].out.find("started ranks 1..1 of the control worker"), std::string::npos) << f[1].out;
  auto forgot = read_json(t.str("forgot/report.json"));
  const auto& cause = forgot["resume"]["cause"];
  EXPECT_NE(std::find(cause.begin(), cause.end(), "rank 1: data"), cause.end()) << forgot["resume"].dump(2);
  EXPECT_EQ(forgot["determinism"]["finding"], "repeatable") << forgot["determinism"].dump(2);
}

}  // namespace
