#include "anchor/common/copy_verified.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "anchor/common/sha256.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::fs {
namespace {

constexpr std::size_t kChunk = 4u << 20;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_name(const KnownFile& f) {
  if (!is_name_within(f.name))
    throw Error(ErrorKind::kUsage, "copy: '" + printable(f.name) + "' is not a relative path within the directory");
}

// The directories of `name` below `root` that are not there yet, made (mode
// 0755) and returned in the order made, for fsyncing.
void make_parents(const std::string& root, const std::string& name, std::vector<std::string>& made, FileSystem& fs) {
  for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1)) {
    const std::string dir = root + "/" + name.substr(0, slash);
    std::error_code ec;
    if (std::filesystem::is_directory(std::filesystem::symlink_status(dir, ec))) continue;
    fs.mkdir(dir, 0755);
    made.push_back(dir);
  }
}

// One file: read in chunks, hashed as read, written, fsynced, dropped from the cache.
void copy_file(const std::string& src, const KnownFile& f, const std::string& dst, FileSystem& fs) {
  UniqueFd in = open_regular(src);
  UniqueFd out = fs.create_excl(dst, 0644);
  {
    std::vector<char> buf(kChunk);
    Sha256 h;
    std::uint64_t n = 0;
    for (;;) {
      const ssize_t got = ::read(in.get(), buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw io_error("read", src, errno);
      if (got == 0) break;
      h.update(buf.data(), static_cast<std::size_t>(got));
      fs.write_all(out.get(), buf.data(), static_cast<std::size_t>(got), dst);
      n += static_cast<std::uint64_t>(got);
    }
    const std::string digest = h.hex();
    if (n != f.size || digest != f.sha256)
      throw Error(ErrorKind::kVerification,
                  "copy: " + printable(src) + " is not the file recorded (" + std::to_string(n) + " bytes, sha256 " +
                      digest + "; recorded " + std::to_string(f.size) + " bytes, " + f.sha256 + ")",
                  "something changed it after it was written; run the pilot again");
    fs.fsync(out.get(), dst);
    // What verify_files reads next should come from the destination, not this process's page cache.
    (void)::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  fs.close(std::move(out), dst);
}

}  // namespace

bool is_name_within(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.back() == '/') return false;
  for (std::size_t at = 0; at <= name.size();) {
    const std::size_t end = std::min(name.find('/', at), name.size());
    const std::string part = name.substr(at, end - at);
    if (part.empty() || part == "." || part == "..") return false;
    at = end + 1;
  }
  return true;
}

void verify_files(const std::string& dir, const std::vector<KnownFile>& files) {
  for (const auto& f : files) {
    check_name(f);
    const std::string path = dir + "/" + f.name;
    const auto d = sha256_file(path);
    if (d.size != f.size || d.sha256 != f.sha256)
      throw Error(ErrorKind::kVerification,
                  "copy: " + printable(path) + " does not match what was copied (" + std::to_string(d.size) +
                      " bytes, sha256 " + d.sha256 + "; expected " + std::to_string(f.size) + " bytes, " + f.sha256 +
                      ")",
                  "the destination changed or lost the bytes: check the storage behind it, then copy again");
  }
}

CopyResult copy_verified(const std::string& from, const std::vector<KnownFile>& files, const std::string& to,
                         FileSystem& fs) {
  for (const auto& f : files) check_name(f);
  namespace stdfs = std::filesystem;
  const stdfs::path target(to);
  const std::string parent = target.has_parent_path() ? target.parent_path().string() : ".";
  std::error_code ec;
  if (!stdfs::is_directory(parent, ec))
    throw Error(ErrorKind::kIo, "copy: the destination " + parent + " is not a directory",
                "create it, or mount the share there (anchor does not create it: a missing mount would be "
                "filled on the local disk instead)");
  if (stdfs::exists(stdfs::symlink_status(target, ec)))
    throw Error(ErrorKind::kIo, "copy: " + to + " already exists",
                "nothing at a destination is replaced: remove it, or give the run another name (run.name)");
  const std::string tmp = parent + "/." + target.filename().string() + ".tmp-" + random_suffix();
  CopyResult r;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fs.mkdir(tmp, 0755);
    std::vector<std::string> made;
    for (const auto& f : files) {
      make_parents(tmp, f.name, made, fs);
      copy_file(f.source.empty() ? from + "/" + f.name : f.source, f, tmp + "/" + f.name, fs);
      r.bytes += f.size;
    }
    for (auto d = made.rbegin(); d != made.rend(); ++d) fs.fsync_dir(*d);
    fs.fsync_dir(tmp);
    r.copy_s = since(t0);
    // Read back before publishing: the files were fsynced and dropped from the
    // cache, so these reads come from the destination's storage, and a copy that
    // does not read back is never published under `to`.
    const auto t1 = std::chrono::steady_clock::now();
    try {
      verify_files(tmp, files);
    } catch (const Error& e) {
      throw Error(e.kind(),
                  std::string(e.what()) + " (read back before publishing; " + printable(to) + " was not made)",
                  e.hint());
    }
    r.verify_s = since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    fs.rename(tmp, to);
    fs.fsync_dir(parent);
    r.copy_s += since(t2);
  } catch (...) {
    stdfs::remove_all(tmp, ec);
    throw;
  }
  return r;
}

}  // namespace anchor::fs
