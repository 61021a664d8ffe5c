// The determinism control's judgement (include/anchor/protocol/determinism.hpp):
// how far two runs of the same steps are apart, and what that says about a
// resume that did not match. Each finding has its negative control.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "anchor/protocol/determinism.hpp"

namespace pp = anchor::protocol;

namespace {

const std::string kA(64, 'a'), kB(64, 'b');

std::string step_line(int s, const std::string& loss, const std::string& grad_norm = "0.5") {
  return R"({"type":"step","rank":0,"time":2,"step":)" + std::to_string(s) + R"(,"loss":)" + loss + R"(,"grad_norm":)" +
         grad_norm + R"(,"lr":0.001,"tokens":16})";
}
std::string save_digests(int s, const std::string& model) {
  return R"({"type":"digests","rank":0,"time":1.5,"when":"save","step":)" + std::to_string(s) +
         R"(,"components":{"model":")" + model + R"(","optimizer":")" + kB + R"("}})";
}

// A run of steps 3 and 4 after a save of 2: its losses, and its model at step 4.
pp::WorkerLog run(const std::string& loss3, const std::string& loss4, const std::string& model = kA) {
  pp::WorkerLog w;
  for (const auto& l : {step_line(2, "9"), step_line(3, loss3), step_line(4, loss4), save_digests(4, model)})
    w.add(pp::parse_event(l));
  return w;
}

pp::RunDifference difference(const pp::WorkerLog& a, const pp::WorkerLog& b) {
  pp::RunDifference d;
  d.add(a, b, 2, 4, 0);
  return d;
}

TEST(RunDifference, TheSameStepsBitwiseAreTheSame) {
  const auto d = difference(run("1.5", "1.25"), run("1.5", "1.25"));
  EXPECT_TRUE(d.same);
  EXPECT_EQ(d.max_relative, 0);
  EXPECT_EQ(d.steps, 2);  // step 2 is before the save: not compared
  EXPECT_TRUE(d.first.empty());
}

TEST(RunDifference, NamesTheFirstFigureAndTheLargestRelativeDifference) {
  const auto d = difference(run("1.0", "2.0"), run("1.0", "2.0002"));
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.first, "loss at step 4");
  EXPECT_NEAR(d.max_relative, 0.0002 / 2.0002, 1e-12);
  const auto g = difference(run("1.0", "2.0"), [] {
    pp::WorkerLog w;
    for (const auto& l : {step_line(3, "1.0", "0.75"), step_line(4, "2.0"), save_digests(4, kA)})
      w.add(pp::parse_event(l));
    return w;
  }());
  EXPECT_EQ(g.first, "grad norm at step 3");
}

TEST(RunDifference, AStateThatDiffersIsNamedAndAStepRunOnceIsUnbounded) {
  const auto d = difference(run("1.0", "2.0"), run("1.0", "2.0", kB));
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.max_relative, 0);  // no figure differs
  ASSERT_EQ(d.state.size(), 1u);
  EXPECT_EQ(d.state[0], "model");
  EXPECT_EQ(d.first, "the state at step 4: model");
  pp::WorkerLog short_run;
  short_run.add(pp::parse_event(step_line(3, "1.0")));
  const auto s = difference(run("1.0", "2.0"), short_run);
  EXPECT_FALSE(s.same);
  EXPECT_TRUE(std::isinf(s.max_relative));
  EXPECT_EQ(s.first, "step 4 run once");
  EXPECT_EQ(s.to_json()["max_relative"], "inf");
}

TEST(RunDifference, EveryRankCountsAndIsNamed) {
  pp::RunDifference d;
  d.add(run("1.0", "2.0"), run("1.0", "2.0"), 2, 4, 0);
  d.add(run("1.0", "2.0"), run("1.5", "2.0"), 2, 4, 1);
  EXPECT_EQ(d.first, "loss at step 3 (rank 1)");
  EXPECT_EQ(d.steps, 4);
}

TEST(SuggestTolerance, APowerOfTenWithAMargin) {
  EXPECT_EQ(pp::suggest_tolerance(0), 0);
  EXPECT_DOUBLE_EQ(pp::suggest_tolerance(3e-7), 1e-5);   // 4 x 3e-7 = 1.2e-6 -> 1e-5
  EXPECT_DOUBLE_EQ(pp::suggest_tolerance(2e-7), 1e-6);   // 8e-7 -> 1e-6
  EXPECT_DOUBLE_EQ(pp::suggest_tolerance(1e-20), 1e-6);  // never below a few float32 ulps
  EXPECT_TRUE(std::isinf(pp::suggest_tolerance(std::numeric_limits<double>::infinity())));
}

TEST(JudgeDeterminism, ARepeatableProgramMakesTheMismatchTheResumes) {
  const auto control = difference(run("1.0", "2.0"), run("1.0", "2.0"));
  const auto resume = difference(run("1.0", "2.0"), run("1.0", "2.5"));
  const auto v = pp::judge_determinism(control, resume, 2, 4);
  EXPECT_EQ(v.finding, pp::Finding::kRepeatable);
  EXPECT_STREQ(v.finding_name(), "repeatable");
  const auto w = v.words(false);
  EXPECT_NE(w.find("ran steps 3 to 4 a second time from the same save of step 2"), std::string::npos) << w;
  EXPECT_NE(w.find("comes from the resume, not from nondeterministic kernels"), std::string::npos) << w;
  EXPECT_FALSE(v.to_json().contains("suggested_tolerance"));
  EXPECT_NE(v.words(true).find("repeats itself from a restored state"), std::string::npos);
}

TEST(JudgeDeterminism, ARunToRunDifferenceThatHoldsTheResumesIsNondeterminism) {
  const auto control = difference(run("1.0", "2.0"), run("1.0", "2.000001"));  // ~5e-7
  const auto resume = difference(run("1.0", "2.0"), run("1.0", "2.0000008"));
  const auto v = pp::judge_determinism(control, resume, 2, 4);
  EXPECT_EQ(v.finding, pp::Finding::kNondeterministic);
  EXPECT_DOUBLE_EQ(v.suggested_tolerance, 1e-5);
  const auto w = v.words(false);
  EXPECT_NE(w.find("the two runs differ from each other: loss at step 4"), std::string::npos) << w;
  EXPECT_NE(w.find("Set pilot.tolerance: 1e-05"), std::string::npos) << w;
  EXPECT_NE(w.find("is within it"), std::string::npos) << w;
  EXPECT_EQ(v.to_json()["suggested_tolerance"], 1e-5);
}

TEST(JudgeDeterminism, AResumeThatDiffersByMoreIsBoth) {
  const auto control = difference(run("1.0", "2.0"), run("1.0", "2.000001"));
  const auto resume = difference(run("1.0", "2.0"), run("1.0", "3.0"));
  const auto v = pp::judge_determinism(control, resume, 2, 4);
  EXPECT_EQ(v.finding, pp::Finding::kBoth);
  EXPECT_STREQ(v.finding_name(), "nondeterministic and resume");
  EXPECT_NE(v.words(false).find("the resume differs from the uninterrupted run by more (loss at step 4"),
            std::string::npos)
      << v.words(false);
}

TEST(JudgeDeterminism, AControlThatDiffersOnlyInItsStateAsksForTheFloor) {
  const auto control = difference(run("1.0", "2.0"), run("1.0", "2.0", kB));
  const auto resume = difference(run("1.0", "2.0"), run("1.0", "2.0", kB));
  const auto v = pp::judge_determinism(control, resume, 2, 4);
  EXPECT_EQ(v.finding, pp::Finding::kNondeterministic);
  EXPECT_DOUBLE_EQ(v.suggested_tolerance, 1e-6);
  EXPECT_NE(v.words(false).find("in the state only"), std::string::npos) << v.words(false);
  // A resume whose figures differ in their last bits is within it: one sample of the control may show none.
  const auto last_bits = difference(run("1.0", "2.0"), run("1.0", "2.0000002"));
  EXPECT_EQ(pp::judge_determinism(control, last_bits, 2, 4).finding, pp::Finding::kNondeterministic);
}

}  // namespace
