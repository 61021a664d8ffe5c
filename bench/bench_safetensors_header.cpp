// bench_safetensors_header [--tensors N] [--reps R] [--dir D]
// Time and memory of SafetensorsFile::parse on a header of N tensors
// (default 1,000,000: a ~76 MB header, under the 100 MiB limit), each U8 [1]
// named "layer.NNNNNNN.w" — the cost a checkpoint verify or restore pays
// besides hashing. Prints the header size, the median parse time, the peak
// RSS a forked child adds while it parses (the bytes themselves not counted)
// as a multiple of the header size, and the median time of Store::verify on
// a checkpoint whose model.safetensors is that file (read, SHA-256, parse,
// manifest; page cache warm) — what `anchor checkpoint verify` does
// (docs/benchmarks.md, "safetensors header parse").
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/measure/proc.hpp"

namespace ck = anchor::checkpoint;
using Clock = std::chrono::steady_clock;

namespace {

struct Tensors {
  std::vector<ck::TensorRef> refs;
  static constexpr std::uint8_t kByte = 7;
};

Tensors make_tensors(std::size_t n) {
  Tensors t;
  t.refs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "layer.%07zu.w", i);
    t.refs[i] = {buf, ck::DType::U8, {1}, &Tensors::kByte, 1};
  }
  return t;
}

// Resets VmHWM to the current RSS (Linux >= 4.0), so that it measures from here.
void reset_peak() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 1000000;
  int reps = 3;
  std::string dir =
      (std::filesystem::temp_directory_path() / ("anchor-bench-header-" + std::to_string(::getpid()))).string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tensors"))
      n = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
  }
  anchor::log::init(anchor::log::Level::kWarn);
  const Tensors tensors = make_tensors(n);
  const std::string file = ck::serialize_safetensors(tensors.refs, {{"format", "pt"}});
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<std::uint8_t>(file[i]);
  std::printf("safetensors header parse: %zu tensors, header %.1f MB, file %.1f MB\n", n, header / 1e6,
              file.size() / 1e6);

  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    std::string copy = file;
    auto t = Clock::now();
    try {
      auto f = ck::SafetensorsFile::parse(std::move(copy), "bench.safetensors");
      if (f.entries().size() != n) return 2;
    } catch (const anchor::Error& e) {
      std::fprintf(stderr, "bench_safetensors_header: %s\n", e.what());
      return 1;
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - t).count());
    std::printf("  rep %d: %.3f s\n", r + 1, times.back());
    std::fflush(stdout);
  }
  std::sort(times.begin(), times.end());
  std::printf("parse (median of %d): %.3f s, %.0f tensors/s, %.0f MB/s of header\n", reps, times[times.size() / 2],
              n / times[times.size() / 2], header / 1e6 / times[times.size() / 2]);

  // Peak memory of one parse, in a child: from its RSS with the file's bytes
  // in memory (touched, as a read leaves them) to its peak while parsing.
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string copy = file;  // the bytes parse keeps (FileBytes owns them)
    ::malloc_trim(0);         // free heap the parent left resident would hide the growth
    reset_peak();
    const double before = static_cast<double>(anchor::measure::read_proc_memory().rss_bytes);
    auto f = ck::SafetensorsFile::parse(std::move(copy), "bench.safetensors");
    const double peak = static_cast<double>(anchor::measure::read_proc_memory().hwm_bytes);
    std::printf("peak memory of a parse, over the file's own bytes: %.1f MB = %.2fx the header (%zu entries kept)\n",
                (peak - before) / 1e6, (peak - before) / header, f.entries().size());
    std::fflush(stdout);
    ::_exit(f.entries().size() == n ? 0 : 2);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;

  // The whole verification of a checkpoint holding that file.
  try {
    ck::Store store(dir);
    ck::SaveRequest req;
    req.step = 1;
    req.files.push_back({"model.safetensors", tensors.refs, {{"format", "pt"}}});
    const std::string step = store.save(req).dir;
    std::vector<double> vt;
    for (int r = 0; r < reps; ++r) {
      auto t = Clock::now();
      const auto v = store.verify(step);
      vt.push_back(std::chrono::duration<double>(Clock::now() - t).count());
      if (!v.ok) {
        std::fprintf(stderr, "bench_safetensors_header: the checkpoint does not verify\n");
        return 1;
      }
    }
    std::sort(vt.begin(), vt.end());
    std::printf("Store::verify of a checkpoint with it (median of %d): %.3f s\n", reps, vt[vt.size() / 2]);
  } catch (const anchor::Error& e) {
    std::fprintf(stderr, "bench_safetensors_header: %s\n", e.what());
    return 1;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
