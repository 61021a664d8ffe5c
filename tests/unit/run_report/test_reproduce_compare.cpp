// run_report::compare_reports on the resume section: the state digests are
// compared only when both reports made them the same way
// (resume.state_digest_scheme; docs/report.md, "anchor reproduce").
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "anchor/run_report/compare_reports.hpp"

namespace {

using nlohmann::json;

json report(const std::string& model_digest, const char* scheme) {
  json saved = {{"model", model_digest}, {"optimizer", "o"}, {"rng", "r"}, {"scaler", "s"}};
  json r;
  r["resume"]["verdict"] = "match";
  r["resume"]["state_digests"]["saved"] = saved;
  if (scheme) r["resume"]["state_digest_scheme"] = scheme;
  return r;
}

// The comparison as the re-run's report.json holds it (`reproduction`).
json compare(const json& a, const json& b) {
  return anchor::run_report::section_to_json(anchor::run_report::compare_reports(
      anchor::run_report::RunReport::from_json(a), anchor::run_report::RunReport::from_json(b), true, 0));
}

const json* check(const json& result, const std::string& name) {
  for (const auto& c : result["checks"])
    if (c["name"] == name) return &c;
  return nullptr;
}

TEST(ReproduceCompare, StateDigestsOfTheSameSchemeAreComparedAndOfAnotherAreNot) {
  const char* v2 = "anchor.state-digest/v2";
  // Same scheme: equal digests reproduce, a different model digest differs (bitwise).
  auto same = compare(report("m", v2), report("m", v2));
  EXPECT_EQ(same["verdict"], "reproduced") << same.dump(2);
  auto diff = compare(report("m", v2), report("x", v2));
  EXPECT_EQ(diff["verdict"], "differs") << diff.dump(2);
  ASSERT_NE(check(diff, "state saved: model"), nullptr) << diff.dump(2);
  EXPECT_FALSE((*check(diff, "state saved: model"))["ok"].get<bool>());

  // A report from before the scheme was named (v1) against a v2 re-run: the
  // digests differ for the same state, so they are not compared, and the check says why.
  auto old = compare(report("m", nullptr), report("x", v2));
  EXPECT_EQ(old["verdict"], "reproduced") << old.dump(2);
  EXPECT_EQ(check(old, "state saved: model"), nullptr) << old.dump(2);
  const json* why = check(old, "state digests");
  ASSERT_NE(why, nullptr) << old.dump(2);
  EXPECT_NE((*why)["detail"].get<std::string>().find("anchor.state-digest/v1"), std::string::npos);
  EXPECT_NE((*why)["detail"].get<std::string>().find("not compared"), std::string::npos);
}

}  // namespace
