// The node's disk and data throughput (include/anchor/pilot/preflight.hpp).
#include "anchor/pilot/preflight.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <optional>
#include <thread>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/error.hpp"
#include "anchor/measure/gpu_health.hpp"
#include "anchor/run_report/run_report.hpp"

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
    // Only the part it reads: a dataset the page cache holds stays cached for the pilot and the node's other jobs.
    const double left = static_cast<double>(bytes) - t.bytes;
    ::posix_fadvise(fd.get(), 0, static_cast<off_t>(std::min(left, 9.0e18)), POSIX_FADV_DONTNEED);
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

nlohmann::json measure_allreduce(const std::string& torch_binary, int ranks, const std::string& device,
                                 const std::string& backend, double timeout_s) {
  const int port = dist::free_loopback_port();
  std::vector<proc::Child> children;
  std::vector<std::string> argv = {
      torch_binary, "--log-level", "warn",  "__allreduce-probe", "--device",
      device,       "--backend",   backend, "--timeout",         std::to_string(timeout_s)};
  for (int r = 0; r < ranks; ++r) {
    proc::SpawnOptions so;
    so.env = dist::self_launch_env(r, ranks, port);
    so.unset = dist::outer_launch_variables();
    // The pilot's own fault seam is for its workers; the probe's is sigkill_probe (launch.hpp).
    if (const char* fault = std::getenv("ANCHOR_DIST_FAULT");
        fault && std::string(fault).rfind("sigkill_probe:", 0) != 0)
      so.unset.push_back("ANCHOR_DIST_FAULT");
    so.die_with_parent = true;
    so.capture_stdout = true;  // rank 0's figures; any rank's error, said with its failure
    so.merge_stderr = true;
    children.push_back(proc::spawn(argv, so));
    ::fcntl(children.back().stdout_fd.get(), F_SETFL, O_NONBLOCK);
  }
  // Every rank to its end, its output drained as it comes; the first that
  // fails ends the others (a peer that died before the rendezvous would keep
  // them waiting for distributed.timeout_s).
  std::vector<std::optional<int>> status(children.size());
  std::vector<std::string> output(children.size());
  const auto drain = [&](std::size_t r) {
    char buf[4096];
    for (ssize_t n; (n = ::read(children[r].stdout_fd.get(), buf, sizeof buf)) > 0;)
      output[r].append(buf, static_cast<std::size_t>(n));
  };
  std::optional<std::size_t> failed;
  for (std::size_t left = children.size(); left > 0;) {
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (status[r]) continue;
      drain(r);
      status[r] = proc::try_wait(children[r].pid);
      if (!status[r]) continue;
      drain(r);
      --left;
      if (*status[r] == 0 || failed) continue;
      failed = r;
      for (std::size_t k = 0; k < children.size(); ++k)
        if (!status[k]) ::kill(children[k].pid, SIGKILL);
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (failed) {
    // What the rank said of its failure: its error and hint lines.
    std::string said;
    std::istringstream lines(output[*failed]);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("anchor: error: ", 0) == 0) said += (said.empty() ? "" : "; ") + line.substr(15);
    const int code = *status[*failed];
    throw Error(code == 2 ? ErrorKind::kConfig : ErrorKind::kRuntime,
                "the all-reduce probe over " + std::to_string(ranks) + " ranks on " + proc::host_name() +
                    " failed: rank " + std::to_string(*failed) + " " + proc::describe_exit(code) +
                    (said.empty() ? std::string() : ": " + printable(said)),
                "the pilot's ranks would meet the same way (device, distributed.backend, distributed.timeout_s)");
  }
  std::string last;
  std::istringstream lines(output[0]);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') last = line;
  try {
    return nlohmann::json::parse(last);
  } catch (const std::exception&) {
    throw Error(ErrorKind::kRuntime, "the all-reduce probe's rank 0 printed no figures: " + printable(output[0]));
  }
}

std::string probe_binary() {
  const std::filesystem::path self = proc::self_exe();
  if (self.filename() == "anchor-torch") return self.string();
  const std::filesystem::path beside = self.parent_path() / "anchor-torch";
  return ::access(beside.c_str(), X_OK) == 0 ? beside.string() : std::string();
}

nlohmann::json preflight(const config::Config& cfg, const PreflightOptions& o) {
  using nlohmann::json;
  const std::string& dir = o.checkpoint_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io_error("create checkpoint.dir", dir, ec.value());
  const Throughput disk = measure_disk_write(dir, o.bytes);
  std::vector<std::string> files;
  for (const auto& pattern : cfg.data.train)
    for (const auto& f : fs::expand_glob(config::resolve_path(cfg, pattern))) files.push_back(f);
  const auto figure = [](const Throughput& t, const char* what) {
    return json{{"path", t.where},          {"what", what},      {"bytes", t.bytes}, {"seconds", t.seconds},
                {"mb_per_s", t.mb_per_s()}, {"kind", "MEASURED"}};
  };
  json out = {{"host", proc::host_name()}};
  out["checkpoint_dir"] = figure(disk, "written in 4 MiB blocks, fsynced with its directory, removed");
  if (files.empty()) {
    out["data"] = {{"skipped", "data.train names no files (a program's own data is not read)"}};
  } else {
    const Throughput data = measure_data_read(files, o.bytes);
    json read = figure(data, "data.train read after posix_fadvise(DONTNEED): from storage unless its pages are dirty");
    read["files"] = files.size();
    // The built-in loader's tokens: a byte each (text), two (llm.c's uint16 shards).
    const double bytes_per_token = cfg.data.format == "llmc" ? 2.0 : 1.0;
    read["bytes_per_token"] = bytes_per_token;
    read["tokens_per_s"] = data.seconds > 0 ? data.bytes / bytes_per_token / data.seconds : 0.0;
    out["data"] = std::move(read);
  }
  if (!o.no_allreduce.empty())
    out["all_reduce"] = {{"skipped", o.no_allreduce}};
  else if (o.ranks >= 2 && o.torch_binary.empty())
    out["all_reduce"] = {{"skipped", "no anchor-torch beside " + proc::self_exe() + " to run the probe's ranks"}};
  else if (o.ranks < 2)
    out["all_reduce"] = {{"skipped",
                          "one rank (distributed.nproc_per_node 1): nothing to all-reduce; "
                          "`anchor preflight CONFIG --ranks 2` measures two"}};
  else
    out["all_reduce"] =
        measure_allreduce(o.torch_binary, o.ranks, cfg.device, cfg.distributed.backend, cfg.distributed.timeout_s);
  // A pilot on the CPU does not use the GPUs: their faults are said, and do not stop it.
  out["gpu_health"] = measure::gpu_health(o.nvml, o.kmsg, cfg.device != "cpu");
  return out;
}

std::vector<std::string> preflight_failures(const nlohmann::json& preflight) {
  const auto node = run_report::RunReport::from_json({{"node", preflight}}).node;
  if (!node || !node->gpu_health || node->gpu_health->not_used) return {};
  return node->gpu_health->failures.value_or(std::vector<std::string>{});
}

}  // namespace anchor::pilot
