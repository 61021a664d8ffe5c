// What a process that trains tells the manifest (process_facts.hpp): the JSON
// that anchor-torch __process-facts prints and the front end reads back (and
// caches), and what that reader refuses.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "anchor/build_info.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/process_facts.hpp"
#include "support/temp_dir.hpp"

namespace {

using anchor::manifest::process_facts_from_json;
using anchor::manifest::ProcessFacts;
using anchor::manifest::this_process_facts;
using anchor::manifest::to_json;

TEST(ProcessFacts, ThisProcessRoundTripsThroughJson) {
  const ProcessFacts f = this_process_facts("cpu");
  ASSERT_FALSE(f.libraries.empty()) << "a test binary maps libc at least";
  EXPECT_EQ(f.device["configured"], "cpu");
  EXPECT_TRUE(f.runtime.contains("libtorch"));
  const ProcessFacts g = process_facts_from_json(to_json(f), "test");
  EXPECT_EQ(g.runtime, f.runtime);
  EXPECT_EQ(g.device, f.device);
  EXPECT_EQ(g.executable, f.executable);
  ASSERT_EQ(g.libraries.size(), f.libraries.size());
  for (std::size_t i = 0; i < f.libraries.size(); ++i) {
    EXPECT_EQ(g.libraries[i].path, f.libraries[i].path);
    EXPECT_EQ(g.libraries[i].deleted, f.libraries[i].deleted);
  }
}

TEST(ProcessFacts, PathsThatAreNotUtf8KeepTheirBytes) {
  ProcessFacts f;
  f.runtime = {{"libtorch", "1.13"}};
  f.device = {{"configured", "cpu"}};
  f.executable = "/opt/\xff/anchor-torch";
  f.libraries.push_back({"/lib/\xfe\x80/libx.so", false, true});
  f.build = {{"version", "0.1.0"}, {"git_commit", "abc"}, {"git_dirty", false}, {"build_type", "Release"}};
  const nlohmann::json j = to_json(f);
  EXPECT_NO_THROW((void)j.dump()) << "the JSON is valid UTF-8";
  const ProcessFacts g = process_facts_from_json(nlohmann::json::parse(j.dump()), "test");
  EXPECT_EQ(g.executable, f.executable);
  ASSERT_EQ(g.libraries.size(), 1u);
  EXPECT_EQ(g.libraries[0].path, f.libraries[0].path);
  EXPECT_TRUE(g.libraries[0].replaced_since_load);
}

// Each refusal names the field; a valid document (the negative control) passes.
TEST(ProcessFacts, ReaderRefusesWhatToJsonDoesNotWrite) {
  ProcessFacts f;
  f.runtime = {{"libtorch", "1.13"}};
  f.device = {{"configured", "cpu"}};
  f.executable = "/usr/bin/anchor-torch";
  f.libraries.push_back({"/lib/libc.so.6", false, false});
  f.search_dirs = {"/lib"};
  f.build = {{"version", "0.1.0"}, {"git_commit", "abc"}, {"git_dirty", false}, {"build_type", "Release"}};
  const nlohmann::json good = to_json(f);
  EXPECT_NO_THROW(process_facts_from_json(good, "answer"));

  struct Case {
    const char* what;
    nlohmann::json doc;
    const char* says;
  };
  auto with = [&](const char* ptr, nlohmann::json v) {
    nlohmann::json d = good;
    d[nlohmann::json::json_pointer(ptr)] = std::move(v);
    return d;
  };
  nlohmann::json no_libs = good;
  no_libs.erase("libraries");
  const Case cases[] = {
      {"another format", with("/format", "anchor.process-facts/v2"), "format is"},
      {"no libraries", no_libs, "libraries is missing"},
      {"a relative library", with("/libraries/0/path", "libc.so.6"), "libraries[0].path is not an absolute path"},
      {"a number for a path", with("/libraries/0/path", 3), "libraries[0].path is 3"},
      {"a relative executable", with("/executable", "anchor-torch"), "executable is not an absolute path"},
      {"a version that is not a string", with("/runtime/libtorch", 1.13), "runtime.libtorch is 1.13"},
      {"a device that is a string", with("/device", "cpu"), "device is \"cpu\""},
      {"a hex path that is not hex", with("/executable_hex", "zz"), "executable_hex"},
      {"no build",
       [&] {
         auto d = good;
         d.erase("build");
         return d;
       }(),
       "build is missing"},
      {"a dirty flag that is a string", with("/build/git_dirty", "no"), "build.git_dirty is \"no\""},
      {"a search dir that is a number", with("/search_dirs", nlohmann::json::array({1})), "search_dirs[0] is 1"},
      {"not an object", nlohmann::json::array(), "the document is []"},
  };
  for (const auto& c : cases) {
    try {
      process_facts_from_json(c.doc, "answer");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kRuntime) << c.what;
      EXPECT_NE(std::string(e.what()).find("answer: "), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.what << ": " << e.what();
    }
  }
}

}  // namespace

// training_process_facts against a stand-in for anchor-torch: a shell script
// that counts its runs and prints a prepared answer for a library and two
// search directories of its own. The counter, not the reported source, says
// whether the binary ran.
namespace {

using anchor::manifest::training_process_facts;

class FactsCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "lib");
    std::filesystem::create_directories(dir_ / "lib2");
    anchor::fs::atomic_write_file(str("lib/libfake.so.1"), "not really a library");
    ProcessFacts f;
    f.runtime = {{"libtorch", "1.13"}};
    f.device = {{"configured", "cpu"}};
    f.executable = str("anchor-torch");
    f.libraries.push_back({str("lib/libfake.so.1"), false, false});
    f.search_dirs = {str("lib"), str("lib2")};
    f.build = {{"version", anchor::build::kVersion},
               {"git_commit", anchor::build::kGitCommit},
               {"git_dirty", anchor::build::kGitDirty},
               {"build_type", anchor::build::kBuildType}};
    answer(to_json(f));
    anchor::fs::atomic_write_file(
        str("anchor-torch"),
        "#!/bin/sh\necho run >> '" + str("runs") + "'\nprintf 'a library says hello'\ncat '" + str("answer") + "'\n",
        anchor::fs::real_fs(), 0755);
    settle();
  }
  void TearDown() override {
    ::unsetenv("LD_AUDIT");
    ::unsetenv("LD_LIBRARY_PATH");
    std::error_code ec;
    std::filesystem::current_path(cwd_, ec);
  }
  // An answer is cached only once what it rests on is 100 ms old (the racy-clean rule).
  static void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(150)); }
  std::string str(const std::string& child) const { return (dir_ / child).string(); }
  void answer(const nlohmann::json& facts) {
    // As anchor-torch prints it: on a line of its own, after whatever a library left unterminated.
    anchor::fs::atomic_write_file(str("answer"),
                                  "\n" + std::string(anchor::manifest::kProcessFactsLine) + facts.dump() + "\n");
  }
  int runs() const {
    std::error_code ec;
    if (!std::filesystem::exists(str("runs"), ec)) return 0;
    const std::string s = anchor::fs::read_file(str("runs"));
    return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  }
  ProcessFacts facts(const std::string& device = "cpu", bool use_cache = true) {
    return training_process_facts(str("anchor-torch"), device, use_cache, str("cache/process-facts.json"));
  }
  static void touch(const std::string& path) {
    const timespec later[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0) << path;
  }

  anchor::testing::TempDir tmp_{"facts"};
  const std::filesystem::path& dir_ = tmp_.path();
  std::filesystem::path cwd_ = std::filesystem::current_path();
};

TEST_F(FactsCache, AskedOnceThenReusedWithoutRunningTheBinary) {
  const ProcessFacts first = facts();
  EXPECT_EQ(first.source, "probed");
  EXPECT_EQ(runs(), 1);
  ASSERT_EQ(first.libraries.size(), 1u);
  EXPECT_EQ(first.libraries[0].path, str("lib/libfake.so.1")) << "the answer line, past the library's own line";
  const ProcessFacts second = facts();
  EXPECT_EQ(second.source, "cached");
  EXPECT_EQ(runs(), 1) << "a hit does not start anchor-torch";
  EXPECT_EQ(second.libraries[0].path, first.libraries[0].path);
  EXPECT_EQ(second.device["configured"], "cpu") << "the devices are read here, at every pin";
}

// Each thing the answer rests on, changed: the binary runs again, then its new answer is reused.
TEST_F(FactsCache, EachChangeAsksAgain) {
  facts();
  int expected = 1;
  auto asks_again = [&](const std::string& what) {
    settle();
    EXPECT_EQ(facts().source, "probed") << what;
    EXPECT_EQ(runs(), ++expected) << what;
    EXPECT_EQ(facts().source, "cached") << what << ", then reused";
    EXPECT_EQ(runs(), expected) << what;
  };
  touch(str("lib/libfake.so.1"));
  asks_again("a listed library changed");
  anchor::fs::atomic_write_file(str("lib2/libfake.so.1"), "a library that would shadow it");
  asks_again("a new file in a searched directory");
  touch(str("anchor-torch"));
  asks_again("anchor-torch changed");
  ASSERT_EQ(::setenv("LD_AUDIT", "/nowhere/audit.so", 1), 0);
  asks_again("an LD_ variable set");
  ASSERT_EQ(::unsetenv("LD_AUDIT"), 0);
  asks_again("an LD_ variable unset");
  ASSERT_EQ(::setenv("LD_LIBRARY_PATH", "relative", 1), 0);
  asks_again("a relative LD_LIBRARY_PATH");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  EXPECT_EQ(facts().source, "probed") << "the same relative LD_LIBRARY_PATH from another directory";
  ++expected;
  std::filesystem::current_path(cwd);
  ASSERT_EQ(::unsetenv("LD_LIBRARY_PATH"), 0);
  EXPECT_EQ(facts("cpu").source, "probed") << "LD_LIBRARY_PATH unset again";
  // Another device is another entry: both stay.
  EXPECT_EQ(facts("cuda").source, "probed");
  EXPECT_EQ(facts("cpu").source, "cached");
  EXPECT_EQ(facts("cuda").source, "cached");
}

// A relative search directory (a RUNPATH of "."; PyTorch's wheel has one) is
// the working directory: a manifest written there keeps the answer, a shared
// object put there does not.
TEST_F(FactsCache, TheWorkingDirectoryCountsByItsSharedObjects) {
  ProcessFacts f = process_facts_from_json(
      nlohmann::json::parse(
          anchor::fs::read_file(str("answer")).substr(1 + std::strlen(anchor::manifest::kProcessFactsLine))),
      "test");
  f.search_dirs.push_back(".");
  answer(to_json(f));
  std::filesystem::create_directories(dir_ / "work");
  std::filesystem::current_path(dir_ / "work");
  settle();
  EXPECT_EQ(facts().source, "probed");
  anchor::fs::atomic_write_file(str("work/manifest.json"), "{}");
  settle();
  EXPECT_EQ(facts().source, "cached") << "a file that is not a library, written where anchor pins";
  anchor::fs::atomic_write_file(str("work/libfake.so.1"), "a library that would shadow it");
  settle();
  EXPECT_EQ(facts().source, "probed") << "a library put where the loader looks";
  EXPECT_EQ(runs(), 2);
}

// A change within the racy window: asked again, not cached until it has settled.
TEST_F(FactsCache, AnAnswerWhoseFilesJustChangedIsNotCached) {
  facts();
  touch(str("lib/libfake.so.1"));  // its ctime is now
  EXPECT_EQ(facts().source, "probed");
  EXPECT_EQ(facts().source, "probed") << "not cached: a second change in this tick would go unseen";
  settle();
  EXPECT_EQ(facts().source, "probed");
  EXPECT_EQ(facts().source, "cached");
  EXPECT_EQ(runs(), 4);
}

// More than 16 entries: the newest 16 stay, and a hit on one of them runs nothing.
TEST_F(FactsCache, TheNewestSixteenEntriesAreKept) {
  for (int i = 0; i < 20; ++i) facts("dev" + std::to_string(i));
  EXPECT_EQ(runs(), 20);
  const auto cache = nlohmann::json::parse(anchor::fs::read_file(str("cache/process-facts.json")));
  EXPECT_EQ(cache["entries"].size(), 16u);
  EXPECT_EQ(facts("dev19").source, "cached");
  EXPECT_EQ(facts("dev4").source, "cached");
  EXPECT_EQ(facts("dev3").source, "probed") << "among the four oldest, dropped";
}

TEST_F(FactsCache, NoCacheAlwaysAsksAndWritesNothing) {
  EXPECT_EQ(facts("cpu", false).source, "probed");
  EXPECT_EQ(facts("cpu", false).source, "probed");
  EXPECT_EQ(runs(), 2);
  EXPECT_FALSE(std::filesystem::exists(str("cache/process-facts.json")));
}

// A cache that is not one, holds odd entries, is huge, or answers nonsense:
// never fatal, asked again, and the file is rewritten usable.
TEST_F(FactsCache, AHostileCacheIsIgnoredAndRewritten) {
  facts();
  const std::string cache = str("cache/process-facts.json");
  nlohmann::json good = nlohmann::json::parse(anchor::fs::read_file(cache));
  int expected = 1;
  auto survives = [&](const std::string& what, const std::string& text) {
    anchor::fs::atomic_write_file(cache, text);
    EXPECT_EQ(facts().source, "probed") << what;
    EXPECT_EQ(runs(), ++expected) << what;
    EXPECT_EQ(facts().source, "cached") << what << ": rewritten";
  };
  survives("not JSON", "{not json");
  survives("nested deep", std::string(10000, '[') + std::string(10000, ']'));
  survives("another format", R"({"format": "anchor.process-facts-cache/v9", "entries": {}})");
  nlohmann::json odd = {{"format", "anchor.process-facts-cache/v1"}, {"entries", nlohmann::json::object()}};
  for (int i = 0; i < 20; ++i)
    odd["entries"]["e" + std::to_string(i)] = i % 2 ? nlohmann::json(i) : nlohmann::json{{"written_ns", "soon"}};
  survives("20 odd entries (more than it keeps)", odd.dump());
  survives("larger than 16 MiB", std::string(17u << 20, ' '));
  nlohmann::json many = {{"format", "anchor.process-facts-cache/v1"}, {"entries", nlohmann::json::object()}};
  for (int i = 0; i < 200000; ++i)
    many["entries"]["x" + std::to_string(i)] = {{"key", 0}, {"facts", 0}, {"written_ns", i}};
  survives("200,000 entries that parse but are not answers", many.dump());
  nlohmann::json poisoned = good;
  for (auto& [name, e] : poisoned["entries"].items()) e["facts"]["libraries"][0]["path"] = "relative.so";
  survives("a relative library in the answer", poisoned.dump());
}

TEST_F(FactsCache, AnotherBuildOrNoAnswerIsRefusedNamingIt) {
  ProcessFacts f = process_facts_from_json(
      nlohmann::json::parse(
          anchor::fs::read_file(str("answer")).substr(1 + std::strlen(anchor::manifest::kProcessFactsLine))),
      "test");
  f.build["git_commit"] = "0000000000000000000000000000000000000000";
  answer(to_json(f));
  try {
    facts();
    ADD_FAILURE() << "another build was accepted";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is another build"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0000000000"), std::string::npos) << e.what();
  }
  // A cached answer from another build (anchor-torch rebuilt, the cache not): refused too.
  answer(to_json(process_facts_from_json(
      nlohmann::json::parse(
          anchor::fs::read_file(str("answer")).substr(1 + std::strlen(anchor::manifest::kProcessFactsLine))),
      "test")));
  {
    ProcessFacts good = f;
    good.build["git_commit"] = anchor::build::kGitCommit;
    answer(to_json(good));
  }
  ASSERT_EQ(facts().source, "probed");
  auto cache = nlohmann::json::parse(anchor::fs::read_file(str("cache/process-facts.json")));
  for (auto& [name, e] : cache["entries"].items()) e["facts"]["build"]["git_commit"] = "1111111111";
  anchor::fs::atomic_write_file(str("cache/process-facts.json"), cache.dump());
  try {
    facts();
    ADD_FAILURE() << "a cached answer of another build was accepted";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1111111111"), std::string::npos) << e.what();
  }
  std::filesystem::remove(str("cache/process-facts.json"));
  anchor::fs::atomic_write_file(str("answer"), "no answer line\n");
  try {
    facts();
    ADD_FAILURE() << "no answer was accepted";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("printed no answer"), std::string::npos) << e.what();
  }
  try {
    training_process_facts(str("missing/anchor-torch"), "cpu", true, str("cache/process-facts.json"));
    ADD_FAILURE() << "a missing binary was accepted";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

}  // namespace
