// The launch environment: torchrun/TorchElastic, Slurm, none; partial and
// contradictory environments are errors that name the variables.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "anchor/common/process.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/store.hpp"
#include "anchor/error.hpp"

namespace {

using namespace anchor;
using Vars = std::map<std::string, std::string>;

dist::LaunchEnv detect(const Vars& v) { return dist::detect_launch(dist::map_env(v)); }

// Expects a kConfig error whose message contains every fragment.
void expect_error(const Vars& v, std::initializer_list<const char*> fragments) {
  try {
    detect(v);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

const Vars kTorchrun{{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "10.0.0.5"},
                     {"MASTER_PORT", "29511"},
                     {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                     {"TORCHELASTIC_RESTART_COUNT", "0"}};

TEST(Launch, NothingSetIsOneProcess) {
  auto e = detect({});
  EXPECT_EQ(e.launcher, dist::Launcher::kNone);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
  EXPECT_TRUE(e.store_server());
}

TEST(Launch, TorchrunStandalone) {
  auto e = detect(kTorchrun);
  EXPECT_EQ(e.launcher, dist::Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.5");
  EXPECT_EQ(e.master_port, 29511);
  EXPECT_FALSE(e.agent_store);
  EXPECT_FALSE(e.store_server());  // rank 1 is a client
  EXPECT_EQ(e.store_prefix(), "");
  auto v = kTorchrun;
  v["RANK"] = "0";
  v["LOCAL_RANK"] = "0";
  EXPECT_TRUE(detect(v).store_server());  // rank 0 hosts the store
}

TEST(Launch, TorchrunAgentStoreEveryRankIsAClientUnderThePrefix) {
  auto v = kTorchrun;
  v["RANK"] = "0";
  v["LOCAL_RANK"] = "0";
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  v["TORCHELASTIC_RESTART_COUNT"] = "3";
  auto e = detect(v);
  EXPECT_TRUE(e.agent_store);
  EXPECT_FALSE(e.store_server());
  EXPECT_EQ(e.store_prefix(), "/worker/attempt_3");
  EXPECT_NE(e.describe().find("/worker/attempt_3"), std::string::npos) << e.describe();
}

// torchrun's per-attempt directory (two up from TORCHELASTIC_ERROR_FILE):
// on one node under the agent's store the ranks meet there, on several nodes
// (or without the agent's store, or without the file) they do not.
TEST(Launch, TorchrunAttemptDirectoryIsWhereOneNodesRanksMeet) {
  auto v = kTorchrun;
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  v["TORCHELASTIC_ERROR_FILE"] = "/tmp/torchelastic_ab/none_cd/attempt_0/1/error.json";
  auto e = detect(v);
  EXPECT_EQ(e.attempt_dir, "/tmp/torchelastic_ab/none_cd/attempt_0");
  EXPECT_TRUE(e.meets_in_attempt_dir());
  EXPECT_NE(e.describe().find("store rank 0's, published in /tmp/torchelastic_ab/none_cd/attempt_0 (not the agent's)"),
            std::string::npos)
      << e.describe();
  auto nodes = v;
  nodes["LOCAL_RANK"] = "0";
  nodes["LOCAL_WORLD_SIZE"] = "1";
  EXPECT_FALSE(detect(nodes).meets_in_attempt_dir());
  EXPECT_NE(detect(nodes).describe().find("(agent's, /worker/attempt_0)"), std::string::npos);
  auto own = v;
  own["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(detect(own).meets_in_attempt_dir());
  for (const char* f : {"", "error.json", "relative/attempt_0/1/error.json", "/error.json"}) {
    auto bad = v;
    bad["TORCHELASTIC_ERROR_FILE"] = f;
    EXPECT_FALSE(detect(bad).meets_in_attempt_dir()) << f;
  }
  v.erase("TORCHELASTIC_ERROR_FILE");
  EXPECT_FALSE(detect(v).meets_in_attempt_dir());
}

// Real stores: rank 0 hosts on a free port and publishes it in the attempt
// directory; rank 1 finds it there, and a value set by one is read by the
// other. The port file goes with rank 0's store.
TEST(Launch, RanksOfOneNodeMeetThroughThePortRankZeroPublishes) {
  const std::string dir = ::testing::TempDir() + "anchor-attempt-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto v = kTorchrun;
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  v["TORCHELASTIC_ERROR_FILE"] = dir + "/0/error.json";
  v["RANK"] = v["LOCAL_RANK"] = "0";
  const auto env0 = detect(v);
  v["RANK"] = v["LOCAL_RANK"] = "1";
  const auto env1 = detect(v);
  ASSERT_EQ(env0.attempt_dir, std::filesystem::path(dir).string());
  {
    dist::Store host(env0, 10);
    EXPECT_TRUE(std::filesystem::exists(dir + "/anchor-launch-store"));
    dist::Store client(env1, 10);
    host.set("pilot/exit", "3");
    EXPECT_EQ(client.try_get("pilot/exit", "rank 0"), std::optional<std::string>("3"));
    // A value set is there for every client once set returns: TCPStore's own
    // set does not wait for the server, and a read at once raced it.
    int unseen = 0;
    for (int i = 0; i < 2000; ++i) {
      host.set("k" + std::to_string(i), "v");
      unseen += client.try_get("k" + std::to_string(i), "rank 0") ? 0 : 1;
    }
    EXPECT_EQ(unseen, 0);
    EXPECT_EQ(client.add("pilot/ack", 1), 1);
    EXPECT_EQ(host.add("pilot/ack", 0), 1);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/anchor-launch-store"));
  std::filesystem::remove_all(dir);
}

// Rank 1 with nothing published: an error naming the file within its timeout,
// not a hang; a file that holds no port is named as such.
TEST(Launch, ARankWithNoPublishedStoreSaysWhereItLookedWithinTheTimeout) {
  const std::string dir = ::testing::TempDir() + "anchor-attempt-none-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto v = kTorchrun;
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  v["TORCHELASTIC_ERROR_FILE"] = dir + "/1/error.json";
  const auto env1 = detect(v);
  auto expect_runtime = [&](const std::string& fragment) {
    try {
      dist::Store client(env1, 0.3);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_runtime("rank 0 did not publish its store in " + std::filesystem::path(dir).string() +
                 "/anchor-launch-store within 0 s");
  for (const char* junk : {"", "port\n", "0\n", "70000\n", "-5\n"}) {
    std::ofstream(dir + "/anchor-launch-store") << junk;
    expect_runtime("anchor-launch-store holds no port");
  }
  std::filesystem::remove_all(dir);
}

// A store client of one major torch version cannot use another's store; minor
// versions of one line share a protocol.
TEST(Launch, StoreProtocolsDifferAcrossMajorTorchVersions) {
  const std::string why = dist::store_protocol_mismatch("1.13.0", "2.15.0+cu132");
  EXPECT_NE(why.find("LibTorch 1.13.0 and the agent's torch 2.15.0+cu132"), std::string::npos) << why;
  EXPECT_NE(dist::store_protocol_mismatch("2.15.0", "1.13.0a0+gitunknown"), "");
  EXPECT_EQ(dist::store_protocol_mismatch("2.15.0", "2.4.1+cpu"), "");
  EXPECT_EQ(dist::store_protocol_mismatch("1.13.0", "1.13.0a0+gitunknown"), "");
}

// The torch a live process has loaded, read from what it maps: a Python that
// imported torch (this build's, and the other line's when installed) gives the
// version it prints itself; a process without torch gives none.
TEST(Launch, TheTorchVersionOfAProcessIsReadFromWhatItMaps) {
  for (const std::string python : {std::string(ANCHOR_TEST_PYTHON), std::string(ANCHOR_OTHER_TORCH_PYTHON)}) {
    proc::SpawnOptions o;
    o.capture_stdout = true;
    o.pipe_stdin = true;  // held open: the child waits on it until killed
    o.die_with_parent = true;
    auto kid =
        proc::spawn({python, "-c", "import sys, torch; print(torch.__version__, flush=True); sys.stdin.read()"}, o);
    const auto line = proc::read_line(kid.stdout_fd.get());
    if (!line) {  // no torch in that Python: only acceptable for the other line
      ::kill(kid.pid, SIGKILL);
      proc::wait_exit(kid.pid);
      EXPECT_NE(python, std::string(ANCHOR_TEST_PYTHON)) << "this build's Python must import torch";
      continue;
    }
    EXPECT_EQ(dist::torch_version_of_process(kid.pid), std::optional<std::string>(*line)) << python;
    ::kill(kid.pid, SIGKILL);
    proc::wait_exit(kid.pid);
  }
  proc::SpawnOptions o;
  auto sleeper = proc::spawn({"/bin/sleep", "30"}, o);
  // Until its exec: before it the child is a fork of this test, which may map torch itself.
  std::error_code ec;
  for (int i = 0;
       i < 2000 &&
       std::filesystem::read_symlink("/proc/" + std::to_string(sleeper.pid) + "/exe", ec).filename() != "sleep";
       ++i)
    ::usleep(1000);
  EXPECT_EQ(dist::torch_version_of_process(sleeper.pid), std::nullopt);
  ::kill(sleeper.pid, SIGKILL);
  proc::wait_exit(sleeper.pid);
  EXPECT_EQ(dist::torch_version_of_process(-1), std::nullopt);
}

TEST(Launch, HandMadeSingleNodeLaunchMayOmitTheLocalPair) {
  auto e = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
}

TEST(Launch, TorchrunPartialEnvironments) {
  expect_error({{"RANK", "0"}}, {"RANK is set but WORLD_SIZE is not"});
  expect_error({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE is set but RANK is not"});
  expect_error({{"LOCAL_RANK", "0"}}, {"LOCAL_RANK is set but RANK is not"});
  auto v = kTorchrun;
  v.erase("MASTER_ADDR");
  expect_error(v, {"no MASTER_ADDR"});
  v = kTorchrun;
  v.erase("MASTER_PORT");
  expect_error(v, {"no MASTER_PORT"});
  v = kTorchrun;
  v.erase("LOCAL_WORLD_SIZE");
  expect_error(v, {"LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"});
  // One rank needs no store address.
  EXPECT_NO_THROW(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
}

TEST(Launch, TorchrunContradictions) {
  auto with = [](const char* k, const char* val) {
    auto v = kTorchrun;
    v[k] = val;
    return v;
  };
  expect_error(with("RANK", "2"), {"RANK=2 is not below WORLD_SIZE=2"});
  expect_error(with("LOCAL_WORLD_SIZE", "4"), {"LOCAL_WORLD_SIZE=4 exceeds WORLD_SIZE=2"});
  expect_error(with("LOCAL_RANK", "2"), {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"});
  expect_error(with("WORLD_SIZE", "0"), {"WORLD_SIZE is 0"});
  expect_error(with("RANK", "-1"), {"RANK='-1' is not a non-negative integer"});
  expect_error(with("RANK", "1x"), {"RANK='1x'"});
  expect_error(with("MASTER_PORT", "70000"), {"MASTER_PORT=70000 is not a TCP port"});
  expect_error(with("TORCHELASTIC_USE_AGENT_STORE", "maybe"), {"TORCHELASTIC_USE_AGENT_STORE='maybe'"});
  auto v = kTorchrun;
  v["RANK"] = "0";
  expect_error(v, {"LOCAL_RANK=1 exceeds RANK=0"});
}

const Vars kSlurm{{"SLURM_PROCID", "3"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NTASKS", "4"},
                  {"SLURM_NTASKS_PER_NODE", "2"},
                  {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"},
                  {"SLURM_JOB_ID", "123457"}};

TEST(Launch, Slurm) {
  auto e = detect(kSlurm);
  EXPECT_EQ(e.launcher, dist::Launcher::kSlurm);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 20000 + 123457 % 10000);  // derived from the job id, below the ephemeral ports
  auto v = kSlurm;
  v["MASTER_ADDR"] = "node7";
  v["MASTER_PORT"] = "31000";
  v.erase("SLURM_NTASKS_PER_NODE");
  v["SLURM_TASKS_PER_NODE"] = "2(x2)";
  e = detect(v);
  EXPECT_EQ(e.master_addr, "node7");  // the environment wins
  EXPECT_EQ(e.master_port, 31000);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.launch_id, "Slurm job 123457 step ?");
  v["SLURM_STEP_ID"] = "4";
  EXPECT_EQ(detect(v).launch_id, "Slurm job 123457 step 4");
  v["SLURM_STEP_ID"] = "4; rm -rf /";
  EXPECT_EQ(detect(v).launch_id, "Slurm job 123457 step ?");
}

// Two Slurm jobs on one node whose ids differ by 10000 derive the same store
// port. Rank 1 of the second job, started while the first job's rank 0 holds
// the port, must not take that store's verdict as its own: it refuses it,
// naming both launches. A rank of the same job (negative control) joins.
TEST(Launch, ARankRefusesTheStoreOfAnotherLaunchOnItsPort) {
  const int port = dist::free_loopback_port();
  auto job = [&](const std::string& id, int rank) {
    return detect({{"SLURM_PROCID", std::to_string(rank)},
                   {"SLURM_LOCALID", std::to_string(rank)},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_NTASKS_PER_NODE", "2"},
                   {"SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)},
                   {"SLURM_JOB_ID", id},
                   {"SLURM_STEP_ID", "0"}});
  };
  dist::Store first(job("153", 0), 10);
  first.set("pilot/exit", "0");
  {
    dist::Store same(job("153", 1), 10);
    EXPECT_EQ(same.try_get("pilot/exit", "rank 0"), std::optional<std::string>("0"));
  }
  try {
    dist::Store other(job("10153", 1), 10);
    ADD_FAILURE() << "rank 1 of job 10153 joined job 153's store";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("serves another launch (Slurm job 153 step 0), not this one (Slurm job 10153 step 0)"),
              std::string::npos)
        << m;
    EXPECT_NE(e.hint().find("MASTER_PORT of its own"), std::string::npos) << e.hint();
  }
}

TEST(Launch, SlurmPartialAndContradictory) {
  expect_error({{"SLURM_PROCID", "0"}}, {"SLURM_PROCID is set but SLURM_NTASKS is not"});
  auto v = kSlurm;
  v.erase("SLURM_LOCALID");
  expect_error(v, {"SLURM_LOCALID is unset"});
  v = kSlurm;
  v.erase("SLURM_NTASKS_PER_NODE");
  expect_error(v, {"SLURM_TASKS_PER_NODE"});
  v = kSlurm;
  v["SLURM_PROCID"] = "4";
  expect_error(v, {"SLURM_PROCID=4 is not below SLURM_NTASKS=4"});
  v = kSlurm;
  v.erase("SLURM_LAUNCH_NODE_IPADDR");
  expect_error(v, {"no MASTER_ADDR"});
  v = kSlurm;
  v.erase("SLURM_JOB_ID");
  expect_error(v, {"no MASTER_PORT"});
}

TEST(Launch, TorchrunInsideSrunUsesTorchrunsRanks) {
  auto v = kSlurm;
  for (const auto& [k, val] : kTorchrun) v[k] = val;
  auto e = detect(v);
  EXPECT_EQ(e.launcher, dist::Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
}

TEST(Launch, SelfLaunchEnvironmentRoundTrips) {
  for (int r = 0; r < 3; ++r) {
    auto e = detect(dist::self_launch_env(r, 3, 29600));
    EXPECT_EQ(e.launcher, dist::Launcher::kTorchrun);
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.world_size, 3);
    EXPECT_EQ(e.master_port, 29600);
    EXPECT_EQ(e.store_server(), r == 0);
  }
}

// A multi-node pilot's worker rank: its real placement, node 0's store address.
TEST(Launch, PlacedLaunchEnvironmentRoundTripsWithItsNode) {
  auto e = detect(dist::placed_launch_env(3, 4, 1, 2, "10.0.0.7", 29601));
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);  // several nodes: Gloo picks the network device, not the loopback
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29601);
  EXPECT_FALSE(e.store_server());
  EXPECT_FALSE(e.agent_store);
}

// The launch port lies below the ephemeral ports (so no outgoing connection
// takes it before the store binds it) and apart from Slurm's job-id ports,
// and it can be bound. port_is_free's negative control: a port held by a
// listener is not free.
TEST(Launch, FreePortIsAUsableTcpPortBelowTheEphemeralOnes) {
  for (int p : {dist::free_port(), dist::free_loopback_port()}) {
    EXPECT_GE(p, 10000);
    EXPECT_LT(p, dist::kSlurmPortBase);
    EXPECT_TRUE(dist::port_is_free(p));
  }
  const int held = dist::free_port();
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(held));
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(s, 1), 0);
  EXPECT_FALSE(dist::port_is_free(held));
  ::close(s);
}

// In a child: optionally joins a store (one rank, hosting it), then writes to a
// stream socket whose peer has closed. Returns the child's wait status.
int write_to_a_closed_peer(bool join_a_store) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // as a fresh process has it (an earlier test here may have joined a store)
    if (join_a_store) {
      dist::LaunchEnv env;
      env.master_port = dist::free_port();
      dist::Store store(env, 10);
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) ::_exit(10);
    ::close(sv[1]);
    const char byte = 'x';
    const ssize_t n = ::write(sv[0], &byte, 1);
    ::_exit(n < 0 && errno == EPIPE ? 0 : 11);  // reached only when SIGPIPE did not end the process
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A rank whose peer dies while it writes (Gloo's writev) must see EPIPE and
// name the dead rank, not die of SIGPIPE with status 141 and say nothing:
// joining a store ignores SIGPIPE. Negative control: the same write in a
// process that joined no store is ended by SIGPIPE.
TEST(Launch, JoiningAStoreTurnsAWriteToADeadPeerIntoAnErrorNotSigpipe) {
  const int joined = write_to_a_closed_peer(true);
  EXPECT_TRUE(WIFEXITED(joined) && WEXITSTATUS(joined) == 0) << "wait status " << joined;
  const int control = write_to_a_closed_peer(false);
  EXPECT_TRUE(WIFSIGNALED(control) && WTERMSIG(control) == SIGPIPE) << "wait status " << control;
}

TEST(Launch, NprocPerNodeMustAgreeWithAnExternalLauncher) {
  auto e = detect(kTorchrun);
  EXPECT_NO_THROW(dist::check_nproc_per_node(e, 1));
  EXPECT_NO_THROW(dist::check_nproc_per_node(e, 2));
  EXPECT_THROW(dist::check_nproc_per_node(e, 4), Error);
  EXPECT_NO_THROW(dist::check_nproc_per_node(detect({}), 4));  // no launcher: the supervisor starts them
}

// Runs f, expects a kConfig error whose message contains every fragment.
template <typename F>
void expect_config_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string all = std::string(e.what()) + " (hint: " + e.hint() + ")";
    for (const char* frag : fragments) EXPECT_NE(all.find(frag), std::string::npos) << all;
  }
}

TEST(RankDevice, EachRankTakesTheGpuOfItsLocalRank) {
  auto e = detect(kTorchrun);  // local rank 1 of 2
  EXPECT_EQ(dist::rank_device("cuda", e, 2), "cuda:1");
  EXPECT_EQ(dist::rank_device("rocm", e, 2), "cuda:1");  // HIP devices are cuda to LibTorch
  EXPECT_EQ(dist::rank_device("auto", e, 2), "cuda:1");
  EXPECT_EQ(dist::rank_device("auto", e, 0), "auto");  // no GPU: the CPU
  EXPECT_EQ(dist::rank_device("cpu", e, 2), "cpu");
  // One process: the device as configured, whatever is visible.
  EXPECT_EQ(dist::rank_device("cuda", detect({}), 8), "cuda");
  EXPECT_EQ(dist::rank_device("cuda:3", detect({}), 8), "cuda:3");
}

TEST(RankDevice, OneProcessPerVisibleGpu) {
  auto e = detect(kTorchrun);
  expect_config_error([&] { dist::rank_device("cuda", e, 8); },
                      {"2 ranks on this node but 8 visible GPUs", "--nproc-per-node 8", "CUDA_VISIBLE_DEVICES"});
  expect_config_error([&] { dist::rank_device("auto", e, 1); }, {"2 ranks on this node but 1 visible GPU:"});
  expect_config_error([&] { dist::rank_device("cuda:0", e, 2); }, {"cuda:0 with 2 ranks", "use device: cuda"});
}

TEST(ChooseBackend, AutoTakesNcclOnlyOnAGpuWithNccl) {
  EXPECT_EQ(dist::choose_backend("auto", true, true, "2.5.1"), "nccl");
  EXPECT_EQ(dist::choose_backend("auto", true, false, "2.5.1"), "gloo");
  EXPECT_EQ(dist::choose_backend("auto", false, true, "2.5.1"), "gloo");
  EXPECT_EQ(dist::choose_backend("gloo", true, true, "2.5.1"), "gloo");
  EXPECT_EQ(dist::choose_backend("nccl", true, true, "2.5.1"), "nccl");
}

TEST(ChooseBackend, NcclWithoutAGpuOrWithoutNcclIsAConfigError) {
  expect_config_error([] { dist::choose_backend("nccl", false, true, "2.5.1"); }, {"needs a GPU"});
  expect_config_error([] { dist::choose_backend("nccl", true, false, "1.13.1"); },
                      {"LibTorch (1.13.1) without NCCL/RCCL", "ANCHOR_NCCL=ON"});
  expect_config_error([] { dist::choose_backend("mpi", true, true, "2.5.1"); }, {"'mpi'"});
}

// ANCHOR_DIST_FAULT: the three forms, and anything else refused (a typo would
// otherwise make a fault test pass without its fault).
TEST(DistFault, ParsesTheThreeFormsAndRefusesAnythingElse) {
  using P = dist::DistFault::Point;
  EXPECT_EQ(dist::dist_fault(dist::map_env({})).point, P::kNone);
  auto f = dist::dist_fault(dist::map_env({{"ANCHOR_DIST_FAULT", "sigkill:1:3"}}));
  EXPECT_TRUE(f.at(P::kStep, 1, 3));
  EXPECT_FALSE(f.at(P::kStep, 0, 3));
  EXPECT_TRUE(dist::dist_fault(dist::map_env({{"ANCHOR_DIST_FAULT", "sigkill_save:0:2"}})).at(P::kSave, 0, 2));
  EXPECT_TRUE(dist::dist_fault(dist::map_env({{"ANCHOR_DIST_FAULT", "sigkill_rendezvous:1"}})).at(P::kRendezvous, 1));
  for (const char* bad : {"sigkil:1:1", "sigkill:1", "sigkill:1:1:1", "sigkill_rendezvous:1:2", "sigkill:-1:1", "x"})
    EXPECT_THROW(dist::dist_fault(dist::map_env({{"ANCHOR_DIST_FAULT", bad}})), Error) << bad;
}

}  // namespace
