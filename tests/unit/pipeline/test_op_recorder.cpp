// The operator recorder worker B profiles its last step with where LibTorch has
// no Kineto (src/pipeline/op_recorder.hpp; docs/report.md, "profile.json"):
// real LibTorch operators, recorded through LibTorch's RecordFunction hooks.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "anchor/error.hpp"
#include "pipeline/op_recorder.hpp"

namespace {

using anchor::pipeline::OpRecorder;
using nlohmann::json;

json parsed(const anchor::pipeline::OpTrace& t) {
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
