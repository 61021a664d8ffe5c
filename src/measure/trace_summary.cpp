#include "anchor/measure/trace_summary.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "anchor/error.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"

namespace anchor::measure {
namespace {

constexpr std::uint64_t kMaxTraceBytes = 256ull << 20;

struct Span {
  double ts = 0, end = 0, child = 0;  // microseconds; child: the time of the spans directly inside it
  std::size_t op = 0;                 // index into the ops
};

// Operators and kernels: Kineto's cpu_op/kernel/gpu_memcpy/gpu_memset, anchor's
// recorder's operator, and the autograd profiler's spans (no category). Left
// out: Python frames, annotations (ProfilerStep#N) and runtime calls, which
// hold the operators rather than being them.
bool counted(const nlohmann::json& e, std::string& device) {
  const auto cat = e.find("cat");
  if (cat == e.end() || cat->is_null()) return device = "cpu", true;
  if (!cat->is_string()) return false;
  const std::string c = *cat;
  if (c == "cpu_op" || c == "operator" || c == "Operator") return device = "cpu", true;
  if (c == "kernel" || c == "Kernel" || c == "gpu_memcpy" || c == "gpu_memset" || c == "Memcpy" || c == "Memset")
    return device = "gpu", true;
  return false;
}

}  // namespace

TraceSummary summarize_trace(const std::string& path, std::size_t top_n) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTraceBytes)
    throw Error(ErrorKind::kConfig,
                printable(path) + " is " + std::to_string(size >> 20) + " MiB, more than a trace of one step (256 MiB)",
                "profile a shorter step (a smaller micro-batch)");
  nlohmann::json doc;
  try {
    doc = parse_json(fs::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kConfig, printable(path) + " is not JSON: " + e.what(),
                "it is written by the profiler of worker B's last step; run the pilot again");
  }
  const nlohmann::json* events = &doc;
  if (doc.is_object()) {
    const auto it = doc.find("traceEvents");
    if (it == doc.end()) throw Error(ErrorKind::kConfig, printable(path) + " has no traceEvents", "");
    events = &*it;
  }
  if (!events->is_array())
    throw Error(ErrorKind::kConfig, printable(path) + " is not a Chrome trace (no list of events)", "");
  std::vector<TraceOp> ops;
  std::map<std::pair<std::string, std::string>, std::size_t> index;  // (name, device) -> ops
  std::map<std::string, std::vector<Span>> threads;                  // "pid/tid" -> spans
  TraceSummary out;
  for (const auto& e : *events) {
    if (!e.is_object() || e.value("ph", std::string()) != "X") continue;
    const auto name = e.find("name"), ts = e.find("ts"), dur = e.find("dur");
    if (name == e.end() || !name->is_string() || ts == e.end() || !ts->is_number() || dur == e.end() ||
        !dur->is_number() || !(dur->get<double>() >= 0))
      continue;
    std::string device;
    if (!counted(e, device)) continue;
    const auto key = std::make_pair(printable(name->get<std::string>()), device);
    auto [it, fresh] = index.emplace(key, ops.size());
    if (fresh) ops.push_back({key.first, device, 0, 0, 0});
    const double t0 = ts->get<double>(), d = dur->get<double>();
    ops[it->second].total_s += d / 1e6;
    ops[it->second].calls += 1;
    const std::string thread = e.value("pid", nlohmann::json()).dump() + "/" + e.value("tid", nlohmann::json()).dump();
    threads[thread].push_back({t0, t0 + d, 0, it->second});
    ++out.spans;
  }
  // Self time per thread: spans sorted by start (the longer first on a tie), each nested
  // in the innermost open span that holds it whole.
  for (auto& thread : threads) {
    auto& spans = thread.second;
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
    std::vector<std::size_t> open;
    auto close = [&](std::size_t i) {
      ops[spans[i].op].self_s += std::max(0.0, (spans[i].end - spans[i].ts) - spans[i].child) / 1e6;
    };
    for (std::size_t i = 0; i < spans.size(); ++i) {
      while (!open.empty() && spans[open.back()].end <= spans[i].ts) close(open.back()), open.pop_back();
      if (!open.empty() && spans[i].end <= spans[open.back()].end) {
        spans[open.back()].child += spans[i].end - spans[i].ts;
      } else {
        while (!open.empty()) close(open.back()), open.pop_back();  // overlaps without nesting: a new top level
      }
      open.push_back(i);
    }
    while (!open.empty()) close(open.back()), open.pop_back();
  }
  for (const auto& op : ops) out.self_s += op.self_s;
  std::sort(ops.begin(), ops.end(), [](const TraceOp& a, const TraceOp& b) {
    return a.self_s != b.self_s ? a.self_s > b.self_s : a.name < b.name;
  });
  if (ops.size() > top_n) ops.resize(top_n);
  out.top = std::move(ops);
  return out;
}

}  // namespace anchor::measure
