#pragma once
// anchor diff RUN RUN: two past runs side by side (docs/config.md, "Comparing two runs").
// What decides the result (the effective config, the pins), what each run found (its status,
// its resume verdict, every recorded step), what each measured and what each planned.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/diff.hpp"
#include "anchor/manifest/manifest.hpp"

namespace anchor::cli {

// One figure or finding of both runs: "" where a run lacks it.
struct SideBySide {
  std::string name, a, b;
  double ratio = 0;  // b / a for a measurement where both are positive numbers; else 0
  bool same = true;
};

struct RunDiff {
  std::vector<config::Difference> config;  // A's config as past, B's as now
  std::vector<manifest::Drift> pins;       // A's manifest as old, B's as new
  std::vector<SideBySide> verdict, measurements, plan;
  // Every recorded step's loss, gradient norm, learning rate and batch, the evals and the state
  // digests, compared bitwise (run_report::compare_reports, A as the original).
  std::size_t figures_compared = 0;
  std::vector<std::string> figure_differences;  // "train step 1: loss: A 5.57, B 5.60", in step order
  // Whether the runs differ in what decides the result (a config key that does, a pin) or in what
  // they found (status, resume verdict, a training figure): `anchor diff`'s exit 3.
  bool differs() const;
};

// `a` and `b`: the reports (read_report), `base_a`/`base_b` the directories each run's config paths
// resolved against. Throws Error (kUsage) when a report's config or manifest is not one anchor writes.
RunDiff diff_runs(const nlohmann::json& a, const std::string& base_a, const nlohmann::json& b,
                  const std::string& base_b);

// The text `anchor diff` prints, and its --json document.
std::string diff_runs_text(const RunDiff& d, const std::string& name_a, const std::string& name_b);
nlohmann::json diff_runs_json(const RunDiff& d, const nlohmann::json& a, const nlohmann::json& b,
                              const std::string& path_a, const std::string& path_b);

}  // namespace anchor::cli
