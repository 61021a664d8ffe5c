// anchor diff CONFIG REPORT [--set key=value]... [--json]
//
// What differs between a config about to run and the effective config of a
// past run (its report): every key, paths compared as they resolve, and
// whether the difference decides the result. docs/config.md, "Comparing with
// a past run". Exit 0 when nothing that decides the result differs, 3 when
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

}  // namespace

Runner setup_diff(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<DiffCliOptions>();
  sub.add_option("config", o->config, "the config about to run (YAML)")->required();
  sub.add_option("report", o->report, "the past run: its report.json, report.intoto.json or run directory")->required();
  sub.add_option("--set", o->sets, "override a config key as `anchor pilot --set` would (repeatable)");
  sub.add_flag("--json", o->json,
               "print {config, report, run_id, differences: [{key, past, now, past_resolved, now_resolved, "
               "decides_result}]}");
  sub.footer(
      "Exit codes: 0 nothing that decides the result differs, 3 something does, 2 usage or config error, "
      "1 a file that cannot be read. "
      "Inputs are compared by path, not by digest: `anchor reproduce REPORT` re-pins them.");
  return [o]() {
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
      std::cout << "no differences: " << printable(o->config) << " is the config of run " << text(report, "run_id")
                << "\n";
    } else {
      std::cout << "KEY  PAST RUN  THIS CONFIG\n";
      for (const auto& d : diffs)
        std::cout << d.key << "  " << shown(d, true) << "  " << shown(d, false)
                  << (d.decides_result ? "" : "  (does not change the result)") << "\n";
    }
    std::fprintf(stderr, "anchor diff: %zu key(s) differ from run %s, %zu of them decide the result%s\n", diffs.size(),
                 printable(text(report, "run_id")).c_str(), deciding, deciding ? "" : " (exit 0)");
    return deciding ? ExitCode::kVerification : ExitCode::kOk;
  };
}

}  // namespace anchor::cli
