// anchor plan REPORT [--catalog FILE] [--set key=value]... [--json]
//
// Recomputes the plan (memory model, devices, parallelism, budget) from a past
// pilot's report for other targets, without re-running anything. REPORT is a
// report.json, a signed report.intoto.json (the DSSE payload's
// predicate.report is used; the signature is NOT checked here: `anchor verify`
// does that), or a run directory holding either. Output: the plan as tables on
// stdout, or as JSON with --json. docs/plan.md.
#include <filesystem>
#include <iostream>
#include <memory>

#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/plan/catalog.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/run_report/plan_inputs.hpp"
#include "commands.hpp"
#include "report_file.hpp"

namespace anchor::cli {
namespace {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

struct PlanCliOptions {
  std::string report;
  std::string catalog;
  std::vector<std::string> sets;
  bool json_out = false;
};

// The directory the pilot's config was loaded from, so budget.catalog and
// other relative inputs resolve as they did for the pilot ("" -> cwd).
std::string config_dir(const run_report::RunReport& report) {
  const std::string p = report.config_path.value_or("");
  if (p.empty()) return "";
  std::error_code ec;
  const stdfs::path dir = stdfs::absolute(stdfs::path(p), ec).parent_path();
  return !ec && stdfs::is_directory(dir, ec) ? dir.lexically_normal().string() : "";
}

}  // namespace

Runner setup_plan(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<PlanCliOptions>();
  sub.add_option("report", o->report, "the pilot's report.json, its signed report.intoto.json, or the run directory")
      ->type_name("PATH")
      ->required();
  with_env(sub.add_option("--catalog", o->catalog,
                          "device catalog YAML; default: budget.catalog of the report's config, "
                          "else ./configs/catalog.yaml")
               ->type_name("FILE"),
           "ANCHOR_CATALOG");
  sub.add_option("--set", o->sets,
                 "override a key of the report's config, e.g. --set budget.nodes=4 "
                 "--set train.precision=bf16 (repeatable; default: none)")
      ->type_name("KEY=VALUE");
  sub.add_flag("--json", o->json_out, "print the plan as JSON instead of tables (default: tables)");
  sub.footer(
      "Recomputes the plan from measured figures; nothing is run. The signature of a "
      "report.intoto.json is not checked here (use anchor verify). Exit codes: 0 ok, "
      "2 usage/config (bad report, catalog or --set), 1 runtime. docs/plan.md.");

  return [o]() {
    const json report = read_report(o->report);
    const run_report::RunReport typed = run_report::RunReport::from_json(report);
    if (!typed.config || !typed.config->is_object())
      throw Error(ErrorKind::kUsage, "report " + o->report + ": has no config object",
                  "give a report written by `anchor pilot`");
    // The stored effective config, re-validated with the overrides on top.
    const config::Config cfg =
        config::load_string(typed.config->dump(2), o->report + " (config)", o->sets, config_dir(typed));
    const plan::Catalog catalog = plan::load_catalog(plan::find_catalog(cfg, o->catalog));
    const json p = plan::make_plan(run_report::measured_from_report(typed), catalog, cfg);
    if (o->json_out)
      std::cout << p.dump(2) << "\n";
    else
      std::cout << plan::format_plan(p);
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
