// anchor diff CONFIG REPORT [--set key=value]... [--json]
// anchor diff RUN RUN [--json]
//
// What differs between a config about to run and the effective config of a
// past run (its report): every key, paths compared as they resolve, and
// whether the difference decides the result. docs/config.md, "Comparing with
// a past run". Or two past runs side by side (diff_runs.hpp; "Comparing two
// runs"). Exit 0 when nothing that decides the result differs, 3 when
// something does, 2 on a config or usage error, 1 when a file cannot be read.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/config/diff.hpp"
#include "anchor/error.hpp"
#include "commands.hpp"
#include "diff_runs.hpp"
#include "report_file.hpp"

namespace anchor::cli {
namespace {

struct DiffCliOptions {
  std::string config;
  std::string report;
  std::vector<std::string> sets;
  bool json = false;
};

// A string field of the report, or "" when it is absent or not a string (a hostile report).
std::string text(const nlohmann::json& report, const char* key) {
  auto it = report.find(key);
  return it != report.end() && it->is_string() ? it->get<std::string>() : "";
}

// The directory the past run's relative paths resolved against: its
// manifest's config.base_dir (exact bytes, base_dir_hex), else its config
// file's directory. "" or a relative one: paths are compared as written.
std::string past_base_dir(const nlohmann::json& report) {
  const nlohmann::json::json_pointer config("/manifest/config");
  if (report.contains(config) && report.at(config).is_object()) {
    std::string base = path_field(report.at(config), "base_dir");
    if (!base.empty()) return base;
  }
  const std::string path = text(report, "config_path");
  return path.empty() ? "" : std::filesystem::path(path).parent_path().string();
}

std::string shown(const nlohmann::json& v) { return v.is_null() ? "(absent)" : dump_json(v); }

// As written; a path written alike that resolves elsewhere, as it resolves.
std::string shown(const config::Difference& d, bool past) {
  const nlohmann::json& v = past ? d.past : d.now;
  if (d.past == d.now && !d.past_resolved.is_null())
    return shown(v) + " (= " + shown(past ? d.past_resolved : d.now_resolved) + ")";
  return shown(v);
}

// Whether `anchor diff`'s first argument is a past run rather than a config: a directory, or a .json
// file that is a report (it has a format or a run_id, or is an envelope). A config written as JSON
// (valid YAML) is a config; a .json file that is no JSON object is a run, refused by read_report.
bool names_a_run(const std::string& path) {
  if (std::filesystem::is_directory(path)) return true;
  if (std::filesystem::path(path).extension() != ".json") return false;
  try {
    const nlohmann::json j = read_report(path);
    return j.contains("format") || j.contains("run_id");
  } catch (const Error&) {
    return true;
  }
}

ExitCode diff_two_runs(const DiffCliOptions& o) {
  if (!o.sets.empty())
    throw Error(ErrorKind::kUsage, "--set changes a config, and " + printable(o.config) + " is a past run",
                "compare two runs as they ran (`anchor diff RUN RUN`), or a config with --set against a run "
                "(`anchor diff CONFIG RUN --set key=value`)");
  const nlohmann::json a = read_report(o.config), b = read_report(o.report);
  const RunDiff d = diff_runs(a, past_base_dir(a), b, past_base_dir(b));
  if (o.json)
    std::cout << dump_json(diff_runs_json(d, a, b, o.config, o.report), 2) << std::endl;
  else
    std::cout << diff_runs_text(d, o.config + " (run " + text(a, "run_id") + ")",
                                o.report + " (run " + text(b, "run_id") + ")");
  std::fprintf(stderr, "anchor diff: runs %s and %s %s\n", for_terminal(text(a, "run_id")).c_str(),
               for_terminal(text(b, "run_id")).c_str(),
               d.differs() ? "differ in what decides the result or in what they found (exit 3)"
                           : "agree on what decides the result and on what they found (exit 0)");
  return d.differs() ? ExitCode::kVerification : ExitCode::kOk;
}

}  // namespace

Runner setup_diff(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<DiffCliOptions>();
  sub.add_option("config", o->config,
                 "the config about to run (YAML); or a past run (its directory or report .json), to compare two runs")
      ->type_name("FILE")
      ->required();
  sub.add_option("report", o->report, "the past run: its report.json, report.intoto.json or run directory")
      ->type_name("PATH")
      ->required();
  sub.add_option("--set", o->sets, "override a config key as `anchor pilot --set` would (repeatable)")
      ->type_name("KEY=VALUE");
  sub.add_flag("--json", o->json,
               "print {config, report, run_id, differences: [{key, past, now, past_resolved, now_resolved, "
               "decides_result}]}");
  sub.footer(
      "Two runs (`anchor diff RUN RUN`): outcome, effective config, pins, measurements with B/A ratios, every "
      "training figure (bitwise) and the plan, side by side. "
      "Exit codes: 0 nothing that decides the result differs (for two runs: nor what they found), 3 something "
      "does, 2 usage or config error, 1 a file that cannot be read. "
      "Inputs are compared by path, not by digest: `anchor reproduce REPORT` re-pins them.");
  return [o]() {
    if (names_a_run(o->config)) return diff_two_runs(*o);
    const config::Config now = config::load(o->config, o->sets);
    const nlohmann::json report = read_report(o->report);
    if (!report.contains("config") || !report["config"].is_object())
      throw Error(ErrorKind::kUsage, "report " + o->report + ": it holds no config object",
                  "give the report.json (or report.intoto.json) an `anchor pilot` wrote");
    const auto diffs = config::diff(report["config"], past_base_dir(report), now);
    std::size_t deciding = 0;
    for (const auto& d : diffs) deciding += d.decides_result ? 1 : 0;
    if (o->json) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& d : diffs)
        rows.push_back({{"key", d.key},
                        {"past", d.past},
                        {"now", d.now},
                        {"past_resolved", d.past_resolved},
                        {"now_resolved", d.now_resolved},
                        {"decides_result", d.decides_result}});
      std::cout << dump_json({{"config", printable(o->config)},
                              {"report", printable(o->report)},
                              {"run_id", text(report, "run_id")},
                              {"differences", rows}},
                             2)
                << std::endl;
    } else if (diffs.empty()) {
      std::cout << "no differences: " << for_terminal(o->config) << " is the config of run " << text(report, "run_id")
                << "\n";
    } else {
      std::cout << "KEY  PAST RUN  THIS CONFIG\n";
      for (const auto& d : diffs)
        std::cout << d.key << "  " << shown(d, true) << "  " << shown(d, false)
                  << (d.decides_result ? "" : "  (does not change the result)") << "\n";
    }
    std::fprintf(stderr, "anchor diff: %zu key(s) differ from run %s, %zu of them decide the result%s\n", diffs.size(),
                 for_terminal(text(report, "run_id")).c_str(), deciding, deciding ? "" : " (exit 0)");
    return deciding ? ExitCode::kVerification : ExitCode::kOk;
  };
}

}  // namespace anchor::cli
