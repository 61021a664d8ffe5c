// The operator recorder worker B profiles its last step with where LibTorch has
// no Kineto (src/worker/op_recorder.hpp; docs/report.md, "profile.json"):
// real LibTorch operators, recorded through LibTorch's RecordFunction hooks.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "anchor/error.hpp"
#include "worker/op_recorder.hpp"

namespace {

using anchor::worker::OpRecorder;
using nlohmann::json;

json parsed(const anchor::worker::OpTrace& t) {
  json j = json::parse(t.json);
  EXPECT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), t.events);
  return j;
}

std::size_t named(const json& trace, const std::string& name) {
  std::size_t n = 0;
  for (const auto& e : trace) n += e["name"] == name;
  return n;
}

// A forward and backward pass: every operator a complete span with a time and
// a length, the forward's matmul and the autograd node that differentiates it.
TEST(OpRecorder, RecordsEveryOperatorOfAForwardAndBackwardAsASpan) {
  auto a = torch::randn({8, 8}, torch::requires_grad());
  OpRecorder rec;
  auto loss = torch::mm(a, a).sum();
  loss.backward();
  const json trace = parsed(rec.finish());
  ASSERT_GT(trace.size(), 5u);
  std::set<std::string> cats;
  for (const auto& e : trace) {
    EXPECT_EQ(e["ph"], "X") << e;
    EXPECT_TRUE(e["ts"].is_number() && e["ts"].get<double>() >= 0) << e;
    EXPECT_TRUE(e["dur"].is_number() && e["dur"].get<double>() >= 0) << e;
    EXPECT_FALSE(e["name"].get<std::string>().empty()) << e;
    cats.insert(e["cat"].get<std::string>());
  }
  // Forward mm, and MmBackward's two products (the same operator, recorded each time).
  EXPECT_GE(named(trace, "aten::mm"), 3u) << trace.dump();
  bool backward_node = false;
  for (const auto& e : trace)
    backward_node |= e["cat"] == "autograd" && e["name"].get<std::string>().find("MmBackward") != std::string::npos;
  EXPECT_TRUE(backward_node) << trace.dump();
  EXPECT_TRUE(cats.count("operator") && cats.count("autograd"));
}

// Operators before the recorder starts and after it finishes are not in its
// trace (control: the same operator inside it is).
TEST(OpRecorder, RecordsOnlyWhileItRecords) {
  auto a = torch::ones({4, 4});
  (void)torch::mm(a, a);
  std::optional<OpRecorder> rec;
  rec.emplace();
  (void)torch::add(a, a);
  const json trace = parsed(rec->finish());
  (void)torch::mm(a, a);
  EXPECT_EQ(named(trace, "aten::mm"), 0u) << trace.dump();
  EXPECT_GE(named(trace, "aten::add"), 1u) << trace.dump();
}

// One recorder at a time; one dropped without finish() stops recording, so
// the next starts.
TEST(OpRecorder, OneAtATimeAndADroppedOneStops) {
  {
    OpRecorder first;
    EXPECT_THROW(OpRecorder second, anchor::Error);
  }
  OpRecorder again;
  auto a = torch::ones({2, 2});
  (void)torch::mm(a, a);
  const json trace = parsed(again.finish());
  EXPECT_EQ(named(trace, "aten::mm"), 1u) << trace.dump();
  EXPECT_THROW(again.finish(), anchor::Error) << "finished already";
}

// Another thread's operators are recorded as that thread's.
TEST(OpRecorder, EachThreadIsItsOwnTrack) {
  OpRecorder rec;
  auto a = torch::ones({3, 3});
  (void)torch::mm(a, a);
  std::thread([&] { (void)torch::mm(a, a); }).join();
  const json trace = parsed(rec.finish());
  std::set<int> tids;
  for (const auto& e : trace)
    if (e["name"] == "aten::mm") tids.insert(e["tid"].get<int>());
  EXPECT_EQ(tids.size(), 2u) << trace.dump();
}

// Times are microseconds from the first span: a scope that sleeps 2 ms lasts
// at least 2,000 and no longer than the wall time around it, and the operator
// run inside it lies inside it.
TEST(OpRecorder, SpansAreInMicrosecondsAndNest) {
  OpRecorder rec;
  const auto t0 = std::chrono::steady_clock::now();
  {
    RECORD_USER_SCOPE("sleeps");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    (void)torch::ones({2});
  }
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const json trace = parsed(rec.finish());
  json outer, inner;
  for (const auto& e : trace) {
    if (e["name"] == "sleeps") outer = e;
    if (e["name"] == "aten::ones") inner = e;
  }
  ASSERT_TRUE(outer.is_object() && inner.is_object()) << trace.dump();
  const double ots = outer["ts"], odur = outer["dur"], its = inner["ts"], idur = inner["dur"];
  EXPECT_GE(odur, 2000.0) << outer;
  EXPECT_LE(odur, wall_us) << outer;
  EXPECT_GE(its, ots) << trace.dump();
  EXPECT_LE(its + idur, ots + odur + 0.001) << trace.dump();
}

// An operator that started in one recording and ends in the next (or after
// the last) is in neither trace.
TEST(OpRecorder, AnOperatorThatOutlivesItsRecordingIsInNoTrace) {
  std::optional<OpRecorder> first;
  first.emplace();
  auto late = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  ASSERT_TRUE(late->isActive()) << "the recorder's callback is on";
  late->before("outlives", c10::ArrayRef<const c10::IValue>{});  // as RECORD_USER_SCOPE begins one
  const json one = parsed(first->finish());
  first.reset();
  OpRecorder second;
  late.reset();  // its end runs now, in the second recording
  (void)torch::ones({1});
  const json two = parsed(second.finish());
  EXPECT_EQ(named(one, "outlives"), 0u) << one.dump();
  EXPECT_EQ(named(two, "outlives"), 0u) << two.dump();
  EXPECT_EQ(named(two, "aten::ones"), 1u) << two.dump();
}

// A user scope's name is whatever the program says: the trace stays valid
// JSON (quotes, backslashes, control bytes, bytes that are not UTF-8).
TEST(OpRecorder, AnyScopeNameKeepsTheTraceValidJson) {
  const std::string name = std::string("step \"7\"\\\n\x01 ") + "\xff\xfe";
  OpRecorder rec;
  {
    RECORD_USER_SCOPE(name.c_str());
    (void)torch::ones({1});
  }
  const json trace = parsed(rec.finish());
  bool found = false;
  for (const auto& e : trace) {
    const auto n = e["name"].get<std::string>();
    found |= e["cat"] == "user_scope" && n.find("step \"7\"\\\n") == 0;
  }
  EXPECT_TRUE(found) << trace.dump();
}

}  // namespace
