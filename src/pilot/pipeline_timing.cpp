// The download and preprocess commands timed on a sample (include/anchor/pilot/pipeline_timing.hpp).
#include "anchor/pilot/pipeline_timing.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::pilot {
namespace {

using Clock = std::chrono::steady_clock;
namespace sfs = std::filesystem;

// The last `n` lines of `text`.
std::string last_lines(const std::string& text, int n) {
  std::size_t at = text.size();
  for (int i = 0; i <= n && at > 0; ++i) {
    const auto nl = text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
    if (i == n) return text.substr(at + 1);
  }
  return text;
}

struct Ran {
  double seconds = 0;
  int status = 0;
  bool timed_out = false;
  std::string output;
};

// argv in `cwd`, its stdout and stderr read as they come, killed with its
// process group past `timeout_s`.
Ran run_timed(const std::vector<std::string>& argv, const std::string& cwd, double timeout_s) {
  proc::SpawnOptions o;
  o.capture_stdout = true;
  o.merge_stderr = true;
  o.new_process_group = true;
  o.die_with_parent = true;
  o.cwd = cwd;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(timeout_s);
  proc::Child c = proc::spawn(argv, o);
  Ran r;
  char buf[65536];
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(-c.pid, SIGKILL);
      break;
    }
    pollfd p{c.stdout_fd.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min(left * 1000.0, 1000.0)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(c.stdout_fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the command (and whatever kept its output open) is done
    r.output.append(buf, static_cast<std::size_t>(n));
    if (r.output.size() > (1u << 20)) r.output.erase(0, r.output.size() - (1u << 20));  // the last MiB
  }
  r.status = proc::wait_exit(c.pid);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::kill(-c.pid, SIGKILL);  // what it left running in its group
  return r;
}

// Runs one stage's command and returns its figures; `size_of_output`: its
// size is what it wrote (the download), else its input (the preprocess). Its
// output at <work_dir>/<stage> is removed unless `keep`.
nlohmann::json time_one(const char* stage, const std::vector<std::string>& argv, const std::string& in,
                        const std::string& work_dir, const config::Config& cfg, bool size_of_output, bool keep) {
  const std::string out = work_dir + "/" + stage;
  std::error_code ec;
  sfs::remove_all(out, ec);
  sfs::create_directories(out, ec);
  if (ec) throw io_error("create", out, ec.value());
  auto run = substitute(argv, in, out);
  const std::string cwd = cfg.base_dir.empty() ? "." : cfg.base_dir;
  // As program.command's: a bare name from PATH, a path with a / from the config's directory.
  const std::string exe = run[0].find('/') == std::string::npos ? proc::find_on_path(run[0])
                          : run[0][0] == '/'                    ? run[0]
                                                                : cwd + "/" + run[0];
  if (exe.empty() || ::access(exe.c_str(), X_OK) != 0)
    throw Error(ErrorKind::kConfig,
                std::string("budget.") + stage + "_command: " + printable(run[0]) +
                    (run[0].find('/') == std::string::npos ? " is not on PATH" : " is not an executable file"),
                "name the program (argv, no shell): [sh, -c, '...'] runs a shell line");
  run[0] = exe;
  const Ran r = run_timed(run, cwd, cfg.budget.pipeline_timeout_s);
  const std::string log = work_dir + "/" + stage + ".log";
  fs::atomic_write_file(log, r.output);
  const double bytes = bytes_under(size_of_output ? out : in);
  if (!keep) sfs::remove_all(out, ec);  // a sample's output is not kept
  std::string joined;
  for (const auto& a : run) joined += (joined.empty() ? "" : " ") + a;
  if (r.timed_out || r.status != 0)
    throw Error(
        ErrorKind::kRuntime,
        std::string("budget.") + stage + "_command `" + printable(joined) + "` " +
            (r.timed_out ? "ran past budget.pipeline_timeout_s (" + std::to_string(cfg.budget.pipeline_timeout_s) +
                               " s) and was killed"
                         : proc::describe_exit(r.status)) +
            "; its last lines:\n" + printable(last_lines(r.output, 10)),
        "its whole output is in " + log + "; fix the command, or remove it to keep the budget's assumed figure");
  if (bytes <= 0)
    throw Error(
        ErrorKind::kConfig,
        std::string("budget.") + stage + "_command `" + printable(joined) + "` ran in " + std::to_string(r.seconds) +
            " s but " +
            (size_of_output ? "wrote nothing to {out} (" + out + ")" : "its sample {in} (" + in + ") is empty") +
            ": there is no size to extrapolate from",
        size_of_output ? "the download command must write its sample into the directory {out} names"
                       : "budget.preprocess_sample names the sample the command reads");
  return {{"command", run},
          {"seconds", r.seconds},
          {"bytes", bytes},
          {"mb_per_s", r.seconds > 0 ? bytes / 1e6 / r.seconds : 0.0},
          {"log", log},
          {"what", size_of_output ? "the bytes the command wrote to {out}, over its wall time"
                                  : "the bytes of its input sample {in}, over its wall time"},
          {"kind", "MEASURED"}};
}

}  // namespace

std::vector<std::string> substitute(const std::vector<std::string>& argv, const std::string& in,
                                    const std::string& out) {
  std::vector<std::string> run;
  for (std::string a : argv) {
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{in}", in}, {"{out}", out}})
      for (std::size_t at = 0; (at = a.find(key, at)) != std::string::npos; at += value.size())
        a.replace(at, key.size(), value);
    run.push_back(std::move(a));
  }
  return run;
}

double bytes_under(const std::string& path) {
  std::error_code ec;
  const auto st = sfs::symlink_status(path, ec);
  if (ec) return 0;
  if (sfs::is_regular_file(st)) return static_cast<double>(sfs::file_size(path, ec));
  if (!sfs::is_directory(st)) return 0;
  double total = 0;
  for (auto it = sfs::recursive_directory_iterator(path, ec); !ec && it != sfs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += static_cast<double>(it->file_size(ec));
  return total;
}

bool pipeline_configured(const config::Config& cfg) {
  return !cfg.budget.download_command.empty() || !cfg.budget.preprocess_command.empty();
}

nlohmann::json time_pipeline(const config::Config& cfg, const std::string& work_dir) {
  nlohmann::json out = nlohmann::json::object();
  std::error_code ec;
  sfs::create_directories(work_dir, ec);
  if (ec) throw io_error("create", work_dir, ec.value());
  struct Gone {  // the downloaded sample, however the preprocess ends
    std::string dir;
    ~Gone() {
      std::error_code e;
      sfs::remove_all(dir, e);
    }
  } gone{work_dir + "/download"};
  std::string sample =
      cfg.budget.preprocess_sample.empty() ? std::string() : config::resolve_path(cfg, cfg.budget.preprocess_sample);
  if (!cfg.budget.download_command.empty()) {
    // The downloaded sample is the preprocess command's input when no other sample is named.
    const bool feed = !cfg.budget.preprocess_command.empty() && sample.empty();
    out["download"] = time_one("download", cfg.budget.download_command, "", work_dir, cfg, true, feed);
    if (feed) sample = work_dir + "/download";
  }
  if (!cfg.budget.preprocess_command.empty()) {
    if (sample.empty())
      throw Error(ErrorKind::kConfig, "budget.preprocess_command is set but it has no sample to read",
                  "set budget.preprocess_sample to a file or directory of raw data, or budget.download_command");
    if (!sfs::exists(sample))
      throw Error(ErrorKind::kConfig, "budget.preprocess_sample " + printable(sample) + " does not exist",
                  "name a file or directory of raw data, relative to the config file");
    out["preprocess"] = time_one("preprocess", cfg.budget.preprocess_command, sample, work_dir, cfg, false, false);
  }
  return out;
}

}  // namespace anchor::pilot
