#include "anchor/manifest/hasher.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "anchor/common/sha256.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/units.hpp"
#include "anchor/error.hpp"

namespace anchor::manifest {
namespace {

std::int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

std::int64_t now_realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

Error with_label(const Error& e, const std::string& label) {
  if (label.empty()) return e;
  return Error(e.kind(), label + ": " + e.what(), e.hint());
}

// realpath(3) reads every component of a path with a readlink (four or five
// per library path); the files of a pin share a few directories. A directory
// is resolved once, and a file's own name only when it is a symbolic link.
// One thread's (the serial pass of hash_files).
class RealDirs {
 public:
  std::string real_path(const std::string& path, bool is_link) {
    const std::size_t slash = path.rfind('/');
    if (is_link || slash == std::string::npos || slash + 1 == path.size()) return realpath_of(path);
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    auto it = dirs_.find(dir);
    if (it == dirs_.end()) it = dirs_.emplace(dir, realpath_of(dir)).first;
    return (it->second == "/" ? "" : it->second) + path.substr(slash);
  }

 private:
  static std::string realpath_of(const std::string& path) {
    char buf[PATH_MAX];
    if (!::realpath(path.c_str(), buf)) throw io_error("realpath", path, errno);
    return buf;
  }
  std::unordered_map<std::string, std::string> dirs_;
};

// stat + realpath, with errors that name the path and the errno. With `dirs`,
// an lstat first: a file that is not a symbolic link needs no second stat, and
// its directory's real path comes from the cache.
FileKey identify(const std::string& path, RealDirs* dirs = nullptr) {
  struct stat st {};
  const bool lstat_first = dirs != nullptr;
  bool is_link = false;
  if (lstat_first && ::lstat(path.c_str(), &st) == 0) is_link = S_ISLNK(st.st_mode);
  if ((!lstat_first || is_link || st.st_mode == 0) && ::stat(path.c_str(), &st) != 0) {
    int err = errno;
    std::string hint;
    if (err == ELOOP)
      hint = "a symbolic link in the path points back at itself; fix the link";
    else if (err == ENOENT)
      hint = "check the path (relative paths are resolved against the config file's directory)";
    throw io_error("stat", path, err, hint);
  }
  if (S_ISDIR(st.st_mode))
    throw Error(ErrorKind::kIo, "read " + path + ": is a directory, not a file",
                "name the files inside it, or use a glob such as " + path + "/*");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::kIo, "read " + path + ": not a regular file",
                "pin regular files only (not devices, pipes or sockets)");
  FileKey k;
  if (dirs) {
    k.path = dirs->real_path(path, is_link);
  } else {
    char buf[PATH_MAX];
    if (!::realpath(path.c_str(), buf)) throw io_error("realpath", path, errno);
    k.path = buf;
  }
  k.size = static_cast<std::uint64_t>(st.st_size);
  k.mtime_ns = mtime_ns_of(st);
  k.inode = static_cast<std::uint64_t>(st.st_ino);
  k.dev = static_cast<std::uint64_t>(st.st_dev);
  return k;
}

bool same_identity(const FileKey& a, const FileKey& b) {
  return a.size == b.size && a.mtime_ns == b.mtime_ns && a.inode == b.inode && a.dev == b.dev;
}

// Prints "hashing 1.2 GiB / 3.4 GiB (35%)" on stderr after the first second,
// only when stderr is a terminal; clears the line when done.
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::uint64_t total, const std::atomic<std::uint64_t>& done) : total_(total), done_(done) {
    if (enabled && total > 0 && ::isatty(STDERR_FILENO)) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressLine() { finish(); }
  void finish() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stop_; })) return;
    bool printed = false;
    while (!stop_) {
      std::uint64_t d = done_.load();
      std::fprintf(stderr, "\r[pin] hashing %s / %s (%d%%)   ", human_bytes(double(d)).c_str(),
                   human_bytes(double(total_)).c_str(), int(100.0 * double(d) / double(total_)));
      std::fflush(stderr);
      printed = true;
      cv_.wait_for(lk, std::chrono::milliseconds(200), [this] { return stop_; });
    }
    if (printed) {
      std::fprintf(stderr, "\r%60s\r", "");
      std::fflush(stderr);
    }
  }

  std::uint64_t total_;
  const std::atomic<std::uint64_t>& done_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// One distinct file to hash (or found in the cache).
struct Job {
  FileKey key;
  std::string label;
  std::string sha256;
  bool cached = false;
  std::exception_ptr error;
};

struct Jobs {
  std::vector<Job> jobs;
  std::vector<std::size_t> job_of;  // the job of each input
};

// Serial pass: identify every file (cheap) so errors come out in input
// order, and read each distinct file once.
Jobs identify_inputs(const std::vector<HashInput>& inputs) {
  Jobs js;
  js.job_of.resize(inputs.size());
  std::unordered_map<std::string, std::size_t> by_path;
  RealDirs dirs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    FileKey k;
    try {
      k = identify(inputs[i].path, &dirs);
    } catch (const Error& e) {
      throw with_label(e, inputs[i].label);
    }
    auto it = by_path.find(k.path);
    if (it != by_path.end()) {
      js.job_of[i] = it->second;
      continue;
    }
    by_path.emplace(k.path, js.jobs.size());
    js.job_of[i] = js.jobs.size();
    js.jobs.push_back(Job{std::move(k), inputs[i].label, {}, false, nullptr});
  }
  return js;
}

// A cache hit is not read, but this process must still be able to read it,
// so an unreadable file fails the pin now rather than later in a worker:
// faccessat with the effective ids (the permission bits and ACLs open(2)
// checks; an LSM that decides only at open, AppArmor or Landlock, is met when
// a worker reads the file). identify() has already refused anything but a
// regular file, and the hit means it is the same file (device, inode, size,
// mtime) the digest was taken of. One system call instead of open, fstat,
// fcntl and close, once per file and library a no-change re-pin pins.
void check_readable(const Job& job) {
  if (::faccessat(AT_FDCWD, job.key.path.c_str(), R_OK, AT_EACCESS) == 0) return;
  const int err = errno;
  // A sandbox that refuses the call itself (a seccomp profile answering
  // faccessat2 with EPERM, a kernel without it): open the file as before.
  if (err == ENOSYS || err == EPERM || err == EINVAL) {
    try {
      fs::open_regular(job.key.path);
    } catch (const Error& e) {
      throw with_label(e, job.label);
    }
    return;
  }
  throw with_label(io_error("access", job.key.path, err), job.label);
}

// Takes the cache hits (each through check_readable); returns the jobs left to hash,
// largest first, and adds their sizes to `todo_bytes`.
std::vector<std::size_t> take_cache_hits(std::vector<Job>& jobs, const HashOptions& opts, HashStats& st,
                                         std::uint64_t& todo_bytes) {
  std::vector<std::size_t> todo;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    auto& job = jobs[j];
    if (opts.cache) {
      if (auto hit = opts.cache->lookup(job.key)) {
        check_readable(job);
        job.sha256 = *hit;
        job.cached = true;
        ++st.files_cached;
        st.bytes_cached += job.key.size;
        continue;
      }
    }
    todo.push_back(j);
    todo_bytes += job.key.size;
  }
  // Largest first: the pool finishes together instead of waiting on one big
  // file picked up last.
  std::stable_sort(todo.begin(), todo.end(),
                   [&](std::size_t a, std::size_t b) { return jobs[a].key.size > jobs[b].key.size; });
  return todo;
}

// Hashes one file, counting its bytes into `done_bytes`; a failure is kept in
// job.error for the caller to report in input order.
void hash_job(Job& job, const HashOptions& opts, std::atomic<std::uint64_t>& done_bytes) {
  try {
    std::int64_t started = now_realtime_ns();
    std::uint64_t last = 0;
    FileDigest d = sha256_file(job.key.path, [&](std::uint64_t n) {
      done_bytes.fetch_add(n - last, std::memory_order_relaxed);
      last = n;
    });
    job.sha256 = d.sha256;
    FileKey after = identify(job.key.path);
    if (!same_identity(after, job.key) || d.size != job.key.size)
      throw Error(ErrorKind::kIo, "read " + job.key.path + ": the file changed while it was being hashed",
                  "wait until whatever writes it has finished, then pin again");
    if (opts.cache && job.key.mtime_ns < started - kRacyWindowNs) opts.cache->store(job.key, job.sha256);
  } catch (...) {
    job.error = std::current_exception();
  }
}

// Hashes the `todo` jobs on `threads` threads, the calling one among them.
void hash_in_pool(std::vector<Job>& jobs, const std::vector<std::size_t>& todo, int threads, const HashOptions& opts,
                  std::uint64_t todo_bytes) {
  std::atomic<std::uint64_t> done_bytes{0};
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (;;) {
      std::size_t t = next.fetch_add(1);
      if (t >= todo.size()) return;
      hash_job(jobs[todo[t]], opts, done_bytes);
    }
  };
  ProgressLine progress(opts.progress, todo_bytes, done_bytes);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();  // the calling thread is one of the workers
  for (auto& th : pool) th.join();
}

// Report the first failure in input order, naming the config entry.
void throw_first_failure(const std::vector<HashInput>& inputs, const Jobs& js) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Job& job = js.jobs[js.job_of[i]];
    if (!job.error) continue;
    try {
      std::rethrow_exception(job.error);
    } catch (const Error& e) {
      throw with_label(e, inputs[i].label);
    }
  }
}

}  // namespace

int default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::vector<HashResult> hash_files(const std::vector<HashInput>& inputs, const HashOptions& opts, HashStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  HashStats st;

  Jobs js = identify_inputs(inputs);
  std::uint64_t todo_bytes = 0;
  const std::vector<std::size_t> todo = take_cache_hits(js.jobs, opts, st, todo_bytes);

  int threads = opts.threads > 0 ? opts.threads : default_threads();
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(todo.size(), 1))));
  st.threads = threads;
  hash_in_pool(js.jobs, todo, threads, opts, todo_bytes);

  throw_first_failure(inputs, js);
  for (std::size_t t : todo) {
    ++st.files_hashed;
    st.bytes_hashed += js.jobs[t].key.size;
  }

  std::vector<HashResult> out;
  out.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Job& job = js.jobs[js.job_of[i]];
    out.push_back(HashResult{inputs[i].path, job.key.path, job.key.size, job.sha256, job.cached});
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

std::string set_digest(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> lines;
  lines.reserve(files.size());
  for (const auto& [sha, path] : files) lines.push_back(sha + "  " + path + "\n");
  std::sort(lines.begin(), lines.end());
  Sha256 h;
  for (const auto& l : lines) h.update(l);
  return h.hex();
}

}  // namespace anchor::manifest
