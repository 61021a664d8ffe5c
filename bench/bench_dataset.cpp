// bench_dataset: a worker's data start on a large text file, anchor's
// memory-mapped shards against reading the file whole (what anchor did before,
// and what a training script that does `open(f).read()` does). Run by hand
// (docs/benchmarks.md):
//
//   build/<dir>/bench/bench_dataset [--dir /tmp] [--mib 1024] [--seq 64] [--windows 20000]
//
// Each side runs in its own child process (its peak RSS is its own): open the
// file, build the training windows and the sampler, copy --windows sampled
// windows (a pilot's batches). The file is read once before timing so both
// sides start from the page cache.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/data/dataset.hpp"
#include "anchor/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double seconds = 0;
  double peak_rss_mib = 0;  // all resident pages at the peak, the file's page-cache pages it maps included
  double private_mib = 0;   // anonymous (private) memory at the end: what the data costs the worker
  std::uint64_t checksum = 0;
};

// Set by each side just before its data goes away (in its child).
double g_private_mib = -1;

double rss_anon_mib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "RssAnon:", 8) == 0) kb = std::atof(line + 8);
  std::fclose(f);
  return kb / 1024.0;
}

// Runs fn in a child: its wall time and the child's own peak RSS.
template <class Fn>
Result in_child(Fn fn) {
  int p[2];
  if (::pipe(p) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    const auto t0 = Clock::now();
    const std::uint64_t sum = fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string line = std::to_string(s) + " " + std::to_string(sum) + " " + std::to_string(g_private_mib);
    (void)!::write(p[1], line.data(), line.size());
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[128] = {0};
  (void)!::read(p[0], buf, sizeof buf - 1);
  ::close(p[0]);
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_dataset: a child failed\n");
    std::exit(1);
  }
  Result r;
  unsigned long long sum = 0;
  std::sscanf(buf, "%lf %llu %lf", &r.seconds, &sum, &r.private_mib);
  r.checksum = sum;
  r.peak_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return r;
}

// Copies `n` sampled windows; the checksum shows both sides read the same tokens.
std::uint64_t sample(const anchor::data::Dataset& d, int seq, std::size_t n) {
  std::vector<std::uint16_t> buf(static_cast<std::size_t>(seq) + 1);
  std::uint64_t sum = 0;
  for (std::size_t g = 0; g < n; ++g) {
    d.train().copy_window(d.sampler().window(g), buf.data());
    for (auto t : buf) sum = sum * 31 + t;
  }
  g_private_mib = rss_anon_mib();
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  std::size_t mib = 1024, windows = 20000;
  int seq = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--mib")
      mib = std::stoul(argv[i + 1]);
    else if (a == "--seq")
      seq = std::stoi(argv[i + 1]);
    else if (a == "--windows")
      windows = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_dataset [--dir D] [--mib N] [--seq L] [--windows N]\n");
      return 2;
    }
  }
  const std::string path = dir + "/anchor-bench-data-" + anchor::fs::random_suffix() + ".txt";
  try {
    {  // Printable text, deterministic.
      std::string chunk(1 << 20, ' ');
      std::uint64_t x = 0x9E3779B97F4A7C15ull;
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) throw anchor::io_error("open", path, errno);
      for (std::size_t m = 0; m < mib; ++m) {
        for (auto& c : chunk) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          c = static_cast<char>(' ' + x % 95);
        }
        if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size()))
          throw anchor::io_error("write", path, errno);
      }
      ::close(fd);
      // Into the page cache, a chunk at a time (the parent's peak RSS would
      // otherwise be its children's starting point).
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      while (::read(fd, chunk.data(), chunk.size()) > 0) {
      }
      ::close(fd);
    }
    anchor::data::DataSpec spec;
    spec.train_files = {path};
    spec.seq_len = seq;
    spec.seed = 1234;
    const Result mapped = in_child([&] {
      anchor::data::Dataset d(spec);
      return sample(d, seq, windows);
    });
    // The peer: the whole file read into memory and widened to tokens, then
    // the same windows and the same order.
    const Result whole = in_child([&] {
      const std::string bytes = anchor::fs::read_file(path);
      std::vector<std::uint16_t> tokens(bytes.begin(), bytes.end());
      for (auto& t : tokens) t &= 0xff;
      std::vector<std::uint64_t> starts;
      for (std::size_t off = 0; off + static_cast<std::size_t>(seq) + 1 <= tokens.size();
           off += static_cast<std::size_t>(seq))
        starts.push_back(off);
      const std::size_t n_train =
          starts.size() - static_cast<std::size_t>(static_cast<double>(starts.size()) * 0.1 + 0.5);
      anchor::data::Sampler sampler(spec.seed, n_train);
      std::uint64_t sum = 0;
      for (std::size_t g = 0; g < windows; ++g) {
        const std::uint16_t* w = tokens.data() + starts[sampler.window(g)];
        for (int i = 0; i <= seq; ++i) sum = sum * 31 + w[i];
      }
      g_private_mib = rss_anon_mib();
      return sum;
    });
    std::filesystem::remove(path);
    std::printf("data start, %zu MiB of text, seq_len %d, %zu sampled windows (best of 1, page cache warm)\n", mib, seq,
                windows);
    std::printf("  %-20s %10s %14s %14s\n", "", "seconds", "private MiB", "peak RSS MiB");
    std::printf("  %-20s %10.3f %14.1f %14.1f\n", "anchor (mmap)", mapped.seconds, mapped.private_mib,
                mapped.peak_rss_mib);
    std::printf("  %-20s %10.3f %14.1f %14.1f\n", "read whole (peer)", whole.seconds, whole.private_mib,
                whole.peak_rss_mib);
    std::printf("  ratio anchor/peer: time %.3fx, private memory %.3fx, peak RSS %.3fx; same tokens: %s\n",
                mapped.seconds / whole.seconds, mapped.private_mib / whole.private_mib,
                mapped.peak_rss_mib / whole.peak_rss_mib, mapped.checksum == whole.checksum ? "yes" : "NO");
    std::printf(
        "  (peak RSS counts the page-cache pages a mapping touches: shared with the cache, dropped under "
        "memory pressure; private memory, at the end, is the worker's own)\n");
    return mapped.checksum == whole.checksum ? 0 : 1;
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::fprintf(stderr, "bench_dataset: %s\n", e.what());
    return 1;
  }
}
