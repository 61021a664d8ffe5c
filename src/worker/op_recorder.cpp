#include "op_recorder.hpp"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Span {
  std::string name;
  std::int64_t start_ns = 0, end_ns = 0;
  std::uint32_t thread = 0;
  at::RecordScope scope = at::RecordScope::FUNCTION;
};

// LibTorch calls the callbacks through plain function pointers, from any
// thread: the recording is the process's, under one lock. Each recording has
// its own generation: an operator keeps the one it started in, so one that
// ends in a later recording (or after the last) is not that recording's.
std::mutex g_mu;
bool g_recording = false;
std::atomic<std::uint64_t> g_generation{0};  // changed under g_mu; read without it at a start
std::vector<Span> g_spans;

// Threads numbered 1, 2, ... in the order they first started an operator anywhere in the process.
std::uint32_t this_thread_number() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t number = next.fetch_add(1);
  return number;
}

// What an operator's start leaves for its end (LibTorch owns and frees it).
struct Started final : at::ObserverContext {
  std::uint64_t generation = 0;
  std::uint32_t thread = 0;  // the thread that started it: its track, wherever it ends
  std::int64_t start_ns = 0;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& /*fn*/) {
  auto started = std::make_unique<Started>();
  started->generation = g_generation.load();
  started->thread = this_thread_number();
  started->start_ns = now_ns();
  return started;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  const std::int64_t end = now_ns();
  if (ctx == nullptr) return;  // its start failed
  const auto& started = *static_cast<const Started*>(ctx);
  Span s;
  s.start_ns = started.start_ns;
  s.end_ns = end;
  s.name = fn.name() != nullptr ? fn.name() : "";
  s.thread = started.thread;
  s.scope = fn.scope();
  std::lock_guard<std::mutex> lock(g_mu);
  // LibTorch catches what this throws.
  if (g_recording && started.generation == g_generation.load()) g_spans.push_back(std::move(s));
}

const char* scope_name(at::RecordScope s) {
  switch (s) {
    case at::RecordScope::FUNCTION: return "operator";
    case at::RecordScope::BACKWARD_FUNCTION: return "autograd";
    case at::RecordScope::USER_SCOPE: return "user_scope";
    case at::RecordScope::TORCHSCRIPT_FUNCTION: return "torchscript";
    default: return "other";
  }
}

}  // namespace

OpRecorder::OpRecorder() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_recording) throw Error(ErrorKind::kRuntime, "an operator recorder is already recording in this process");
  ++g_generation;
  g_spans.clear();
  g_spans.reserve(1u << 15);
  // Every scope; no inputs, outputs or ids: only what the trace shows.
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end).needsInputs(false).needsIds(false));
  g_recording = true;
}

OpRecorder::~OpRecorder() {
  if (handle_ == 0) return;
  at::removeCallback(handle_);
  std::lock_guard<std::mutex> lock(g_mu);
  g_recording = false;
  std::vector<Span>().swap(g_spans);  // its memory too
}

OpTrace OpRecorder::finish() {
  if (handle_ == 0) throw Error(ErrorKind::kRuntime, "the operator recorder has finished already");
  at::removeCallback(handle_);
  handle_ = 0;
  std::vector<Span> spans;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_recording = false;
    spans.swap(g_spans);
  }
  std::int64_t t0 = spans.empty() ? 0 : spans.front().start_ns;
  for (const auto& s : spans) t0 = std::min(t0, s.start_ns);
  std::unordered_map<std::string, std::string> quoted;  // a few hundred distinct names
  OpTrace out;
  out.json.reserve(spans.size() * 110 + 2);
  out.json += '[';
  for (const auto& s : spans) {
    auto q = quoted.find(s.name);
    if (q == quoted.end()) q = quoted.emplace(s.name, dump_json(nlohmann::json(s.name))).first;
    if (out.events > 0) out.json += ",\n";
    // Chrome's trace format counts in microseconds: ns / 1000 with three decimals.
    fmt::format_to(std::back_inserter(out.json),
                   R"({{"name":{},"cat":"{}","ph":"X","ts":{}.{:03d},"dur":{}.{:03d},"pid":"CPU operators","tid":{}}})",
                   q->second, scope_name(s.scope), (s.start_ns - t0) / 1000, static_cast<int>((s.start_ns - t0) % 1000),
                   (s.end_ns - s.start_ns) / 1000, static_cast<int>((s.end_ns - s.start_ns) % 1000), s.thread);
    ++out.events;
  }
  out.json += "]";
  return out;
}

}  // namespace anchor::worker
