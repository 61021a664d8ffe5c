#pragma once
// For the integration tests that start tests/support/dist_rank.cpp as real
// ranks on Gloo (test_ddp.cpp, test_zero.cpp): launch, collect, read results.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "anchor/common/process.hpp"
#include "anchor/dist/launch.hpp"

namespace anchor::testing {

struct RankRun {
  int status = -1;
  std::string out;     // stdout and stderr
  double seconds = 0;  // from its start to its exit
};

// Starts `world` ranks of `dist_rank cfg steps out extra...` with the
// self-launch environment (one rank: none) plus `env`, and waits for all.
// kill_rank1_after_rank0: rank 1 is SIGKILLed once rank 0 has been reaped
// (the hung rank of a hang test: the test ends it).
inline std::vector<RankRun> run_ranks(const std::string& dist_rank, const std::string& cfg, int world, int steps,
                                      const std::string& out, const std::vector<std::string>& extra = {},
                                      const std::map<std::string, std::string>& env = {},
                                      bool kill_rank1_after_rank0 = false) {
  using Clock = std::chrono::steady_clock;
  const int port = dist::free_loopback_port();
  std::vector<proc::Child> kids;
  std::vector<Clock::time_point> t0;
  for (int r = 0; r < world; ++r) {
    proc::SpawnOptions o;
    o.capture_stdout = true;
    o.merge_stderr = true;
    o.die_with_parent = true;
    if (world > 1) o.env = dist::self_launch_env(r, world, port);
    for (const auto& [k, v] : env) o.env[k] = v;
    std::vector<std::string> argv{dist_rank, cfg, std::to_string(steps), out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    t0.push_back(Clock::now());
    kids.push_back(proc::spawn(argv, o));
  }
  std::vector<RankRun> res(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto& k = kids[static_cast<std::size_t>(r)];
    auto& x = res[static_cast<std::size_t>(r)];
    if (r == 1 && kill_rank1_after_rank0) ::kill(k.pid, SIGKILL);
    while (auto l = proc::read_line(k.stdout_fd.get())) x.out += *l + "\n";
    k.stdout_fd.reset();
    x.status = proc::wait_exit(k.pid);
    x.seconds = std::chrono::duration<double>(Clock::now() - t0[static_cast<std::size_t>(r)]).count();
  }
  return res;
}

// A small text corpus for the ranks' config: `phrase` + a number, repeated to 20 kB.
inline void write_corpus(const std::filesystem::path& file, const std::string& phrase) {
  std::string text;
  for (int i = 0; text.size() < 20000; ++i) text += phrase + " " + std::to_string(i * 7919 % 1000) + ". ";
  std::ofstream(file) << text;
}

// The raw float32 parameters a rank wrote (dist_rank's <out>.rank<R> file).
inline std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

// The largest element-wise difference: absolute, and relative to max(|a|, 1e-3).
struct MaxDiff {
  double abs = 0, rel = 0;
};
inline MaxDiff max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  MaxDiff d;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = std::fabs(static_cast<double>(a[i]) - b[i]);
    d.abs = std::max(d.abs, x);
    d.rel = std::max(d.rel, x / std::max(std::fabs(static_cast<double>(a[i])), 1e-3));
  }
  if (a.size() != b.size()) d.abs = d.rel = INFINITY;  // different models: never "equal"
  return d;
}

}  // namespace anchor::testing
