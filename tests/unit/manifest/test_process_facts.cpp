// What a process that trains tells the manifest (process_facts.hpp): the JSON
// that anchor-torch __process-facts prints and the front end reads back (and
// caches), and what that reader refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "anchor/error.hpp"
#include "anchor/manifest/process_facts.hpp"

namespace {

using anchor::manifest::ProcessFacts;
using anchor::manifest::process_facts_from_json;
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
