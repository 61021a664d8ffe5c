#include "pilot_context.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "anchor/measure/trace_summary.hpp"
#include "anchor/pilot/pipeline_timing.hpp"
#include "anchor/pilot/preflight.hpp"
#include "anchor/run_report/run_report.hpp"
#include "outcome.hpp"

namespace anchor::pilot {

std::optional<ExitCode> preflight_stage(Pilot& p) {
  PreflightOptions o;
  o.checkpoint_dir = p.ckpt_dir;
  o.bytes = static_cast<std::uint64_t>(p.cfg.pilot.preflight_mib) << 20;
  o.ranks = p.nproc;
  o.torch_binary = probe_binary();
  if (p.launched || p.opts.nodes)
    o.no_allreduce =
        "the ranks were placed by torchrun or srun: the pilot's ranks measure their own "
        "communication (measurements.step.comm_s)";
  try {
    p.stage("preflight", [&] {
      const nlohmann::json node = preflight(p.cfg, o);
      p.report.set_section("node", node);
      const run_report::Node n = run_report::RunReport::from_json({{"node", node}}).node.value_or(run_report::Node{});
      const std::string host = n.host.value_or("?");
      std::ostringstream line;
      line << std::fixed << std::setprecision(0) << "disk "
           << (n.checkpoint_dir ? n.checkpoint_dir->mb_per_s.value_or(0.0) : 0.0) << " MB/s";
      if (n.data && n.data->mb_per_s) line << ", data " << *n.data->mb_per_s << " MB/s";
      if (n.all_reduce && n.all_reduce->busbw_gb_per_s)
        line << std::setprecision(2) << ", all-reduce " << *n.all_reduce->busbw_gb_per_s << " GB/s";
      if (const auto failures = preflight_failures(node); !failures.empty())
        throw Error(ErrorKind::kVerification,
                    "node " + host + " fails its health check: " + failures.front() +
                        (failures.size() > 1 ? " (and " + std::to_string(failures.size() - 1) + " more)" : ""),
                    "run the pilot on another node, or have this one reset or serviced first");
      return nlohmann::json{{"finding", line.str()}, {"host", host}};
    });
  } catch (const Error& e) {
    return fail(p, "preflight", exit_code_for(e.kind()), with_hint(e));
  }
  return std::nullopt;
}

std::optional<ExitCode> pipeline_stage(Pilot& p) {
  try {
    p.stage("pipeline", [&] {
      const nlohmann::json timed = time_pipeline(p.cfg, p.run_dir + "/pipeline");
      p.report.set_section("pipeline", timed);
      const auto figures = run_report::RunReport::from_json({{"pipeline", timed}}).pipeline;
      std::ostringstream line;
      line << std::fixed << std::setprecision(1);
      for (const auto* c : {&figures->download, &figures->preprocess})
        if (*c)
          line << (line.tellp() > 0 ? ", " : "") << (c == &figures->download ? "download " : "preprocess ")
               << (*c)->mb_per_s.value_or(0.0) << " MB/s";
      return nlohmann::json{{"finding", line.str()}};
    });
  } catch (const Error& e) {
    return fail(p, "pipeline", exit_code_for(e.kind()), with_hint(e));
  }
  return std::nullopt;
}

std::optional<ExitCode> node_stages(Pilot& p) {
  const bool preflight = p.cfg.pilot.preflight_mib > 0, pipeline = pipeline_configured(p.cfg);
  if (pipeline) p.planned_stages.insert(p.planned_stages.begin(), "pipeline");
  if (preflight) p.planned_stages.insert(p.planned_stages.begin(), "preflight");
  if (preflight)
    if (auto end = preflight_stage(p)) return end;
  if (pipeline)
    if (auto end = pipeline_stage(p)) return end;
  return std::nullopt;
}

// The start point against what checkpoint.dir holds (step directories; the
// stale temps are gone by now). "" when fine, else why not, with what to do.
// init: the directory must hold no step directory at all: the pilot would save
// step K over one, its retention would delete older ones, and worker B restores
// the newest — possibly another run's. latest: there must be one to start from.
std::string check_start_dir(const config::Config& cfg, const std::string& ckpt_dir) {
  std::vector<std::string> steps;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ckpt_dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  if (cfg.pilot.start_from == "latest") {
    if (!steps.empty()) return "";
    return "pilot.start_from is latest, but checkpoint.dir " + ckpt_dir +
           " holds no checkpoint (no step-* directory) (hint: point checkpoint.dir at the directory of the run to "
           "restart, or start from initialisation: pilot.start_from init)";
  }
  if (steps.empty()) return "";
  return "checkpoint.dir " + ckpt_dir + " already holds " + std::to_string(steps.size()) + " checkpoint(s), newest " +
         steps.back() + "; a pilot starting from initialisation would save its steps " +
         std::to_string(cfg.pilot.steps_before_save) + " and " +
         std::to_string(cfg.pilot.steps_before_save + cfg.pilot.steps_after_resume) +
         " among them (replacing a directory of the same step), delete older ones by retention, and restore the "
         "newest in its resume worker (hint: to restart from the newest committed one, pass --start-from "
         "latest; to start afresh, use an empty checkpoint.dir or leave it empty for <run dir>/checkpoints)";
}

void add_top_operators(const std::string& run_dir, run_report::Profile& profile) {
  if (profile.file != "profile.json") return;
  try {
    const auto summary = measure::summarize_trace(run_dir + "/profile.json", 15);
    std::vector<run_report::ProfileOp> top;
    for (const auto& op : summary.top) {
      run_report::ProfileOp o;
      o.name = op.name, o.device = op.device, o.self_s = op.self_s, o.total_s = op.total_s, o.calls = op.calls;
      top.push_back(std::move(o));
    }
    profile.self_s = summary.self_s;
    profile.top = std::move(top);
  } catch (const Error& e) {
    profile.error = std::string("profile.json could not be read: ") + e.what();
  }
}

}  // namespace anchor::pilot
