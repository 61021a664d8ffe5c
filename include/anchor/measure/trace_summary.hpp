#pragma once
// What one profiled step spent its time in, read from its Chrome trace
// (profile.json): the operators and kernels with the most self time. Torch-free:
// it reads the file any profiler wrote (Kineto's {"traceEvents": [...]}, the
// autograd profiler's and anchor's operator recorder's bare array).
#include <cstdint>
#include <string>
#include <vector>

namespace anchor::measure {

struct TraceOp {
  std::string name;
  std::string device;  // "cpu" (an operator) or "gpu" (a kernel, a copy)
  double self_s = 0;   // its spans' time less the time of the spans nested in them on its thread
  double total_s = 0;  // its spans' time
  std::int64_t calls = 0;
};

struct TraceSummary {
  std::vector<TraceOp> top;  // by self time, most first
  std::int64_t spans = 0;    // operator and kernel spans read
  double self_s = 0;         // their self time in all
};

// The `top_n` operators and kernels of the trace at `path` by self time.
// Throws Error (kIo) when it cannot be read, (kConfig) when it is not a trace:
// the file is a worker's, so it is bounded (256 MiB) and parsed as untrusted.
TraceSummary summarize_trace(const std::string& path, std::size_t top_n);

}  // namespace anchor::measure
