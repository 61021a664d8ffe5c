#include "anchor/run_report/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>
#include <tuple>

#include "anchor/common/fs.hpp"
#include "anchor/common/utf8.hpp"

namespace anchor::run_report {

std::optional<double> event_time(const nlohmann::json& e) {
  auto it = e.find("time");
  if (it == e.end()) return std::nullopt;
  if (it->is_number()) {
    const double t = it->get<double>();
    return std::isfinite(t) && t > 0 ? std::optional<double>(t) : std::nullopt;
  }
  if (!it->is_string()) return std::nullopt;
  const std::string& s = it->get_ref<const std::string&>();
  std::tm tm{};
  int ms = 0, used = 0;
  if (s.size() != 24 ||
      std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms, &used) != 7 ||
      used != 24)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::tm asked = tm;
  const std::time_t t = timegm(&tm);
  // timegm rolls month 13 or second 61 into another date: the round trip must give the same fields.
  std::tm back{};
  if (t == static_cast<std::time_t>(-1) || !gmtime_r(&t, &back) || back.tm_year != asked.tm_year ||
      back.tm_mon != asked.tm_mon || back.tm_mday != asked.tm_mday || back.tm_hour != asked.tm_hour ||
      back.tm_min != asked.tm_min || back.tm_sec != asked.tm_sec)
    return std::nullopt;
  return static_cast<double>(t) + ms / 1000.0;
}

namespace {

// A number field within ±1e15 (a step count, seconds, a loss), or `fallback`.
double num(const nlohmann::json& e, const char* key, double fallback = 0) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return fallback;
  const double v = it->get<double>();
  return std::isfinite(v) && std::abs(v) <= 1e15 ? v : fallback;
}
// An integer field as text ("7"), whatever its size; "?" when it is not one.
std::string integer_text(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_number_integer() ? it->dump() : std::string("?");
}
// Stage and kill events come only from anchor's own processes: a user
// program's lines keep their fields (events.jsonl holds them as written), and
// one saying "stage" or "sigkill_sent" must not draw a stage or a kill.
bool anchors_own(const std::string& source) { return source == "supervisor" || source.rfind("worker-", 0) == 0; }
std::string str(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// How a source is shown: "worker-reference" is worker A, as the console says.
std::string process_label(const std::string& source) {
  if (source == "worker-reference") return "worker A (reference)";
  if (source == "worker-resume") return "worker B (resume)";
  if (source == "program-reference") return "program, worker A (reference)";
  if (source == "program-resume") return "program, worker B (resume)";
  if (source.rfind("program-", 0) == 0) return "program, " + source.substr(8);
  return source;
}

struct Builder {
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, int> pids;           // source -> trace pid, in order of appearance
  std::map<std::pair<int, int>, bool> tids;  // (pid, rank) seen
  std::map<int, double> last_ts;             // pid -> its last event's time (µs)
  // Open stages: (pid, rank, stage) -> start time (µs).
  std::map<std::tuple<int, int, std::string>, double> open;
  std::map<std::tuple<int, int, std::string, std::string>, double> open_ckpt;  // a program's saves/restores
  std::optional<double> t0;                                                    // Unix seconds of the first event

  int pid_of(const std::string& source) {
    auto [it, added] = pids.emplace(source, static_cast<int>(pids.size()) + 1);
    if (added)
      out.push_back({{"ph", "M"},
                     {"name", "process_name"},
                     {"pid", it->second},
                     {"tid", 0},
                     {"args", {{"name", process_label(source)}}}});
    return it->second;
  }
  void thread(int pid, int rank) {
    if (tids.emplace(std::make_pair(pid, rank), true).second)
      out.push_back({{"ph", "M"},
                     {"name", "thread_name"},
                     {"pid", pid},
                     {"tid", rank},
                     {"args", {{"name", "rank " + std::to_string(rank)}}}});
  }
  void span(int pid, int rank, const std::string& name, const char* cat, double ts, double dur,
            nlohmann::json args = nlohmann::json::object()) {
    out.push_back({{"ph", "X"},
                   {"name", name},
                   {"cat", cat},
                   {"pid", pid},
                   {"tid", rank},
                   {"ts", ts},
                   {"dur", std::max(0.0, dur)},
                   {"args", std::move(args)}});
  }
  void instant(int pid, int rank, const std::string& name, double ts, nlohmann::json args, bool global = false) {
    out.push_back({{"ph", "i"},
                   {"name", name},
                   {"cat", "event"},
                   {"pid", pid},
                   {"tid", rank},
                   {"ts", ts},
                   {"s", global ? "g" : "t"},
                   {"args", std::move(args)}});
  }

  void add(nlohmann::json e, double when) {
    if (!t0) t0 = when;
    const double ts = std::round((when - *t0) * 1e6);  // whole microseconds: the times are to the millisecond
    const std::string source = str(e, "source").empty() ? std::string("unknown") : str(e, "source");
    const int pid = pid_of(source);
    const int rank = static_cast<int>(std::clamp(num(e, "rank"), 0.0, 65535.0));
    thread(pid, rank);
    last_ts[pid] = std::max(last_ts[pid], ts);
    const bool own = anchors_own(source);
    const std::string stage = own ? str(e, "stage") : std::string(), type = str(e, "type");
    // A stage: the built-in worker's protocol line {"type": "stage", "phase": begin|end}, or the
    // supervisor's own record of a failed one {"stage", "event": "end"}.
    const std::string phase = str(e, "phase");
    const std::string event = own && type == "stage" ? (phase == "begin" ? "start" : phase) : str(e, "event");
    if (!stage.empty() && event == "start") {
      open[{pid, rank, stage}] = ts;
      return;
    }
    if (!stage.empty() && event == "end") {
      nlohmann::json args = {{"status", str(e, "status")}};
      if (e.contains("error")) args["error"] = e["error"];
      auto it = open.find({pid, rank, stage});
      if (it == open.end()) {  // the supervisor's end of a stage that failed elsewhere
        instant(pid, rank, stage + " " + (str(e, "status").empty() ? "ended" : str(e, "status")), ts, args);
        return;
      }
      const double start = it->second;
      open.erase(it);
      // From its start event's time to its end event's, both to the millisecond, so
      // stages of one process never overlap (Perfetto drops a span that overlaps
      // another without nesting in it); the worker's own clock of it in args.
      if (e.contains("seconds")) args["seconds"] = e["seconds"];
      span(pid, rank, stage, "stage", start, ts - start, args);
      return;
    }
    if (type == "step") {
      const double dur = (num(e, "data_wait_s") + num(e, "compute_s")) * 1e6;
      span(pid, rank, "step " + integer_text(e, "step"), "step", ts - dur, dur,
           {{"loss", e.value("loss", nlohmann::json())},
            {"data_wait_s", num(e, "data_wait_s")},
            {"compute_s", num(e, "compute_s")}});
      if (e.contains("loss") && e["loss"].is_number())
        out.push_back({{"ph", "C"},
                       {"name", "loss"},
                       {"pid", pid},
                       {"tid", rank},
                       {"ts", ts},
                       {"args", {{"rank " + std::to_string(rank), e["loss"]}}}});
      return;
    }
    if (type == "checkpoint") {
      const std::string op = str(e, "op").empty() ? std::string("checkpoint") : str(e, "op"), phase = str(e, "phase");
      const std::string step = integer_text(e, "step");
      const std::string name = op + " step " + step;
      if (phase == "begin") {
        open_ckpt[{pid, rank, step, op}] = ts;
        return;
      }
      if (phase == "end") {
        auto it = open_ckpt.find({pid, rank, step, op});
        // A restore begins before it knows which step it restores (the built-in worker's begin has no step).
        if (it == open_ckpt.end()) it = open_ckpt.find({pid, rank, std::string("?"), op});
        const double start = it != open_ckpt.end() ? it->second : ts - num(e, "seconds") * 1e6;
        if (it != open_ckpt.end()) open_ckpt.erase(it);
        span(pid, rank, name, "checkpoint", start, ts - start,
             {{"bytes", e.value("bytes", nlohmann::json())}, {"seconds", e.value("seconds", nlohmann::json())}});
        return;
      }
    }
    // Everything else is a moment: a worker started, its kill window, the SIGKILL, an error.
    std::string name = !event.empty() ? event : !type.empty() ? type : std::string("event");
    if (type == "checkpoint" && !str(e, "phase").empty()) name = str(e, "phase");
    for (const char* k : {"source", "time", "event", "type", "rank"}) e.erase(k);
    instant(pid, rank, name, ts, std::move(e), own && name == "sigkill_sent");
  }

  // Stages that never ended: drawn to their process's last event.
  void close_open() {
    for (const auto& [key, start] : open) {
      const auto& [pid, rank, stage] = key;
      span(pid, rank, stage, "stage", start, last_ts[pid] - start,
           {{"status", "did not end (the process was killed or failed)"}});
    }
    for (const auto& [key, start] : open_ckpt) {
      const auto& [pid, rank, step, op] = key;
      span(pid, rank, op + " step " + step, "checkpoint", start, last_ts[pid] - start,
           {{"status", "did not end (the process was killed or failed)"}});
    }
  }
};

}  // namespace

nlohmann::json chrome_trace(std::istream& in, std::size_t max_lines) {
  Builder b;
  std::size_t lines = 0, skipped = 0;
  bool truncated = false;
  std::string line;
  while (std::getline(in, line)) {
    if (++lines > max_lines) {
      truncated = true;
      break;
    }
    nlohmann::json e;
    try {
      e = parse_json(line);
    } catch (const std::exception&) {
      ++skipped;
      continue;
    }
    const auto when = e.is_object() ? event_time(e) : std::nullopt;
    if (!when) {
      ++skipped;
      continue;
    }
    b.add(std::move(e), *when);
  }
  b.close_open();
  // A span that began before the first event (a program's step, ending when
  // reported): the trace starts at the earliest time instead, so no ts is negative.
  double earliest = 0;
  for (const auto& e : b.out)
    if (e.contains("ts")) earliest = std::min(earliest, e["ts"].get<double>());
  if (earliest < 0) {
    for (auto& e : b.out)
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - earliest;
    *b.t0 += earliest / 1e6;
  }
  nlohmann::json other = {{"generator", "anchor"}, {"source", "events.jsonl"}, {"skipped_lines", skipped}};
  if (truncated) other["truncated"] = true;
  if (b.t0) other["start_unix_s"] = *b.t0;
  return {{"traceEvents", std::move(b.out)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
}

nlohmann::json write_trace(const std::string& run_dir) {
  const std::string events = run_dir + "/events.jsonl";
  struct stat st {};
  std::ifstream in;
  // Read as a stream, a line at a time (chrome_trace stops at a million lines);
  // a link or anything but a regular file is not read.
  if (::lstat(events.c_str(), &st) == 0 && S_ISREG(st.st_mode)) in.open(events);
  if (!in.is_open()) {
    std::istringstream none;
    return chrome_trace(none);
  }
  nlohmann::json trace = chrome_trace(in);
  fs::atomic_write_file(run_dir + "/trace.json", dump_json(trace) + "\n");
  return trace;
}

}  // namespace anchor::run_report
