// What profiling a step costs where LibTorch has no Kineto: anchor's operator
// recorder (src/worker/op_recorder.hpp) against LibTorch's legacy profiler
// (RecordProfile, which it replaces in worker B), on the same work in the same
// process, taking turns rep by rep (docs/benchmarks.md, issue 16).
//
//   bench_op_recorder [--ops N] [--reps R] [--width W] [--threads T]
//
// Two workloads: N small operators with a backward pass (the per-operator
// cost, which is what a profiler adds), and a step of a 4-layer MLP of width W
// with a backward pass (how much of a real step that is). Prints the median
// time of each (plain, legacy, recorder), the events each profiler recorded,
// the cost per event over plain and the ratio recorder / legacy. Exit 1 when
// the two record different operators (names, counted) on the small-operator work.
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "worker/op_recorder.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  std::vector<double> plain, legacy, recorder;
  std::size_t legacy_events = 0, recorder_events = 0;
  std::vector<std::string> legacy_names, recorder_names;  // of the last rep, sorted
};

std::vector<std::string> sorted_names(const std::string& trace) {
  std::vector<std::string> names;
  for (const auto& e : nlohmann::json::parse(trace)) names.push_back(e.value("name", ""));
  std::sort(names.begin(), names.end());
  return names;
}

Row measure(const std::function<void()>& work, int reps) {
  Row r;
  work();  // warm: first-call costs belong to none of the three
  for (int i = 0; i < reps; ++i) {
    r.plain.push_back(seconds(work));
    std::ostringstream out;
    r.legacy.push_back(seconds([&] {
      torch::autograd::profiler::RecordProfile guard(out);
      work();
    }));  // the guard writes its trace as it goes: part of what that profiler costs
    r.legacy_names = sorted_names(out.str());  // read outside the time
    r.legacy_events = r.legacy_names.size();
    std::string text;
    r.recorder.push_back(seconds([&] {
      anchor::worker::OpRecorder rec;
      work();
      text = rec.finish().json;  // the trace's text is made here: part of the recorder's cost
    }));
    r.recorder_names = sorted_names(text);
    r.recorder_events = r.recorder_names.size();
  }
  return r;
}

void print(const char* what, const Row& r) {
  const double p = median(r.plain), l = median(r.legacy), c = median(r.recorder);
  const double per_l = r.legacy_events ? (l - p) / static_cast<double>(r.legacy_events) * 1e6 : 0;
  const double per_c = r.recorder_events ? (c - p) / static_cast<double>(r.recorder_events) * 1e6 : 0;
  fmt::print("  {:<34} {:>9.4f} {:>9.4f} {:>9.4f}   {:>7} {:>7}   {:>6.2f} {:>6.2f}   {:.2f}x\n", what, p, l, c,
             r.legacy_events, r.recorder_events, per_l, per_c, l > 0 ? c / l : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int ops = 5000, reps = 5, width = 512, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--ops")
      ops = v;
    else if (a == "--reps")
      reps = v;
    else if (a == "--width")
      width = v;
    else if (a == "--threads")
      threads = v;
    else {
      fmt::print(stderr, "bench_op_recorder: unknown option {} (see the file's head)\n", a);
      return 2;
    }
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);

  auto small = [&] {
    auto a = torch::ones({8}, torch::requires_grad());
    auto x = a;
    for (int i = 0; i < ops; ++i) x = x * 1.0001 + 0.0;
    x.sum().backward();
  };
  std::vector<torch::Tensor> w;
  w.reserve(4);
  for (int i = 0; i < 4; ++i) w.push_back((torch::randn({width, width}) * 0.02).requires_grad_());
  auto step = [&] {
    auto x = torch::randn({1024, width});
    for (auto& m : w) x = x + torch::gelu(torch::layer_norm(x, {width}).matmul(m));
    x.pow(2).mean().backward();
    for (auto& m : w) m.mutable_grad().zero_();
  };

  fmt::print("bench_op_recorder: LibTorch {}, {} threads, median of {} reps (interleaved)\n", TORCH_VERSION, threads,
             reps);
  fmt::print("  {:<34} {:>9} {:>9} {:>9}   {:>7} {:>7}   {:>6} {:>6}   {}\n", "work (s)", "plain", "legacy", "recorder",
             "ev.leg", "ev.rec", "us/ev", "us/ev", "recorder/legacy");
  const Row a = measure(small, reps);
  print(fmt::format("{} small operators + backward", ops).c_str(), a);
  const Row b = measure(step, reps);
  print(fmt::format("MLP step, 4 x {} wide, 1024 rows", width).c_str(), b);
  if (a.legacy_names != a.recorder_names) {
    fmt::print(stderr,
               "bench_op_recorder: the legacy profiler recorded {} operators, the recorder {}, not the same names\n",
               a.legacy_events, a.recorder_events);
    return 1;
  }
  return 0;
}
