// anchor diff CONFIG REPORT [--set key=value]... [--json]
//
// What differs between a config about to run and the effective config of a
// past run (its report): every key, paths compared as they resolve, and
// whether the difference decides the result. docs/config.md, "Comparing with
// a past run". Exit 0 when nothing that decides the result differs, 3 when
// something does, 2 on a config or usage error.
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

// The directory the past run's relative paths resolved against: its
// manifest's config.base_dir, else its config file's directory.
std::string past_base_dir(const nlohmann::json& report) {
  const nlohmann::json::json_pointer base("/manifest/config/base_dir");
  if (report.contains(base) && report.at(base).is_string()) return report.at(base).get<std::string>();
  const std::string path = report.value("config_path", "");
  return path.empty() ? "" : std::filesystem::path(path).parent_path().string();
}

std::string shown(const nlohmann::json& v) { return v.is_null() ? "(absent)" : dump_json(v); }

// As written; a path written alike that resolves elsewhere, as it resolves.
std::string shown(const config::Difference& d, bool past) {
  const nlohmann::json& v = past ? d.past : d.now;
  if (d.past == d.now && !d.past_resolved.is_null()) return shown(v) + " (= " + shown(past ? d.past_resolved : d.now_resolved) + ")";
  return shown(v);
}

}  // namespace

Runner setup_diff(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<DiffCliOptions>();
  sub.add_option("config", o->config, "the config about to run (YAML)")->required();
  sub.add_option("report", o->report, "the past run: its report.json, report.intoto.json or run directory")
      ->required();
  sub.add_option("--set", o->sets, "override a config key as `anchor pilot --set` would (repeatable)");
  sub.add_flag("--json", o->json,
               "print {config, report, run_id, differences: [{key, past, now, past_resolved, now_resolved, "
               "decides_result}]}");
  sub.footer("Exit codes: 0 nothing that decides the result differs, 3 something does, 2 usage or config error. "
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
                              {"run_id", report.value("run_id", "")},
                              {"differences", rows}},
                             2)
                << std::endl;
    } else if (diffs.empty()) {
      std::cout << "no differences: " << printable(o->config) << " is the config of run "
                << report.value("run_id", std::string("?")) << "\n";
    } else {
      std::cout << "KEY  PAST RUN  THIS CONFIG\n";
      for (const auto& d : diffs)
        std::cout << d.key << "  " << shown(d, true) << "  " << shown(d, false)
                  << (d.decides_result ? "" : "  (does not change what trains)") << "\n";
    }
    std::fprintf(stderr, "anchor diff: %zu key(s) differ from run %s, %zu of them decide the result%s\n", diffs.size(),
                 printable(report.value("run_id", std::string("?"))).c_str(), deciding,
                 deciding ? "" : " (exit 0)");
    return static_cast<int>(deciding ? ExitCode::kVerification : ExitCode::kOk);
  };
}

}  // namespace anchor::cli
