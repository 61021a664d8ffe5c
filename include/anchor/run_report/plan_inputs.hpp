#pragma once
// What the plan takes from a run's report: its measurements as plan::Measured
// (docs/plan.md). `anchor plan` reads a past report through it, and both
// pilots plan their own report with it.
#include "anchor/plan/plan.hpp"
#include "anchor/run_report/run_report.hpp"

namespace anchor::run_report {

// The measurements of either kind of pilot: the model, the measured step,
// the checkpoint save, memory (its points, the state, a program's baseline),
// the LibTorch version, the stages that passed, the export's copy-off rate
// and the built-in loader's training windows. Throws Error (kUsage) naming the
// field that is missing or not a number, and what to do.
plan::Measured measured_from_report(const RunReport& report);

}  // namespace anchor::run_report
