#include "diff_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <sstream>
#include <utility>

#include "anchor/common/units.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/plan/plan_doc.hpp"
#include "anchor/run_report/compare_reports.hpp"
#include "anchor/run_report/run_report.hpp"

namespace anchor::cli {

namespace {

using run_report::Opt;
using run_report::or_empty;
using run_report::RunReport;
using Json = nlohmann::json;

// A figure as a table shows it: "" where the run lacks it.
std::string figure_text(const Opt<double>& v, bool bytes) {
  if (!v || !std::isfinite(*v)) return "";
  if (bytes) return human_bytes(*v);
  char s[32];
  std::snprintf(s, sizeof s, "%.4g", *v);
  return s;
}

template <class T>
Opt<double> as_double(const Opt<T>& v) {
  return v ? Opt<double>(static_cast<double>(*v)) : Opt<double>();
}

SideBySide measured(const std::string& name, const Opt<double>& a, const Opt<double>& b, bool bytes = false) {
  SideBySide r{name, figure_text(a, bytes), figure_text(b, bytes)};
  if (a && b && *a > 0 && *b > 0 && std::isfinite(*a) && std::isfinite(*b)) r.ratio = *b / *a;
  r.same = r.a == r.b;
  return r;
}

SideBySide found(const std::string& name, const std::string& a, const std::string& b) {
  return {name, printable(a), printable(b), 0, a == b};
}

std::string joined(const Opt<std::vector<std::string>>& v) {
  std::string out;
  for (const auto& s : or_empty(v)) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string resume_text(const RunReport& r) {
  const auto& res = or_empty(r.resume);
  if (!res.verdict) return "";
  std::string t = *res.verdict + (res.mode ? " (" + *res.mode + ")" : "");
  const std::string cause = joined(res.cause);
  return cause.empty() ? t : t + ": " + cause;
}

std::vector<SideBySide> verdict_rows(const RunReport& a, const RunReport& b) {
  const auto exit_text = [](const RunReport& r) { return r.exit_code ? std::to_string(*r.exit_code) : ""; };
  const auto world = [](const RunReport& r) {
    const auto& d = or_empty(r.distributed);
    return d.world_size ? std::to_string(*d.world_size) : std::string("1");
  };
  return {found("status", a.status.value_or(""), b.status.value_or("")),
          found("exit code", exit_text(a), exit_text(b)),
          found("resume", resume_text(a), resume_text(b)),
          found("precision", or_empty(a.precision).verdict.value_or(""), or_empty(b.precision).verdict.value_or("")),
          found("device", a.device.value_or(""), b.device.value_or("")),
          found("ranks", world(a), world(b)),
          found("anchor", or_empty(a.anchor).version.value_or(""), or_empty(b.anchor).version.value_or(""))};
}

std::vector<SideBySide> measurement_rows(const RunReport& a, const RunReport& b) {
  const auto &ma = or_empty(a.measurements), &mb = or_empty(b.measurements);
  const auto &sa = or_empty(ma.step), &sb = or_empty(mb.step);
  const auto &mema = or_empty(ma.memory), &memb = or_empty(mb.memory);
  const auto &peak_a = or_empty(mema.step), &peak_b = or_empty(memb.step);
  const auto &ca = or_empty(ma.checkpoint_save), &cb = or_empty(mb.checkpoint_save);
  const auto &ra = or_empty(ma.restore), &rb = or_empty(mb.restore);
  const auto &ea = or_empty(a.eval), &eb = or_empty(b.eval);
  return {
      measured("step seconds", sa.seconds, sb.seconds),
      measured("tokens/s (one rank)", sa.tokens_per_s, sb.tokens_per_s),
      measured("tokens/s (all ranks)", sa.tokens_per_s_all_ranks, sb.tokens_per_s_all_ranks),
      measured("data stall %", sa.stall_percent, sb.stall_percent),
      measured("communication seconds", sa.comm_s, sb.comm_s),
      measured("MFU estimate", sa.mfu_estimate, sb.mfu_estimate),
      measured("peak allocated", as_double(peak_a.peak_allocated_bytes), as_double(peak_b.peak_allocated_bytes), true),
      measured("peak reserved", as_double(peak_a.peak_reserved_bytes), as_double(peak_b.peak_reserved_bytes), true),
      measured("device total", as_double(mema.device_total_bytes), as_double(memb.device_total_bytes), true),
      measured("checkpoint bytes", as_double(ca.bytes), as_double(cb.bytes), true),
      measured("checkpoint save seconds", ca.seconds, cb.seconds),
      measured("restore seconds", ra.seconds, rb.seconds),
      measured("eval loss before save", ea.before_save, eb.before_save),
      measured("eval loss after restore", ea.after_restore, eb.after_restore)};
}

std::vector<SideBySide> plan_rows(const RunReport& a, const RunReport& b) {
  const auto rec = [](const RunReport& r) {
    return or_empty(plan::doc::plan_from_json(r.plan.value_or(Json())).recommendation);
  };
  const auto ra = rec(a), rb = rec(b);
  const auto count = [](const Opt<std::int64_t>& v) { return v ? std::to_string(*v) : std::string(); };
  return {found("device", ra.device.value_or(""), rb.device.value_or("")),
          found("GPUs", count(ra.gpus), count(rb.gpus)),
          found("strategy", ra.strategy.value_or(""), rb.strategy.value_or("")),
          found("term", ra.term.value_or(""), rb.term.value_or("")),
          measured("days", ra.days, rb.days),
          measured("cost", ra.cost, rb.cost),
          found("paid", ra.pricing.value_or(ra.cheaper_term.value_or("")),
                rb.pricing.value_or(rb.cheaper_term.value_or("")))};
}

// A run's effective config as a Config: the `now` side of config::diff.
config::Config config_of(const RunReport& r, const std::string& base, const char* which) {
  if (!r.config || !r.config->is_object())
    throw Error(ErrorKind::kUsage, std::string("run ") + which + ": its report holds no config object",
                "give the report.json (or report.intoto.json, or the run directory) an `anchor pilot` wrote");
  try {
    return config::from_json(*r.config, base);
  } catch (const Error& e) {
    throw Error(ErrorKind::kUsage,
                std::string("run ") + which + ": its report's config is not one anchor reads: " + e.what(),
                "give a report an `anchor pilot` wrote, unedited");
  }
}

}  // namespace

bool RunDiff::differs() const {
  for (const auto& d : config)
    if (d.decides_result) return true;
  if (!pins.empty() || !figure_differences.empty()) return true;
  for (const auto& v : verdict)
    if (!v.same && (v.name == "status" || v.name == "resume")) return true;
  return false;
}

RunDiff diff_runs(const nlohmann::json& ja, const std::string& base_a, const nlohmann::json& jb,
                  const std::string& base_b) {
  const RunReport a = RunReport::from_json(ja), b = RunReport::from_json(jb);
  RunDiff d;
  (void)config_of(a, base_a, "A");  // A's config must read too: the same check on both sides
  d.config = config::diff(*a.config, base_a, config_of(b, base_b, "B"));
  try {
    d.pins = manifest::compare(ja.value("manifest", nlohmann::json::object()),
                               jb.value("manifest", nlohmann::json::object()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kUsage, std::string("a report's manifest is not one anchor writes: ") + e.what(),
                "give reports an `anchor pilot` wrote, unedited");
  }
  d.verdict = verdict_rows(a, b);
  d.measurements = measurement_rows(a, b);
  d.plan = plan_rows(a, b);
  // Every recorded step, the evals and the state digests, bitwise, as `anchor reproduce` compares
  // a re-run with its original: here A is the original.
  const auto found = run_report::compare_reports(a, b, /*bitwise=*/true, 0.0);
  for (const auto& c : or_empty(found.checks)) {
    ++d.figures_compared;
    if (c.ok.value_or(false)) continue;
    std::string detail = c.detail.value_or("");
    for (const auto& [from, to] : {std::pair<const char*, const char*>{"original ", "A "}, {"re-run ", "B "}})
      if (const auto at = detail.find(from); at != std::string::npos) detail.replace(at, std::strlen(from), to);
    d.figure_differences.push_back(printable(c.name.value_or("") + ": " + detail));
  }
  return d;
}

namespace {

// Aligned columns, two spaces apart, indented by two.
// Cells for a terminal (for_terminal: a report's strings may hold escapes), aligned.
std::string table(std::vector<std::vector<std::string>> rows) {
  for (auto& r : rows)
    for (auto& cell : r) cell = for_terminal(cell);
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::ostringstream out;
  for (const auto& r : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < r.size(); ++i)
      line += " " + r[i] + (i + 1 < r.size() ? std::string(width[i] - r[i].size() + 1, ' ') : "");
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

std::string ratio_text(double r) {
  if (r <= 0) return "";
  char s[32];
  std::snprintf(s, sizeof s, "%.2fx", r);
  return s;
}

std::string side_by_side(const std::vector<SideBySide>& rows, bool ratios) {
  std::vector<std::vector<std::string>> t{{"WHAT", "A", "B"}};
  if (ratios) t[0].push_back("B/A");
  for (const auto& r : rows) {
    if (r.a.empty() && r.b.empty()) continue;  // neither run has it
    t.push_back({r.name, r.a.empty() ? "-" : r.a, r.b.empty() ? "-" : r.b});
    if (ratios)
      t.back().push_back(ratio_text(r.ratio));
    else if (!r.same)
      t.back().back() += "   (differs)";
  }
  return table(t);
}

std::string json_text(const nlohmann::json& v) { return v.is_null() ? "(absent)" : printable(v.dump()); }

}  // namespace

std::string diff_runs_text(const RunDiff& d, const std::string& name_a, const std::string& name_b) {
  std::ostringstream out;
  out << "A: " << for_terminal(name_a) << "\nB: " << for_terminal(name_b) << "\n\nOutcome\n"
      << side_by_side(d.verdict, false);
  std::size_t deciding = 0;
  for (const auto& c : d.config) deciding += c.decides_result ? 1 : 0;
  out << "\nConfig: ";
  if (d.config.empty()) {
    out << "the same effective config\n";
  } else {
    out << d.config.size() << " key(s) differ, " << deciding << " decide the result\n";
    std::vector<std::vector<std::string>> t{{"KEY", "A", "B", ""}};
    for (const auto& c : d.config)
      t.push_back({c.key, json_text(c.past), json_text(c.now), c.decides_result ? "" : "(does not change the result)"});
    out << table(t);
  }
  out << "\nPins: ";
  if (d.pins.empty()) {
    out << "the same inputs and dependencies\n";
  } else {
    out << d.pins.size() << " differ\n" << manifest::format_drift_table(d.pins, "A", "B");
  }
  out << "\nMeasurements\n" << side_by_side(d.measurements, true);
  out << "\nTraining: " << d.figures_compared << " figures compared (every step's loss, gradient norm, learning "
      << "rate and batch, the evals, the state digests), ";
  if (d.figure_differences.empty()) {
    out << "bitwise equal\n";
  } else {
    out << d.figure_differences.size() << " differ:\n";
    constexpr std::size_t kShown = 10;
    for (std::size_t i = 0; i < d.figure_differences.size() && i < kShown; ++i)
      out << "  - " << for_terminal(d.figure_differences[i]) << "\n";
    if (d.figure_differences.size() > kShown)
      out << "  (" << d.figure_differences.size() - kShown << " more in --json)\n";
  }
  out << "\nPlan\n" << side_by_side(d.plan, false);
  return out.str();
}

nlohmann::json diff_runs_json(const RunDiff& d, const nlohmann::json& a, const nlohmann::json& b,
                              const std::string& path_a, const std::string& path_b) {
  const auto run = [](const nlohmann::json& r, const std::string& path) {
    const RunReport t = RunReport::from_json(r);
    return nlohmann::json{{"path", printable(path)}, {"run_id", printable(t.run_id.value_or(""))}};
  };
  const auto rows = [](const std::vector<SideBySide>& v) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : v) {
      nlohmann::json row = {{"name", r.name}, {"a", r.a}, {"b", r.b}, {"same", r.same}};
      if (r.ratio > 0) row["ratio"] = r.ratio;
      out.push_back(row);
    }
    return out;
  };
  nlohmann::json config = nlohmann::json::array(), pins = nlohmann::json::array();
  for (const auto& c : d.config)
    config.push_back({{"key", c.key},
                      {"a", printable_json(c.past)},
                      {"b", printable_json(c.now)},
                      {"a_resolved", printable_json(c.past_resolved)},
                      {"b_resolved", printable_json(c.now_resolved)},
                      {"decides_result", c.decides_result}});
  for (const auto& p : d.pins)
    pins.push_back({{"what", printable(p.what)}, {"a", printable(p.old_value)}, {"b", printable(p.new_value)}});
  return {{"a", run(a, path_a)},
          {"b", run(b, path_b)},
          {"differs", d.differs()},
          {"outcome", rows(d.verdict)},
          {"config", config},
          {"pins", pins},
          {"measurements", rows(d.measurements)},
          {"training", {{"compared", d.figures_compared}, {"differences", d.figure_differences}}},
          {"plan", rows(d.plan)}};
}

}  // namespace anchor::cli
