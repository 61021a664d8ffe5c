#pragma once
// Two reports of the same run compared stage by stage: the verdict of
// `anchor reproduce` on its re-run (anchor/reproduce/reproduce.hpp).
#include <nlohmann/json.hpp>

#include "anchor/run_report/run_report.hpp"

namespace anchor::run_report {

// Compares the figures of two reports: every recorded step (loss, gradient
// norm, learning rate, batch digest) of train/reference/resume, the evals, the
// resume verdict and the state digests. bitwise: exact equality; otherwise
// figures within `tolerance` (relative) and digests reported, not required.
// Returns the report's `reproduction`: verdict "reproduced"|"differs", mode
// "bitwise"|"tolerance", tolerance, checks [{name, ok, detail}], differences.
Reproduction compare_reports(const RunReport& original, const RunReport& rerun, bool bitwise, double tolerance);

}  // namespace anchor::run_report
