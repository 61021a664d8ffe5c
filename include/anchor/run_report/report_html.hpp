#pragma once
// report.html: the run's report as one self-contained page (docs/report.md,
// "report.html"): inline CSS and SVG, no script, nothing fetched. The loss of
// worker A and worker B overlaid with the save and kill marked; per-step loss,
// grad norm and learning rate; the step time split; peak memory per stage
// against the device; the stages of every process on one time line (from the
// trace); the resume checks; a reproduction's drift and differences; the
// measurements and environment of report.md.
#include <nlohmann/json.hpp>
#include <string>

#include "anchor/run_report/run_report.hpp"

namespace anchor::run_report {

// `report` is report.json, typed; `trace` is trace.json (trace.hpp). Whatever either
// holds is escaped; a section whose data the report lacks (a pilot that
// failed early, an older report) says so instead of drawing.
std::string report_html(const RunReport& report, const nlohmann::json& trace);

}  // namespace anchor::run_report
