// bench_checkpoint [--dir D] [--mib M] [--reps R] [--files N]
// Checkpoint save and restore throughput for a state of M MiB (default 256),
// side by side in one run with the disk's own sequential write with fsync
// (dd conv=fsync) and read, and with torch.save/torch.load in /usr/bin/python3
// for the same tensor sizes (bench/torch_save_load.py). Prints a table and the
// ratios of issue 4's goals (docs/benchmarks.md, "Checkpoint save/restore").
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace ck = anchor::checkpoint;
using Clock = std::chrono::steady_clock;

namespace {

// `anchor checkpoint verify DIR`'s peak RSS in MiB, as /usr/bin/time reports it (0 when it fails, or
// time is not installed). Not this process's own wait4: a child started while it holds the state
// counts the state in its ru_maxrss (the high-water mark of the memory it started from).
double verify_peak_rss_mib(const std::string& dir) {
  if (::access("/usr/bin/time", X_OK) != 0) return 0;
  anchor::proc::SpawnOptions o;
  o.env["ANCHOR_LOG_LEVEL"] = "warn";
  o.merge_stderr = true;
  const auto r =
      anchor::proc::run_capture({"/usr/bin/time", "-f", "maxrss_kb=%M", ANCHOR_BINARY, "checkpoint", "verify", dir}, o);
  const auto at = r.out.rfind("maxrss_kb=");
  if (r.status != 0 || at == std::string::npos) return 0;
  return std::strtod(r.out.c_str() + at + 10, nullptr) / 1024.0;
}

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }
double cpu_seconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// dd prints "... bytes (...) copied, 1.2 s, 260 MB/s" on stderr; we time it ourselves.
double run_dd(const std::vector<std::string>& argv, std::uint64_t bytes) {
  auto t = Clock::now();
  auto r = anchor::proc::run_capture({"/bin/sh", "-c", [&] {
                                        std::string c;
                                        for (auto& a : argv) c += a + " ";
                                        return c + "2>/dev/null";
                                      }()});
  double s = secs(t);
  if (r.status != 0) throw anchor::Error(anchor::ErrorKind::kRuntime, "dd failed");
  return bytes / s / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("anchor-bench-ckpt-" + anchor::fs::random_suffix())).string();
  double mib = 256;
  int reps = 3;
  int files = 1;  // the 16 tensors spread over this many files (restore verifies files in parallel)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--mib"))
      mib = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--files"))
      files = std::atoi(argv[i + 1]);
  }
  files = std::max(1, std::min(files, 16));
  anchor::log::init(anchor::log::Level::kWarn);
  std::filesystem::create_directories(dir);
  try {
    // The state: 16 F32 tensors of equal size, random values (incompressible).
    const int kTensors = 16;
    const std::size_t per = static_cast<std::size_t>(mib * (1 << 20) / kTensors / 4);
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(per));
    std::mt19937 rng(1);
    for (auto& b : bufs)
      for (auto& x : b) x = static_cast<float>(rng()) * 1e-9f;
    ck::SaveRequest req;
    for (int f = 0; f < files; ++f)
      req.files.push_back({files == 1 ? "model.safetensors" : "part" + std::to_string(f) + ".safetensors", {}, {}});
    for (int i = 0; i < kTensors; ++i)
      req.files[static_cast<std::size_t>(i % files)].tensors.push_back(
          {"t" + std::to_string(i), ck::DType::F32, {static_cast<std::int64_t>(per)}, bufs[i].data(), per * 4});
    const std::uint64_t bytes = static_cast<std::uint64_t>(kTensors) * per * 4;

    ck::Store store(dir + "/ckpt");
    std::vector<double> save_rates, restore_rates, save_cpu, restore_cpu, verify_rates, verify_rss;
    for (int r = 0; r < reps; ++r) {
      req.step = r + 1;
      req.state = nlohmann::json::object();
      double c0 = cpu_seconds(RUSAGE_SELF);
      auto t = Clock::now();
      std::string trace;
      store.save(req, [&](std::string_view point) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " %.3f", secs(t));
        trace += std::string(point) + buf + ",";
      });
      if (std::getenv("BENCH_TRACE")) std::fprintf(stderr, "save %d: %s\n", r + 1, trace.c_str());
      save_rates.push_back(bytes / secs(t) / 1e6);
      save_cpu.push_back(cpu_seconds(RUSAGE_SELF) - c0);
      store.apply_retention(1);
      c0 = cpu_seconds(RUSAGE_SELF);
      t = Clock::now();
      auto l = store.restore_newest();
      double s = secs(t);
      restore_cpu.push_back(cpu_seconds(RUSAGE_SELF) - c0);
      if (!l || l->step != r + 1) throw anchor::Error(anchor::ErrorKind::kRuntime, "restore failed");
      restore_rates.push_back(bytes / s / 1e6);
      // `anchor checkpoint verify`'s path: streamed, the header and a chunk in memory (issue 43.6). Its peak
      // RSS is measured in a child, which starts small; this process holds the state.
      t = Clock::now();
      if (!store.verify(l->dir).ok) throw anchor::Error(anchor::ErrorKind::kRuntime, "verify failed");
      verify_rates.push_back(bytes / secs(t) / 1e6);
      verify_rss.push_back(verify_peak_rss_mib(l->dir));
    }

    // dd's source: a file already in the page cache (like the state in memory),
    // written and synced once so its writeback does not overlap the measurement.
    std::vector<double> ddw, ddr, ddw_cpu, ddr_cpu;
    const std::string src = dir + "/dd.src", dst = dir + "/dd.bin";
    run_dd(
        {"dd", "if=/dev/urandom", "of=" + src, "bs=1M", "count=" + std::to_string(static_cast<int>(mib)), "conv=fsync"},
        bytes);
    for (int r = 0; r < reps; ++r) {
      std::filesystem::remove(dst);
      double c0 = cpu_seconds(RUSAGE_CHILDREN);
      ddw.push_back(run_dd({"dd", "if=" + src, "of=" + dst, "bs=1M", "conv=fsync"}, bytes));
      double c1 = cpu_seconds(RUSAGE_CHILDREN);
      ddr.push_back(run_dd({"dd", "if=" + dst, "of=/dev/null", "bs=1M"}, bytes));
      ddw_cpu.push_back(c1 - c0);
      ddr_cpu.push_back(cpu_seconds(RUSAGE_CHILDREN) - c1);
    }
    std::filesystem::remove(src);
    std::filesystem::remove(dst);

    std::string py = std::string(ANCHOR_SOURCE_DIR) + "/bench/torch_save_load.py";
    auto pr = anchor::proc::run_capture({"/usr/bin/python3", py, "--dir", dir, "--mib", std::to_string(mib),
                                         "--tensors", std::to_string(kTensors), "--reps", std::to_string(reps)});
    double tsave = 0, tload = 0, tsave_cpu = 0, tload_cpu = 0;
    if (pr.status == 0) {
      auto j = nlohmann::json::parse(pr.out);
      tsave = j["save_mb_s"];
      tload = j["load_mb_s"];
      tsave_cpu = j["save_cpu_s_per_gib"];
      tload_cpu = j["load_cpu_s_per_gib"];
    } else {
      std::fprintf(stderr, "torch_save_load.py failed (%d): %s\n", pr.status, pr.out.c_str());
    }

    const double S = median(save_rates), R = median(restore_rates), W = median(ddw), D = median(ddr);
    std::printf("state: %.0f MiB in %d F32 tensors over %d file(s), %d repetitions (median), dir %s\n",
                bytes / 1048576.0, kTensors, files, reps, dir.c_str());
    std::printf("%-44s %10s\n", "", "MB/s");
    std::printf("%-44s %10.0f\n", "anchor save (hash + fsync + commit)", S);
    std::printf("%-44s %10.0f\n", "dd conv=fsync write (from page cache)", W);
    std::printf("%-44s %10.0f\n", "torch.save + fsync (python3)", tsave);
    std::printf("%-44s %10.0f\n", "anchor restore (read + SHA-256 + validate)", R);
    std::printf("%-44s %10.0f\n", "anchor verify (streamed read + SHA-256)", median(verify_rates));
    std::printf("%-44s %10.0f\n", "dd read (page cache)", D);
    std::printf("%-44s %10.0f\n", "torch.load (python3, page cache)", tload);
    const double gib = bytes / double(1ull << 30);
    std::printf(
        "CPU seconds per GiB (user+sys, load-insensitive): anchor save %.2f, dd write %.2f, "
        "torch.save %.2f; anchor restore %.2f, dd read %.2f, torch.load %.2f\n",
        median(save_cpu) / gib, median(ddw_cpu) / gib, tsave_cpu, median(restore_cpu) / gib, median(ddr_cpu) / gib,
        tload_cpu);
    std::printf(
        "ratios: save/dd = %.2f (goal >= 0.9), save/torch.save = %.2f, restore/torch.load = %.2f "
        "(goal >= 2), restore/dd read = %.2f\n",
        S / W, tsave > 0 ? S / tsave : 0.0, tload > 0 ? R / tload : 0.0, R / D);
    std::printf(
        "verify: %.2f of restore's rate, %.2f of dd read's; `anchor checkpoint verify` peak RSS %.0f MiB "
        "for %.0f MiB of state (%.3f of it)\n",
        median(verify_rates) / R, median(verify_rates) / D, median(verify_rss), bytes / 1048576.0,
        median(verify_rss) / (bytes / 1048576.0));
  } catch (const anchor::Error& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    std::filesystem::remove_all(dir);
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
