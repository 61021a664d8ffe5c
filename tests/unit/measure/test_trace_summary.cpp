// The profiled step's top operators (src/measure/trace_summary.cpp): self
// time from nesting on each thread, kernels apart from operators, both trace
// shapes the profilers write, and a file that is not a trace refused.
#include "anchor/measure/trace_summary.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "anchor/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using anchor::measure::summarize_trace;

std::string write(anchor::testing::TempDir& t, const std::string& name, const std::string& text) {
  std::string path = t.str(name);
  std::ofstream(path) << text;
  return path;
}

TEST(TraceSummary, SelfTimeIsWhatNestedSpansLeave) {
  anchor::testing::TempDir t("trace");
  // Thread 1: linear (0-100 us) holds addmm (10-70) which holds mm (20-60); another mm at 80-90.
  // Thread 2: an mm (0-50) alone. A kernel on the GPU (30 us), a Python frame and an annotation left out.
  const auto path = write(t, "profile.json", R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 10, "dur": 60},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 80, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 50},
    {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 25, "dur": 30},
    {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1, "tid": 1, "ts": 0, "dur": 500},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#8", "pid": 1, "tid": 1, "ts": 0, "dur": 500},
    {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 5},
    {"ph": "X", "cat": "cpu_op", "name": "no duration", "pid": 1, "tid": 1, "ts": 5}
  ]})");
  const auto s = summarize_trace(path, 10);
  ASSERT_EQ(s.top.size(), 4u);
  EXPECT_EQ(s.spans, 6);
  EXPECT_EQ(s.top[0].name, "aten::mm");
  EXPECT_NEAR(s.top[0].self_s, 100e-6, 1e-12) << "40 + 10 + 50: three calls, two threads";
  EXPECT_EQ(s.top[0].calls, 3);
  EXPECT_EQ(s.top[1].name, "aten::linear");
  EXPECT_NEAR(s.top[1].self_s, 30e-6, 1e-12) << "100 less addmm's 60 and the second mm's 10";
  EXPECT_NEAR(s.top[1].total_s, 100e-6, 1e-12);
  EXPECT_EQ(s.top[2].name, "sm90_gemm");
  EXPECT_EQ(s.top[2].device, "gpu");
  EXPECT_EQ(s.top[3].name, "aten::addmm");
  EXPECT_NEAR(s.top[3].self_s, 20e-6, 1e-12);
  EXPECT_NEAR(s.self_s, 180e-6, 1e-12) << "the self times add up to the top-level spans' time";
  EXPECT_EQ(summarize_trace(path, 2).top.size(), 2u);
}

TEST(TraceSummary, ReadsTheBareArrayOfTheAutogradProfilerAndTheRecorder) {
  anchor::testing::TempDir t("trace");
  const auto path = write(t, "profile.json", R"([
    {"name": "aten::mm", "ph": "X", "ts": 150, "dur": 132, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::empty", "cat": "operator", "ph": "X", "ts": 160, "dur": 5, "tid": 1, "pid": "CPU operators"}
  ])");
  const auto s = summarize_trace(path, 10);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].name, "aten::mm");
  EXPECT_NEAR(s.top[0].self_s, 132e-6, 1e-12) << "another pid: not nested in it";
}

TEST(TraceSummary, RefusesWhatIsNotATrace) {
  anchor::testing::TempDir t("trace");
  for (const auto& [name, text] : std::initializer_list<std::pair<const char*, const char*>>{
           {"not-json", "{\"traceEvents\": ["},
           {"no-events", "{\"other\": 1}"},
           {"scalar", "42"},
           {"deep",
            "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
            "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}}) {
    SCOPED_TRACE(name);
    try {
      summarize_trace(write(t, name, text), 10);
      ADD_FAILURE() << "read as a trace";
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig) << e.what();
    }
  }
  try {
    summarize_trace(t.str("missing.json"), 10);
    ADD_FAILURE() << "a missing file read";
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kIo) << e.what();
  }
}

}  // namespace
