#include "anchor/common/fs.hpp"

#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "anchor/common/unique_fd.hpp"
#include "anchor/error.hpp"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace anchor::fs {

const char* op_name(Op op) {
  switch (op) {
    case Op::kCreate: return "create";
    case Op::kWrite: return "write";
    case Op::kFsync: return "fsync";
    case Op::kRename: return "rename";
    case Op::kFsyncDir: return "fsync directory";
    case Op::kMkdir: return "mkdir";
    case Op::kRemove: return "remove";
  }
  return "?";
}

UniqueFd FileSystem::create_excl(const std::string& path, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode));
  if (!fd) throw io_error("create", path, errno);
  return fd;
}

void FileSystem::write_all(int fd, const void* data, std::size_t len, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("write", path, errno);
    }
    if (n == 0) throw io_error("write", path, EIO);
    p += n;
    len -= static_cast<std::size_t>(n);
  }
}

void FileSystem::fsync(int fd, const std::string& path) {
  if (::fsync(fd) != 0) throw io_error("fsync", path, errno);
}

void FileSystem::close(UniqueFd fd, const std::string& path) {
  // close() after a successful fsync cannot lose data; an error is still reported.
  if (const int err = fd.close(); err != 0 && err != EINTR) throw io_error("close", path, err);
}

void FileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw io_error("rename " + from + " ->", to, errno);
}

void FileSystem::exchange(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0)
    throw io_error("exchange " + a + " <->", b, errno);
}

void FileSystem::fsync_dir(const std::string& dir) {
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw io_error("open directory", dir, errno);
  if (::fsync(fd.get()) != 0) throw io_error("fsync directory", dir, errno);
}

void FileSystem::mkdir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) != 0) throw io_error("mkdir", dir, errno);
}

void FileSystem::remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw io_error("remove", path, ec.value());
}

FileSystem& real_fs() {
  static FileSystem fs;
  return fs;
}

void FaultInjectingFs::fail_on(Op op, int nth, int err) { fail_[op] = {nth, err}; }

int FaultInjectingFs::calls(Op op) const {
  auto it = count_.find(op);
  return it == count_.end() ? 0 : it->second;
}

void FaultInjectingFs::tick(Op op, const std::string& path) {
  int n = ++count_[op];
  auto it = fail_.find(op);
  if (it != fail_.end() && it->second.first == n) throw io_error(op_name(op), path, it->second.second);
}

UniqueFd FaultInjectingFs::create_excl(const std::string& path, mode_t mode) {
  tick(Op::kCreate, path);
  return FileSystem::create_excl(path, mode);
}
void FaultInjectingFs::write_all(int fd, const void* data, std::size_t len, const std::string& path) {
  tick(Op::kWrite, path);
  FileSystem::write_all(fd, data, len, path);
}
void FaultInjectingFs::fsync(int fd, const std::string& path) {
  tick(Op::kFsync, path);
  FileSystem::fsync(fd, path);
}
void FaultInjectingFs::rename(const std::string& from, const std::string& to) {
  tick(Op::kRename, to);
  FileSystem::rename(from, to);
}
void FaultInjectingFs::exchange(const std::string& a, const std::string& b) {
  tick(Op::kRename, b);
  FileSystem::exchange(a, b);
}
void FaultInjectingFs::fsync_dir(const std::string& dir) {
  tick(Op::kFsyncDir, dir);
  FileSystem::fsync_dir(dir);
}
void FaultInjectingFs::mkdir(const std::string& dir, mode_t mode) {
  tick(Op::kMkdir, dir);
  FileSystem::mkdir(dir, mode);
}
void FaultInjectingFs::remove_all(const std::string& path) {
  tick(Op::kRemove, path);
  FileSystem::remove_all(path);
}

std::string random_suffix() {
  // Seeded again in a forked child: it would otherwise draw its parent's
  // next names, and two children publishing at once collide on their
  // temporary files.
  static thread_local std::mt19937_64 rng;
  static thread_local pid_t seeded_for = -1;
  if (const pid_t pid = ::getpid(); pid != seeded_for) {
    std::random_device rd;
    rng.seed((static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(pid));
    seeded_for = pid;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(buf, 8);
}

void atomic_write_file(const std::string& path, const std::string& content, FileSystem& fs, mode_t mode) {
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmp = dir + "/." + p.filename().string() + ".tmp-" + random_suffix();
  UniqueFd fd = fs.create_excl(tmp, mode);
  try {
    fs.write_all(fd.get(), content.data(), content.size(), tmp);
    fs.fsync(fd.get(), tmp);
    fs.close(std::move(fd), tmp);
    fs.rename(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fs.fsync_dir(dir);
}

std::string read_file(const std::string& path) {
  UniqueFd fd = open_regular(path);
  return read_all(fd.get(), path);
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty()))
    throw Error(ErrorKind::kConfig, "'" + pattern + "' matches no file",
                "check the path (relative paths are resolved against the config file's directory)");
  if (rc != 0) throw Error(ErrorKind::kIo, "glob '" + pattern + "' failed (read error)");
  return out;
}

}  // namespace anchor::fs
