// The launch environment: torchrun/TorchElastic, Slurm, none; partial and
// contradictory environments are errors that name the variables.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <map>
#include <string>

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
