// The node's disk and data throughput (include/anchor/pilot/preflight.hpp).
#include "anchor/pilot/preflight.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/error.hpp"

namespace anchor::pilot {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBlock = 4u << 20;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Removes the probe file however the measurement ends.
struct RemoveAfter {
  std::string path;
  ~RemoveAfter() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

Throughput measure_disk_write(const std::string& dir, std::uint64_t bytes) {
  const std::string path =
      dir + "/.anchor-preflight-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}() % 1000000);
  std::vector<char> block(kBlock);
  std::mt19937_64 fill(42);  // not zeros: a file system that compresses would flatter them
  for (std::size_t i = 0; i + 8 <= block.size(); i += 8) {
    const std::uint64_t v = fill();
    std::copy_n(reinterpret_cast<const char*>(&v), 8, block.data() + i);
  }
  const std::uint64_t blocks = std::max<std::uint64_t>(1, (bytes + kBlock - 1) / kBlock);
  fs::FileSystem& f = fs::real_fs();
  const auto t0 = Clock::now();
  fs::UniqueFd fd = f.create_excl(path, 0600);
  RemoveAfter gone{path};
  for (std::uint64_t i = 0; i < blocks; ++i) f.write_all(fd.get(), block.data(), block.size(), path);
  f.fsync(fd.get(), path);
  f.close(std::move(fd), path);
  f.fsync_dir(dir);
  return {dir, static_cast<double>(blocks * kBlock), since(t0)};
}

Throughput measure_data_read(const std::vector<std::string>& files, std::uint64_t bytes) {
  Throughput t{files.empty() ? std::string() : files.front(), 0, 0};
  std::vector<char> buf(kBlock);
  const auto t0 = Clock::now();
  for (const auto& file : files) {
    if (t.bytes >= static_cast<double>(bytes)) break;
    fs::UniqueFd fd = fs::open_regular(file, nullptr, {"data shard", ErrorKind::kIo, {}});
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw io_error("read", file, errno);
      if (n == 0) break;
      t.bytes += static_cast<double>(n);
      if (t.bytes >= static_cast<double>(bytes)) break;
    }
  }
  t.seconds = since(t0);
  return t;
}

nlohmann::json preflight(const config::Config& cfg, const std::string& fallback_dir, std::uint64_t bytes) {
  using nlohmann::json;
  const std::string dir = cfg.checkpoint.dir.empty() ? fallback_dir : config::resolve_path(cfg, cfg.checkpoint.dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io_error("create checkpoint.dir", dir, ec.value());
  const Throughput disk = measure_disk_write(dir, bytes);
  std::vector<std::string> files;
  for (const auto& pattern : cfg.data.train)
    for (const auto& f : fs::expand_glob(config::resolve_path(cfg, pattern))) files.push_back(f);
  const Throughput data = measure_data_read(files, bytes);
  const auto figure = [](const Throughput& t, const char* what) {
    return json{{"path", t.where},          {"what", what},      {"bytes", t.bytes}, {"seconds", t.seconds},
                {"mb_per_s", t.mb_per_s()}, {"kind", "MEASURED"}};
  };
  json out;
  out["checkpoint_dir"] = figure(disk, "written in 4 MiB blocks, fsynced with its directory, removed");
  json read = figure(data, "data.train read after posix_fadvise(DONTNEED): from storage unless its pages are dirty");
  read["files"] = files.size();
  out["data"] = std::move(read);
  out["all_reduce"] = {{"skipped", "not measured yet: the all-reduce bus bandwidth over the pilot's ranks (issue 44)"}};
  out["gpu_health"] = {{"skipped", cfg.device == "cpu" ? std::string("device cpu: no GPU to read NVML from")
                                                       : std::string("NVML health is not read yet (issue 44)")}};
  return out;
}

}  // namespace anchor::pilot
