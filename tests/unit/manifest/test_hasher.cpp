#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/hasher.hpp"
#include "manifest_test_util.hpp"

namespace anchor::manifest {
namespace {

using testing::backdate;
using testing::bytes;
using testing::sha256sum_of;
using testing::TempDir;
using testing::write_file;

std::vector<HashInput> inputs_of(const std::vector<std::string>& paths) {
  std::vector<HashInput> in;
  for (const auto& p : paths) in.push_back({p, ""});
  return in;
}

template <typename Fn>
std::string error_of(Fn&& fn, ErrorKind* kind = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "(no error)";
}

TEST(HashFiles, DigestsEqualSha256sumForSeveralFiles) {
  TempDir dir("hash");
  std::vector<std::size_t> sizes = {0, 1, 100, (1u << 20) + 3, 3u << 20, 5 * 1000 * 1000};
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    paths.push_back(dir.str("f" + std::to_string(i) + ".bin"));
    write_file(paths.back(), bytes(sizes[i], unsigned(i)));
  }
  HashStats stats;
  HashOptions opts;
  opts.threads = 3;
  auto res = hash_files(inputs_of(paths), opts, &stats);
  ASSERT_EQ(res.size(), paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(res[i].path, paths[i]);  // input order kept despite largest-first scheduling
    EXPECT_EQ(res[i].size, sizes[i]);
    EXPECT_EQ(res[i].sha256, sha256sum_of(paths[i])) << paths[i];
    EXPECT_FALSE(res[i].cached);
  }
  EXPECT_EQ(stats.files_hashed, paths.size());
  EXPECT_EQ(stats.threads, 3);
  // Negative control: distinct contents give distinct digests.
  EXPECT_NE(res[3].sha256, res[4].sha256);
}

TEST(HashFiles, OneThreadAndManyThreadsAgree) {
  TempDir dir("hash");
  std::vector<std::string> paths;
  for (int i = 0; i < 12; ++i) {
    paths.push_back(dir.str("s" + std::to_string(i)));
    write_file(paths.back(), bytes(100000 + i * 777, unsigned(i + 50)));
  }
  HashOptions one, many;
  one.threads = 1;
  many.threads = 8;
  auto a = hash_files(inputs_of(paths), one);
  auto b = hash_files(inputs_of(paths), many);
  for (std::size_t i = 0; i < paths.size(); ++i) EXPECT_EQ(a[i].sha256, b[i].sha256);
}

TEST(HashFiles, SymlinkAndDuplicateAreReadOnceAndResolved) {
  TempDir dir("hash");
  std::string real = dir.str("real.bin");
  write_file(real, bytes(4096, 7));
  std::filesystem::create_symlink(real, dir.str("link.bin"));
  HashStats stats;
  auto res = hash_files(inputs_of({real, dir.str("link.bin"), real}), {}, &stats);
  EXPECT_EQ(stats.files_hashed, 1u);
  EXPECT_EQ(res[1].resolved, std::filesystem::canonical(real).string());
  EXPECT_EQ(res[0].sha256, res[1].sha256);
  EXPECT_EQ(res[2].sha256, res[0].sha256);
}

// The serial pass resolves a directory once and a file's own name only when it is a link:
// every way of naming one file (a linked directory, "..", a relative path, a link to a
// link in another directory) resolves to realpath(3)'s answer, and a dangling link is an error.
TEST(HashFiles, PathsThroughLinkedDirectoriesResolveAsRealpathDoes) {
  TempDir dir("hash");
  std::filesystem::create_directories(dir.path() / "real" / "sub");
  const std::string file = dir.str("real/sub/f.bin");
  write_file(file, bytes(100, 3));
  std::filesystem::create_directory_symlink(dir.path() / "real", dir.path() / "linkdir");
  std::filesystem::create_symlink(file, dir.path() / "real" / "to-f");
  std::filesystem::create_symlink(dir.path() / "linkdir" / "to-f", dir.path() / "chain");
  const std::string want = std::filesystem::canonical(file).string();
  const std::vector<std::string> names = {dir.str("linkdir/sub/f.bin"), dir.str("linkdir/sub/../sub/f.bin"),
                                          dir.str("chain"), dir.str("linkdir/to-f"), file};
  HashStats stats;
  const auto res = hash_files(inputs_of(names), {}, &stats);
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(res[i].resolved, want) << names[i];
  EXPECT_EQ(stats.files_hashed, 1u);
  // Relative to the working directory, as realpath(3) takes it.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path() / "linkdir");
  const auto rel = hash_files(inputs_of({"sub/f.bin", "to-f"}), {});
  std::filesystem::current_path(cwd);
  EXPECT_EQ(rel[0].resolved, want);
  EXPECT_EQ(rel[1].resolved, want);
  // Control: a dangling link is refused, naming it.
  std::filesystem::create_symlink(dir.path() / "gone", dir.path() / "dangling");
  try {
    hash_files(inputs_of({dir.str("dangling")}), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dangling"), std::string::npos) << e.what();
  }
}

TEST(SetDigest, EqualsSha256sumSortPipeline) {
  TempDir dir("set");
  for (const char* n : {"b.bin", "a.bin", "sub/c.bin"}) write_file(dir.str(n), bytes(1000, n[0]));
  std::vector<std::pair<std::string, std::string>> files;
  for (const char* n : {"b.bin", "a.bin", "sub/c.bin"}) files.emplace_back(sha256sum_of(dir.str(n)), n);
  auto r = proc::run_capture(
      {"/bin/sh", "-c",
       "cd '" + dir.path().string() + "' && sha256sum b.bin a.bin sub/c.bin | LC_ALL=C sort | sha256sum"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(set_digest(files), r.out.substr(0, 64));
  // Order of the input does not matter...
  std::reverse(files.begin(), files.end());
  EXPECT_EQ(set_digest(files), r.out.substr(0, 64));
  // ...but a renamed file does (negative control), and so does a changed digest.
  auto renamed = files;
  renamed[0].second = "renamed.bin";
  EXPECT_NE(set_digest(renamed), set_digest(files));
  auto changed = files;
  changed[0].first = sha256_hex("other");
  EXPECT_NE(set_digest(changed), set_digest(files));
  EXPECT_EQ(set_digest({}), sha256_hex(""));
}

class CacheTest : public ::testing::Test {
 protected:
  TempDir dir{"cache"};
  std::string cache_file = dir.str("cache/hash-cache.json");
  std::vector<std::string> paths;

  void SetUp() override {
    for (int i = 0; i < 4; ++i) {
      paths.push_back(dir.str("d" + std::to_string(i) + ".bin"));
      write_file(paths.back(), bytes(50000 + i, unsigned(i + 100)));
      backdate(paths.back());
    }
  }
  std::vector<HashResult> run(HashStats* stats, bool use_cache = true) {
    HashCache cache(cache_file);
    HashOptions opts;
    opts.cache = use_cache ? &cache : nullptr;
    auto res = hash_files(inputs_of(paths), opts, stats);
    if (use_cache) cache.save();
    return res;
  }
};

TEST_F(CacheTest, MissThenHitSetsCachedFlag) {
  HashStats first, second;
  auto a = run(&first);
  EXPECT_EQ(first.files_hashed, 4u);
  EXPECT_EQ(first.files_cached, 0u);
  for (const auto& r : a) EXPECT_FALSE(r.cached);
  auto b = run(&second);
  EXPECT_EQ(second.files_hashed, 0u);
  EXPECT_EQ(second.files_cached, 4u);
  for (std::size_t i = 0; i < b.size(); ++i) {
    EXPECT_TRUE(b[i].cached);
    EXPECT_EQ(b[i].sha256, a[i].sha256);
    EXPECT_EQ(b[i].sha256, sha256sum_of(paths[i]));
  }
}

TEST_F(CacheTest, SizeChangeInvalidates) {
  HashStats s;
  run(&s);
  write_file(paths[1], bytes(70000, 999));  // different size
  backdate(paths[1]);
  auto b = run(&s);
  EXPECT_EQ(s.files_hashed, 1u);
  EXPECT_FALSE(b[1].cached);
  EXPECT_TRUE(b[0].cached);
  EXPECT_EQ(b[1].sha256, sha256sum_of(paths[1]));
}

TEST_F(CacheTest, MtimeChangeWithSameSizeInvalidates) {
  HashStats s;
  auto a = run(&s);
  write_file(paths[2], bytes(50002, 4242));  // same size, new content
  backdate(paths[2], 1800);                  // a different (still old) mtime
  auto b = run(&s);
  EXPECT_EQ(s.files_hashed, 1u);
  EXPECT_FALSE(b[2].cached);
  EXPECT_NE(b[2].sha256, a[2].sha256);
  EXPECT_EQ(b[2].sha256, sha256sum_of(paths[2]));
}

TEST_F(CacheTest, ReplacedFileWithSameSizeAndMtimeInvalidatesByInode) {
  HashStats s;
  run(&s);
  auto mtime = std::filesystem::last_write_time(paths[3]);
  std::string tmp = paths[3] + ".new";
  write_file(tmp, bytes(50003, 31337));
  std::filesystem::last_write_time(tmp, mtime);
  std::filesystem::rename(tmp, paths[3]);  // new inode, same size and mtime
  auto b = run(&s);
  EXPECT_FALSE(b[3].cached);
  EXPECT_EQ(b[3].sha256, sha256sum_of(paths[3]));
}

TEST_F(CacheTest, NoCacheReadsEveryFile) {
  HashStats s;
  run(&s);
  auto b = run(&s, /*use_cache=*/false);
  EXPECT_EQ(s.files_hashed, 4u);
  for (const auto& r : b) EXPECT_FALSE(r.cached);
}

TEST_F(CacheTest, FreshlyWrittenFileIsNotCached) {
  // An mtime that is not older than the hashing start (here: 10 minutes ahead,
  // as with clock skew; a file written "just now" is the same case without the
  // scheduling race a loaded test machine would add) must not be cached.
  write_file(paths[0], bytes(50000, 100));
  std::filesystem::last_write_time(paths[0], std::filesystem::file_time_type::clock::now() + std::chrono::minutes(10));
  HashStats s;
  run(&s);
  auto b = run(&s);
  EXPECT_FALSE(b[0].cached);
  EXPECT_TRUE(b[1].cached);  // control: the backdated ones are
}

// A hit reads no data but still fails for a file this process may not read
// (checked with its effective ids, as open would). As root the check runs in
// a child that drops to nobody (root may read anything); the cached file made
// unreadable fails the pin naming it, the same file readable is a hit
// (control). Exit codes of the child: 0 as expected, 1 not, 2 could not drop.
TEST_F(CacheTest, AHitOnAFileThisProcessCannotReadFailsThePin) {
  HashStats first;
  run(&first);  // every file cached (backdated)
  ASSERT_EQ(first.files_hashed, 4u);
  for (const auto& d : {dir.path(), dir.path() / "cache"})
    std::filesystem::permissions(d, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                        std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                        std::filesystem::perms::others_exec);
  const auto readable = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                        std::filesystem::perms::group_read | std::filesystem::perms::others_read;
  for (const auto& p : paths) std::filesystem::permissions(p, readable);
  std::filesystem::permissions(cache_file, readable);
  auto pin_as_other = [&](bool expect_refused) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::geteuid() == 0 && (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0))
        ::_exit(2);
      try {
        HashCache cache(cache_file);
        HashOptions opts;
        opts.cache = &cache;
        HashStats st;
        hash_files(inputs_of(paths), opts, &st);
        ::_exit(!expect_refused && st.files_cached == 4 && st.files_hashed == 0 ? 0 : 1);
      } catch (const anchor::Error& e) {
        const std::string what = e.what();
        ::_exit(expect_refused && what.find(paths[2]) != std::string::npos &&
                        what.find("Permission denied") != std::string::npos
                    ? 0
                    : 1);
      } catch (...) {
        ::_exit(1);
      }
    }
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const int control = pin_as_other(false);
  if (control == 2)
    GTEST_SKIP() << "root could not become uid 65534 (a user namespace without it?), and root reads any file";
  EXPECT_EQ(control, 0);                                                        // control: readable, a hit
  std::filesystem::permissions(paths[2], std::filesystem::perms::owner_write);  // nobody reads it now
  EXPECT_EQ(pin_as_other(true), 0);
}

TEST_F(CacheTest, CorruptCacheIsIgnoredAndRewritten) {
  write_file(cache_file, "{ this is not json");
  HashCache bad(cache_file);
  EXPECT_FALSE(bad.loaded_ok());
  EXPECT_EQ(bad.size(), 0u);
  HashStats s;
  auto a = run(&s);  // not fatal
  EXPECT_EQ(s.files_hashed, 4u);
  HashCache good(cache_file);
  EXPECT_TRUE(good.loaded_ok());
  EXPECT_EQ(good.size(), 4u);
  // A well-formed JSON file of the wrong shape is also ignored.
  write_file(cache_file, R"({"format":"anchor.hashcache/v1","entries":{"/x":{"sha256":"zz"}}})");
  HashCache wrong(cache_file);
  EXPECT_FALSE(wrong.loaded_ok());
}

// Issue 14: a pinned file whose path is not UTF-8 (the working directory
// holds such a byte) made the cache's JSON dump throw, failing the pin. It is
// hashed every time instead (a path cannot be a JSON key as it is); the other
// files are cached as before.
TEST_F(CacheTest, PathThatIsNotUtf8IsHashedNotCached) {
  std::filesystem::create_directories(dir.path() / "w\xff");
  paths.push_back((dir.path() / "w\xff" / "odd.bin").string());
  write_file(paths.back(), bytes(40000, 7));
  backdate(paths.back());
  HashStats first, second;
  auto a = run(&first);
  EXPECT_EQ(first.files_hashed, 5u);
  auto b = run(&second);
  EXPECT_EQ(second.files_cached, 4u);
  EXPECT_EQ(second.files_hashed, 1u);
  EXPECT_FALSE(b[4].cached);
  EXPECT_EQ(b[4].sha256, a[4].sha256);
  HashCache reread(cache_file);
  EXPECT_TRUE(reread.loaded_ok());
  EXPECT_EQ(reread.size(), 4u);
}

TEST(HashCacheLocation, FollowsEnvironmentPrecedence) {
  const char* saved[3] = {std::getenv("ANCHOR_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  std::string keep[3];
  for (int i = 0; i < 3; ++i) keep[i] = saved[i] ? saved[i] : "";
  ::setenv("HOME", "/h", 1);
  ::unsetenv("ANCHOR_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(HashCache::default_file(), "/h/.cache/anchor/hash-cache.json");
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(HashCache::default_file(), "/x/anchor/hash-cache.json");
  ::setenv("ANCHOR_CACHE_DIR", "/a", 1);
  EXPECT_EQ(HashCache::default_file(), "/a/hash-cache.json");
  const char* names[3] = {"ANCHOR_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) {
    if (saved[i])
      ::setenv(names[i], keep[i].c_str(), 1);
    else
      ::unsetenv(names[i]);
  }
}

TEST(HashFilesErrors, MissingFileNamesPathLabelAndErrno) {
  ErrorKind kind{};
  std::string msg = error_of([] { hash_files({{"/nonexistent/anchor/x.bin", "data.train[0] 'x.bin'"}}); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kIo);
  EXPECT_NE(msg.find("/nonexistent/anchor/x.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ENOENT"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.train[0] 'x.bin'"), std::string::npos) << msg;
}

TEST(HashFilesErrors, DirectoryIsAClearError) {
  TempDir dir("err");
  ErrorKind kind{};
  std::string msg = error_of([&] { hash_files(inputs_of({dir.path().string()})); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kIo);
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.path().string()), std::string::npos) << msg;
}

TEST(HashFilesErrors, SymlinkLoopIsELOOP) {
  TempDir dir("err");
  std::filesystem::create_symlink(dir.str("b"), dir.str("a"));
  std::filesystem::create_symlink(dir.str("a"), dir.str("b"));
  std::string msg = error_of([&] { hash_files(inputs_of({dir.str("a")})); });
  EXPECT_NE(msg.find("ELOOP"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.str("a")), std::string::npos) << msg;
}

TEST(HashFilesErrors, FirstFailureInInputOrderWins) {
  TempDir dir("err");
  write_file(dir.str("ok.bin"), "ok");
  std::string msg = error_of([&] {
    hash_files({{dir.str("ok.bin"), "a"}, {dir.str("missing1"), "b"}, {dir.str("missing2"), "c"}});
  });
  EXPECT_NE(msg.find("missing1"), std::string::npos) << msg;
}

TEST(HashFilesErrors, FileChangingWhileHashedIsDetected) {
  // The check lives in sha256_file, which hash_files uses for every read: grow
  // the file from the progress callback, i.e. in the middle of the read loop.
  TempDir dir("err");
  std::string p = dir.str("growing.bin");
  write_file(p, bytes(3 << 20, 5));
  bool appended = false;
  std::string msg = error_of([&] {
    sha256_file(p, [&](std::uint64_t) {
      if (appended) return;
      appended = true;
      std::FILE* f = std::fopen(p.c_str(), "ab");
      std::fputs("more", f);
      std::fclose(f);
    });
  });
  EXPECT_NE(msg.find("changed while it was being hashed"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  // Control: untouched, the same file hashes fine.
  EXPECT_EQ(sha256_file(p).sha256, sha256sum_of(p));
}

}  // namespace
}  // namespace anchor::manifest
