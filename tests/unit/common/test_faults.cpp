// The fault seams' registry (include/anchor/common/faults.hpp): one reader for
// the fixed-point variables, an unknown point or a malformed item refused with
// the points listed, and every ANCHOR_*FAULT the sources read is in the table
// and in docs/development.md.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "anchor/common/faults.hpp"
#include "anchor/error.hpp"

namespace faults = anchor::faults;

namespace {

std::string usage_error(std::string_view name, std::string_view value) {
  try {
    faults::parse(name, value);
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kUsage);
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Faults, EveryUsageInTheTableParsesToItsPointAndNumbers) {
  for (const auto& v : faults::variables()) {
    for (const auto& p : v.points) {
      // The usage with each <placeholder> replaced by a number.
      const std::string example = std::regex_replace(std::string(p.usage), std::regex("<[a-z]+>"), "7");
      const auto items = faults::parse(v.name, example);
      ASSERT_EQ(items.size(), 1u) << v.name << " " << example;
      EXPECT_EQ(items[0].point, p.name);
      EXPECT_EQ(items[0].args, std::vector<std::int64_t>(static_cast<std::size_t>(p.args), 7)) << example;
    }
  }
  const auto dist = faults::parse("ANCHOR_DIST_FAULT", "sigkill_save:1:12");
  EXPECT_EQ(dist[0].args, (std::vector<std::int64_t>{1, 12}));
  const auto list = faults::parse("ANCHOR_PILOT_FAULT", "drop_rng,wrong_step");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].point, "wrong_step");
  EXPECT_TRUE(faults::parse("ANCHOR_GRAD_FAULT", "").empty());
}

TEST(Faults, AnUnknownPointOrAMalformedItemIsRefusedWithThePointsListed) {
  const std::string typo = usage_error("ANCHOR_PILOT_FAULT", "drop_rgn");
  EXPECT_NE(typo.find("ANCHOR_PILOT_FAULT item 'drop_rgn': unknown point 'drop_rgn'"), std::string::npos) << typo;
  EXPECT_NE(typo.find("use drop_rng, drop_optimizer, wrong_step, drop_scaler, diverge_replica, profiler_refuses or "
                      "kineto_refuses, comma-separated"),
            std::string::npos)
      << typo;
  EXPECT_NE(usage_error("ANCHOR_GRAD_FAULT", "inf").find("inf takes 1 number(s), not 0: inf:<step>"),
            std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_GRAD_FAULT", "nan:-1").find("'-1' is not a non-negative integer"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_GRAD_FAULT", "nan:3x").find("'3x' is not"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_DIST_FAULT", "sigkill:1").find("sigkill takes 2 number(s), not 1"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_DIST_FAULT", "sigkill:1:2:3").find("not 3"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_DIST_FAULT", "sigkill:1:").find("'' is not"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_DIST_FAULT", "sigkill:0:1,sigkill:1:1").find("names 2 faults; it takes one"),
            std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_NODE_FAULT", "hide").find("unknown point 'hide'"), std::string::npos);
  EXPECT_NE(usage_error("ANCHOR_NODE_FAULT", "hide_run_dir:1").find("hide_run_dir takes 0"), std::string::npos);
  EXPECT_EQ(usage_error("ANCHOR_NODE_FAULT", "hide_run_dir"), "") << "the control: the right form parses";
  for (const char* stray : {",", "hide_run_dir,", ",hide_run_dir"})
    EXPECT_NE(usage_error("ANCHOR_NODE_FAULT", stray).find("has an empty item"), std::string::npos) << stray;
  EXPECT_NE(usage_error("ANCHOR_PILOT_FAULT", "drop_rng,,wrong_step").find("has an empty item"), std::string::npos);
  EXPECT_THROW(faults::variable("ANCHOR_NO_SUCH_FAULT"), std::logic_error);
  EXPECT_THROW(faults::parse("ANCHOR_FAULT", "begin:exit"), std::logic_error) << "the store reads its own grammar";
}

// Every fault variable a source file names is in the registry, and the docs
// list every registered one with each of its points. The control: the scan
// finds the variables the table has (it would find none if its pattern broke).
TEST(Faults, EveryVariableTheSourcesReadIsRegisteredAndDocumented) {
  const std::filesystem::path root = ANCHOR_SOURCE_DIR;
  std::set<std::string> named;
  const std::regex var("\"(ANCHOR_[A-Z_]*FAULT)\"");
  for (const char* dir : {"src", "include"})
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file() || e.path().filename() == "faults.cpp") continue;  // the table itself names them all
      const std::string text = read_all(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), var), end; it != end; ++it) named.insert((*it)[1]);
    }
  std::set<std::string> registered;
  for (const auto& v : faults::variables()) registered.insert(v.name);
  for (const auto& n : named) EXPECT_TRUE(registered.count(n)) << n << " is read but not in src/common/faults.cpp";
  EXPECT_GE(named.size(), 5u) << "the scan finds the registered variables where they are read";
  for (const auto& v : faults::variables())
    EXPECT_NE(read_all(root / v.reader).find(std::string("\"") + v.name + "\""), std::string::npos)
        << v.name << " is read in " << v.reader;
  const std::string doc = read_all(root / "docs/development.md");
  for (const auto& v : faults::variables()) {
    EXPECT_NE(doc.find(std::string("`") + v.name + "`"), std::string::npos) << v.name;
    for (const auto& p : v.points) EXPECT_NE(doc.find(std::string("`") + p.usage + "`"), std::string::npos) << p.usage;
  }
}
