#pragma once
// The operator recorder worker B profiles its last step with where LibTorch
// has no Kineto (Debian's 1.13) or Kineto refuses (docs/report.md,
// "profile.json"). No torch in this header.
#include <cstddef>
#include <cstdint>
#include <string>

namespace anchor::worker {

// What a recorder saw: a Chrome trace (a JSON array of complete events).
struct OpTrace {
  std::string json;
  std::size_t events = 0;
};

// Records every operator any thread of this process runs while it lives, as
// LibTorch announces them through its RecordFunction callbacks (the hooks its
// own profilers stand on): the name, the scope (operator, autograd node, user
// scope, ...), the thread that started it, start and length in the steady
// clock. For a step on one thread, the spans LibTorch's legacy profiler
// writes, at 0.6 microseconds an operator against its 4.3, trace text included
// (bench/bench_op_recorder.cpp); unlike it, it also sees threads LibTorch did
// not hand the step to (a process group's, a loader's). One recorder at a
// time in a process; an operator that began before it started is not in the
// trace, nor one that ends after finish().
class OpRecorder {
 public:
  // Starts recording; throws Error when another recorder is recording.
  OpRecorder();
  ~OpRecorder();  // stops recording when finish() was not called
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

  // Stops recording and returns the trace, events in the order they ended.
  OpTrace finish();

 private:
  std::uint64_t handle_ = 0;  // LibTorch's handle of the callback; 0 once removed
};

}  // namespace anchor::worker
