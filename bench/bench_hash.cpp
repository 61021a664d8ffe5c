// bench_hash: anchor's hashing against `openssl dgst -sha256`, and re-pinning
// from the hash cache against the first pin. Run by hand (docs/benchmarks.md):
//
//   build/<dir>/bench/bench_hash [--dir /tmp/anchor-bench] [--big-mib 1024]
//                                [--files 64] [--file-mib 16] [--threads 0] [--reps 3]
//
// Files are written under --dir (default: a fresh directory in $TMPDIR or
// /tmp) and removed at the end. All inputs are read once before timing so both
// tools see the page cache; each measurement is the best of --reps runs,
// alternating anchor and openssl.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/hasher.hpp"
#include "anchor/manifest/manifest.hpp"

namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void write_random(const std::string& path, std::uint64_t bytes, std::uint64_t seed) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw anchor::io_error("open", path, errno);
  constexpr std::size_t kChunk = 1 << 20;
  std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[kChunk / 8]);
  std::uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  for (std::uint64_t done = 0; done < bytes;) {
    for (std::size_t i = 0; i < kChunk / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[i] = x;
    }
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - done));
    if (::write(fd, buf.get(), n) != static_cast<ssize_t>(n)) throw anchor::io_error("write", path, errno);
    done += n;
  }
  ::close(fd);
  // Older than the cache's 100 ms racy window, as any real data set is.
  struct timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

void read_all(const std::string& path) {  // page-cache warm-up
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  while (::read(fd, buf.get(), 1 << 20) > 0) {
  }
  ::close(fd);
}

std::string openssl_digest_of_first(const std::string& out) {
  // "SHA2-256(path)= hex" or "SHA256(path)= hex"
  auto eq = out.find("= ");
  return eq == std::string::npos ? "" : out.substr(eq + 2, 64);
}

double cpu_seconds(int who) {
  struct rusage ru {};
  ::getrusage(who, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string loadavg() {
  std::string s = anchor::fs::read_file("/proc/loadavg");
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
}

struct Best {
  double anchor = 1e30;
  double openssl = 1e30;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::uint64_t big_mib = 1024, file_mib = 16;
  int files = 64, threads = 0, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir")
      dir = v;
    else if (a == "--big-mib")
      big_mib = std::stoull(v);
    else if (a == "--files")
      files = std::stoi(v);
    else if (a == "--file-mib")
      file_mib = std::stoull(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--reps")
      reps = std::stoi(v);
    else {
      std::fprintf(stderr, "bench_hash: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (dir.empty()) dir = (stdfs::temp_directory_path() / ("anchor-bench-" + std::to_string(::getpid()))).string();
  stdfs::create_directories(dir);
  const std::string openssl = "/usr/bin/openssl";
  int rc = 0;
  try {
    std::printf("bench_hash: dir %s, %d hashing thread(s), %u CPU(s), best of %d, load average %s\n", dir.c_str(),
                threads > 0 ? threads : anchor::manifest::default_threads(), std::thread::hardware_concurrency(), reps,
                loadavg().c_str());

    // 1. One big file: a single stream, so this is sha256_file vs openssl.
    std::string big = dir + "/big.bin";
    write_random(big, big_mib << 20, 1);
    read_all(big);
    Best one;
    std::string a_digest, o_digest;
    double one_cpu_a0 = cpu_seconds(RUSAGE_SELF), one_cpu_o0 = cpu_seconds(RUSAGE_CHILDREN);
    for (int r = 0; r < reps; ++r) {
      one.anchor = std::min(one.anchor, seconds_of([&] {
                              anchor::manifest::HashOptions o;
                              o.threads = 1;
                              o.progress = false;
                              a_digest = anchor::manifest::hash_files({{big, ""}}, o)[0].sha256;
                            }));
      one.openssl = std::min(
          one.openssl, seconds_of([&] {
            o_digest = openssl_digest_of_first(anchor::proc::run_capture({openssl, "dgst", "-sha256", big}).out);
          }));
    }
    if (a_digest != o_digest) throw anchor::Error(anchor::ErrorKind::kRuntime, "digest mismatch on " + big);
    double gb = double(big_mib << 20) / 1e9;
    std::printf(
        "one %llu MiB file:     anchor %.3f s (%.2f GB/s)  openssl %.3f s (%.2f GB/s)  "
        "ratio %.2fx (goal >= 0.9x)\n",
        (unsigned long long)big_mib, one.anchor, gb / one.anchor, one.openssl, gb / one.openssl,
        one.openssl / one.anchor);
    std::printf("  CPU time per run (user+sys, mean): anchor %.3f s, openssl %.3f s; ratio %.2fx\n",
                (cpu_seconds(RUSAGE_SELF) - one_cpu_a0) / reps, (cpu_seconds(RUSAGE_CHILDREN) - one_cpu_o0) / reps,
                (cpu_seconds(RUSAGE_CHILDREN) - one_cpu_o0) / (cpu_seconds(RUSAGE_SELF) - one_cpu_a0));

    // 2. Many files: the pool across cores vs openssl over them one after another.
    std::vector<std::string> paths;
    std::vector<anchor::manifest::HashInput> inputs;
    for (int i = 0; i < files; ++i) {
      paths.push_back(dir + "/shard-" + std::to_string(i) + ".bin");
      write_random(paths.back(), file_mib << 20, 100 + i);
      read_all(paths.back());
      inputs.push_back({paths.back(), ""});
    }
    Best many;
    double cpu_a0 = cpu_seconds(RUSAGE_SELF), cpu_o0 = cpu_seconds(RUSAGE_CHILDREN);
    double cpu_a = 0, cpu_o = 0, wall_a = 0;
    for (int r = 0; r < reps; ++r) {
      double t = seconds_of([&] {
        anchor::manifest::HashOptions o;
        o.threads = threads;
        o.progress = false;
        anchor::manifest::hash_files(inputs, o);
      });
      many.anchor = std::min(many.anchor, t);
      wall_a += t;
      std::vector<std::string> argv_o = {openssl, "dgst", "-sha256"};
      argv_o.insert(argv_o.end(), paths.begin(), paths.end());
      double c0 = cpu_seconds(RUSAGE_CHILDREN);
      many.openssl = std::min(many.openssl, seconds_of([&] { anchor::proc::run_capture(argv_o); }));
      cpu_o += cpu_seconds(RUSAGE_CHILDREN) - c0;
    }
    cpu_a = cpu_seconds(RUSAGE_SELF) - cpu_a0;
    (void)cpu_o0;
    double gbm = double(std::uint64_t(files) * (file_mib << 20)) / 1e9;
    std::printf(
        "%d x %llu MiB files:    anchor %.3f s (%.2f GB/s)  openssl %.3f s (%.2f GB/s)  "
        "ratio %.2fx (goal >= 1.7x)\n",
        files, (unsigned long long)file_mib, many.anchor, gbm / many.anchor, many.openssl, gbm / many.openssl,
        many.openssl / many.anchor);
    std::printf(
        "  CPU time per run (user+sys, mean): anchor %.3f s, openssl %.3f s; "
        "anchor CPU/wall = %.2f cores busy; load average now %s\n",
        cpu_a / reps, cpu_o / reps, cpu_a / wall_a, loadavg().c_str());

    // 3. Hashing the data alone through the cache: empty, then warm.
    {
      std::string cache_file = dir + "/cache-data/hash-cache.json";
      anchor::manifest::HashOptions o;
      o.threads = threads;
      o.progress = false;
      auto all = inputs;
      all.push_back({big, ""});
      anchor::manifest::HashCache c1(cache_file);
      o.cache = &c1;
      double cold = seconds_of([&] {
        anchor::manifest::hash_files(all, o);
        c1.save();
      });
      double warm = 1e30;
      anchor::manifest::HashStats st;
      for (int r = 0; r < reps; ++r)
        warm = std::min(warm, seconds_of([&] {
                          anchor::manifest::HashCache c2(cache_file);
                          o.cache = &c2;
                          anchor::manifest::hash_files(all, o, &st);
                        }));
      std::printf("data via cache:        first %.3f s, cached %.4f s (%zu files from cache) = %.2f%%\n", cold, warm,
                  st.files_cached, 100.0 * warm / cold);
    }

    // 4. The whole pin (data = the big file + the shards, plus every loaded
    // library), first with an empty cache, then again from the cache.
    anchor::config::Config cfg;
    cfg.base_dir = dir;
    cfg.data.train = {"shard-*.bin"};
    cfg.data.val = {"big.bin"};
    anchor::manifest::PinOptions po;
    po.threads = threads;
    po.progress = false;
    po.cache_file = dir + "/cache/hash-cache.json";
    nlohmann::json first_m, second_m;
    double first = seconds_of([&] { first_m = anchor::manifest::pin(cfg, po); });
    double second = 1e30;
    for (int r = 0; r < reps; ++r)
      second = std::min(second, seconds_of([&] { second_m = anchor::manifest::pin(cfg, po); }));
    auto drift = anchor::manifest::compare(first_m, second_m);
    std::printf(
        "pin (%.2f GB data, %zu libraries): first %.3f s, re-pin from cache %.4f s "
        "(%zu of %zu files cached) = %.2f%% of the first (goal < 1%%), drift rows %zu\n",
        double(first_m["data"]["train"]["bytes"].get<std::uint64_t>() +
               first_m["data"]["val"]["bytes"].get<std::uint64_t>()) /
            1e9,
        first_m["dependencies"]["shared_libraries"].size(), first, second,
        second_m["hashing"]["files_cached"].get<std::size_t>(),
        second_m["hashing"]["files_cached"].get<std::size_t>() + second_m["hashing"]["files_hashed"].get<std::size_t>(),
        100.0 * second / first, drift.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_hash: error: %s\n", e.what());
    rc = 1;
  }
  std::error_code ec;
  stdfs::remove_all(dir, ec);
  return rc;
}
