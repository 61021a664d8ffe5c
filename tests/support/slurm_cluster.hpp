#pragma once
// A private Slurm cluster on this machine for end-to-end tests of
// `srun anchor pilot` (docs/distributed.md): its own munged (own key and
// socket), slurmctld and one slurmd per node, all on free loopback ports and
// under one temporary directory, all started as real daemons from Debian's
// slurmctld/slurmd/slurm-client/munge packages (scripts/install-deps.sh).
// Several "nodes" are several slurmd processes on this host (`slurmd -N`):
// Slurm places tasks on them as on real nodes (SLURM_NODEID, SLURM_LOCALID,
// SLURM_TASKS_PER_NODE), only the filesystem and the host are shared.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "anchor/common/process.hpp"
#include "anchor/dist/launch.hpp"

namespace anchor::testing {

// Slurm's and munge's daemons live in /usr/sbin, which a non-login PATH may lack.
inline std::string find_program(const std::string& name) { return proc::find_on_path(name, "/usr/sbin:/sbin"); }

class SlurmCluster {
 public:
  // The id of the cluster's first job; each later one is one more.
  int first_job_id() const { return first_job_id_; }

  // Why a cluster cannot be started here ("" when it can): the daemons run as
  // root (SlurmUser=root, munged --force), and the packages must be installed.
  static std::string unavailable_reason() {
    if (::geteuid() != 0) return "the private Slurm cluster runs its daemons as root, and this test is not root";
    for (const char* p : {"munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo"})
      if (find_program(p).empty())
        return std::string(p) +
               " is not installed (scripts/install-deps.sh installs munge, slurmctld, slurmd, "
               "slurm-client)";
    return "";
  }

  // Starts the daemons for `nodes` nodes named n1..nN under `dir` and waits
  // (at most 60 s) until every node is idle. Throws std::runtime_error with
  // the daemons' logs when they do not come up.
  SlurmCluster(const std::filesystem::path& dir, int nodes) : dir_(dir) {
    namespace fsys = std::filesystem;
    fsys::create_directories(dir_ / "state");
    fsys::create_directories(dir_ / "log");
    const std::string key = (dir_ / "munge.key").string(), sock = (dir_ / "munge.sock").string();
    if (proc::run_capture({find_program("mungekey"), "--create", "--keyfile=" + key}).status != 0)
      throw std::runtime_error("mungekey could not create " + key);
    start({find_program("munged"), "--foreground", "--force", "--socket=" + sock, "--key-file=" + key,
           "--pid-file=" + (dir_ / "munged.pid").string(), "--log-file=" + (dir_ / "log/munged.log").string(),
           "--seed-file=" + (dir_ / "munged.seed").string()});
    first_job_id_ = choose_first_job_id();
    const std::string host = proc::host_name();
    std::ofstream conf(dir_ / "slurm.conf");
    conf << "ClusterName=anchortest\n"
         << "SlurmctldHost=" << host << "(127.0.0.1)\n"
         << "SlurmctldPort=" << dist::free_loopback_port() << "\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << sock << "\n"
         << "StateSaveLocation=" << (dir_ / "state").string() << "\n"
         << "SlurmdSpoolDir=" << (dir_ / "spool-%n").string() << "\n"
         << "SlurmctldPidFile=" << (dir_ / "slurmctld.pid").string() << "\n"
         << "SlurmdPidFile=" << (dir_ / "slurmd-%n.pid").string() << "\n"
         << "SlurmctldLogFile=" << (dir_ / "log/slurmctld.log").string() << "\n"
         << "SlurmdLogFile=" << (dir_ / "log/slurmd-%n.log").string() << "\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
         << "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nReturnToService=2\n"
         << "FirstJobId=" << first_job_id_ << "\n";
    std::string names;
    for (int n = 1; n <= nodes; ++n) {
      conf << "NodeName=n" << n << " NodeHostname=" << host << " NodeAddr=127.0.0.1 Port=" << dist::free_loopback_port()
           << " CPUs=" << std::max(1u, std::thread::hardware_concurrency()) << " State=UNKNOWN\n";
      names += (n > 1 ? "," : "") + std::string("n") + std::to_string(n);
    }
    conf << "PartitionName=anchor Nodes=" << names << " Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n";
    conf.close();
    env_["SLURM_CONF"] = (dir_ / "slurm.conf").string();
    start({find_program("slurmctld"), "-D", "-f", env_["SLURM_CONF"]});
    for (int n = 1; n <= nodes; ++n)
      start({find_program("slurmd"), "-D", "-N", "n" + std::to_string(n), "-f", env_["SLURM_CONF"]});
    wait_idle(nodes);
  }

  ~SlurmCluster() {
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
      ::kill(it->pid, SIGKILL);
      proc::wait_exit(it->pid);
    }
    // slurmd's step daemons (slurmstepd) run in sessions of their own and
    // outlive a killed slurmd, waiting for it; they, like every process this
    // cluster started, carry its SLURM_CONF in their environment.
    const std::string mark = "SLURM_CONF=" + env_["SLURM_CONF"];
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "environ");
      for (std::string var; std::getline(f, var, '\0');)
        if (var == mark) {
          ::kill(std::stoi(name), SIGKILL);
          break;
        }
    }
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // The environment srun/sinfo need (SLURM_CONF).
  const std::map<std::string, std::string>& env() const { return env_; }
  std::string logs() const {
    std::string all;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "log")) {
      std::ifstream f(e.path());
      all += "--- " + e.path().filename().string() + "\n" +
             std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    return all;
  }

 private:
  // MASTER_PORT under Slurm defaults to kSlurmPortBase + SLURM_JOB_ID %
  // kSlurmPortSpan. The first job id is chosen so that the ports of the
  // cluster's first kJobs jobs are free now. Ids come in blocks of kJobs, tried
  // from a random block: clusters of tests started side by side (with
  // neighbouring process ids) take whole blocks, never overlapping runs of
  // ports. Those ports lie below the kernel's ephemeral range, so no
  // connection made meanwhile (another test's store client) takes one.
  static int choose_first_job_id() {
    constexpr int kJobs = 8;
    constexpr int kBlocks = (dist::kSlurmPortSpan - 1) / kJobs;
    const int start = static_cast<int>(std::random_device{}() % kBlocks);
    for (int i = 0; i < kBlocks; ++i) {
      const int id = 1 + ((start + i) % kBlocks) * kJobs;
      bool all_free = true;
      for (int j = 0; j < kJobs && all_free; ++j) all_free = dist::port_is_free(dist::kSlurmPortBase + id + j);
      if (all_free) return id;
    }
    throw std::runtime_error("no run of free ports in 20000..29999 for the test cluster's jobs");
  }

  void start(const std::vector<std::string>& argv) {
    proc::SpawnOptions o;
    o.die_with_parent = true;
    o.env = env_;
    daemons_.push_back(proc::spawn(argv, o));
  }

  // Polls sinfo until every node reports idle.
  void wait_idle(int nodes) {
    proc::SpawnOptions o;
    o.env = env_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = proc::run_capture({find_program("sinfo"), "-h", "-N", "-o", "%T"}, o);
      last = r.out;
      int idle = 0;
      std::stringstream ss(r.out);
      for (std::string l; std::getline(ss, l);) idle += l == "idle";
      if (r.status == 0 && idle == nodes) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw std::runtime_error("the private Slurm cluster did not come up within 60 s (sinfo: " + last + ")\n" + logs());
  }

  std::filesystem::path dir_;
  std::map<std::string, std::string> env_;
  std::vector<proc::Child> daemons_;
  int first_job_id_ = 1;
};

}  // namespace anchor::testing
