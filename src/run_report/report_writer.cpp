#include "anchor/run_report/report_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <utility>

#include "anchor/build_info.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/log.hpp"
#include "anchor/plan/plan.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/protocol/events.hpp"
#include "anchor/run_report/report_html.hpp"
#include "anchor/run_report/trace.hpp"

namespace anchor::run_report {
namespace {

// Text for XML 1.0, for an attribute value or element content: valid UTF-8
// (printable: other bytes as \xNN), the control characters XML 1.0 forbids
// (below 0x20 but tab, newline and CR) shown as \xNN, markup escaped, and in
// an attribute tab, newline and CR as references (attribute normalisation
// would turn them into spaces).
std::string xml_escape(const std::string& raw) {
  std::string out;
  std::string text = printable(raw);
  // U+FFFE and U+FFFF are valid UTF-8 but not XML 1.0 characters: as text.
  for (const auto& [bad, shown] :
       {std::pair<std::string, std::string>{"\xef\xbf\xbe", "\\uFFFE"}, {"\xef\xbf\xbf", "\\uFFFF"}})
    for (std::size_t at = text.find(bad); at != std::string::npos; at = text.find(bad, at + shown.size()))
      text.replace(at, bad.size(), shown);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (u < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += std::string("\\x") + hex[u >> 4] + hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  return out;
}

// Seconds as JUnit readers parse them: a plain decimal, never 1e-05.
std::string junit_seconds(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << (std::isfinite(s) && s > 0 ? s : 0.0);
  return os.str();
}

// The first line of a message, at most 200 characters: the failure's message
// attribute (the whole text is the element's body).
std::string headline(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

// One <testcase>, with a <failure> (type and headline; the whole message in
// its body) when `failure` is set, or <skipped/> with why when `skipped` is.
void testcase(std::ostream& os, const std::string& classname, const std::string& name, const std::string& seconds,
              const std::string* failure, const std::string& type, const std::string* skipped = nullptr) {
  os << "    <testcase classname=\"" << classname << "\" name=\"" << xml_escape(name) << "\"";
  if (!seconds.empty()) os << " time=\"" << seconds << "\"";
  os << ">";
  if (failure)
    os << "<failure type=\"" << type << "\" message=\"" << xml_escape(headline(*failure)) << "\">"
       << xml_escape(*failure) << "</failure>";
  if (skipped) os << "<skipped message=\"" << xml_escape(*skipped) << "\"/>";
  os << "</testcase>\n";
}

std::string fmt_seconds(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 3 : 1) << s << " s";
  return os.str();
}

// The headline figure of a stage for the summary table.
std::string stage_figure(const nlohmann::json& s) {
  const auto& f = s.value("figures", nlohmann::json::object());
  std::ostringstream os;
  os << std::setprecision(5);
  const std::string name = s.value("stage", "");
  if (name == "precision" && f.contains("verdict"))
    os << f.value("precision", "") << " vs fp32: " << f["verdict"].get<std::string>() << ", loss rel "
       << std::setprecision(2) << f.value("loss_rel_diff", 0.0) << ", grad norm rel "
       << f.value("grad_norm_rel_diff", 0.0);
  else if (f.contains("loss"))
    os << "loss " << f["loss"].get<double>();
  else if (f.contains("tokens_per_s"))
    os << std::fixed << std::setprecision(0) << f["tokens_per_s"].get<double>() << " tok/s";
  else if (f.contains("bytes") && f.contains("seconds"))
    os << std::fixed << std::setprecision(2) << f["bytes"].get<double>() / 1e6 << " MB in "
       << f["seconds"].get<double>() << " s";
  else if (name == "kill" && f.contains("torn_checkpoints"))
    os << "SIGKILL, " << f["torn_checkpoints"].size() << " torn save left";
  else if (name == "restore" && f.contains("step"))
    os << "step " << f["step"] << ", skipped " << f["skipped"].size();
  else if (f.contains("verdict"))
    os << f["verdict"].get<std::string>() << " (" << f["mode"].get<std::string>() << ")";
  else if (f.contains("parameters"))
    os << f["parameters"] << " params"
       << (f.value("attention", "module") != "module" ? ", " + f["attention"].get<std::string>() + " attention"
                                                      : std::string())
       << (f.value("start_from", "init") == "latest" ? ", from step " + f["start_step"].dump() : std::string());
  else if (f.contains("memory_saved_bytes") && f.contains("time_added_percent"))
    os << std::fixed << std::setprecision(1) << f["memory_saved_percent"].get<double>() << "% memory saved, "
       << std::showpos << f["time_added_percent"].get<double>() << "% time";
  return os.str();
}

// A value at a JSON pointer, or null when the report lacks it (a failed pilot
// stops before its measurements; an older report lacks newer keys).
nlohmann::json at(const nlohmann::json& j, const std::string& pointer) {
  const nlohmann::json::json_pointer p(pointer);
  return j.contains(p) ? j.at(p) : nlohmann::json();
}

std::string fmt_bytes(const nlohmann::json& v) {
  if (!v.is_number() || v.get<double>() < 0) return "n/a";
  const double b = v.get<double>();
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (b >= 1e9)
    os << b / 1e9 << " GB";
  else if (b >= 1e6)
    os << b / 1e6 << " MB";
  else
    os << b / 1e3 << " kB";
  return os.str();
}

std::string fmt_number(const nlohmann::json& v, int precision = 3) {
  if (!v.is_number()) return "n/a";
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v.get<double>();
  return os.str();
}

std::string text_of(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string("n/a") : v.dump();
}

// report.md's "Measurements": the measured step, memory against the device,
// checkpoint I/O and validation, from report.json's measurements.
void write_measurements_md(std::ostream& md, const nlohmann::json& j) {
  const nlohmann::json m = at(j, "/measurements");
  if (!m.is_object()) return;
  md << "\n## Measurements\n\n| what | figure |\n|---|---|\n";
  if (const auto step = at(m, "/step"); step.is_object()) {
    md << "| measured step | " << fmt_number(at(step, "/seconds")) << " s: compute "
       << fmt_number(at(step, "/compute_s")) << " s, data wait " << fmt_number(at(step, "/data_wait_s"), 4) << " s ("
       << fmt_number(at(step, "/stall_percent"), 2) << "% stalled)";
    if (at(step, "/comm_s").is_number() && at(step, "/world_size").is_number() &&
        at(step, "/world_size").get<double>() > 1)
      md << ", communication " << fmt_number(at(step, "/comm_s")) << " s";
    md << "; micro-batch " << text_of(at(step, "/micro_batch")) << " x grad_accum " << text_of(at(step, "/grad_accum"))
       << ", " << text_of(at(step, "/tokens")) << " tokens |\n";
    md << "| throughput | " << fmt_number(at(step, "/tokens_per_s"), 0) << " tokens/s per rank, "
       << fmt_number(at(step, "/tokens_per_s_all_ranks"), 0) << " over " << text_of(at(step, "/world_size"))
       << " rank(s); MFU estimate " << fmt_number(at(step, "/mfu_estimate"), 3) << " |\n";
  }
  if (const auto mem = at(m, "/memory"); mem.is_object()) {
    md << "| peak memory, measured step | allocated " << fmt_bytes(at(mem, "/step/peak_allocated_bytes"))
       << ", reserved " << fmt_bytes(at(mem, "/step/peak_reserved_bytes")) << ", device total "
       << fmt_bytes(at(mem, "/device_total_bytes")) << " (" << text_of(at(mem, "/source")) << ") |\n";
    if (const auto sb = at(mem, "/state_bytes"); sb.is_object())
      md << "| state | parameters " << fmt_bytes(at(sb, "/parameters")) << ", gradients "
         << fmt_bytes(at(sb, "/gradients")) << ", optimizer " << fmt_bytes(at(sb, "/optimizer")) << " |\n";
  }
  for (const char* io : {"checkpoint_save", "restore"})
    if (const auto c = at(m, std::string("/") + io); c.is_object()) {
      md << "| " << (std::string(io) == "restore" ? "restore" : "checkpoint save") << " | "
         << fmt_bytes(at(c, "/bytes")) << " in " << fmt_number(at(c, "/seconds")) << " s ("
         << fmt_number(at(c, "/gb_per_s"), 2) << " GB/s)";
      if (at(c, "/model_build_s").is_number())
        md << "; model build " << fmt_number(at(c, "/model_build_s")) << " s, load "
           << fmt_number(at(c, "/load_state_s")) << " s, state digest " << fmt_number(at(c, "/state_digest_s")) << " s";
      md << " |\n";
    }
  // The profile of a step at the configured shape (worker B's last resumed step; docs/report.md, "profile.json").
  for (const auto& st : j.value("stages", nlohmann::json::array()))
    if (const auto prof = at(st, "/figures/profile"); st.is_object() && prof.is_object()) {
      if (prof.contains("file"))
        md << "| profile of a step | " << text_of(at(prof, "/file")) << ": " << text_of(at(prof, "/events"))
           << " spans of one step at micro-batch " << text_of(at(prof, "/micro_batch")) << " x "
           << text_of(at(prof, "/seq_len")) << " tokens; " << text_of(at(prof, "/profiler"))
           << "; open it in ui.perfetto.dev |\n";
      else
        md << "| profile of a step | none: " << text_of(at(prof, prof.contains("skipped") ? "/skipped" : "/error"))
           << " |\n";
    }
  if (const auto ev = at(j, "/eval"); ev.is_object())
    md << "| validation loss | " << fmt_number(at(ev, "/before_save"), 4) << " before the save, "
       << fmt_number(at(ev, "/after_restore"), 4) << " after the restore |\n";
  if (const auto stages = at(m, "/memory/stages"); stages.is_object() && !stages.empty()) {
    md << "\nPeak memory per stage (device total " << fmt_bytes(at(m, "/memory/device_total_bytes")) << "):\n\n"
       << "| stage | peak allocated | peak reserved | peak RSS |\n|---|---|---|---|\n";
    // In the order the stages ran, then any the stage list lacks.
    std::vector<std::string> order;
    for (const auto& st : j.value("stages", nlohmann::json::array()))
      if (st.is_object() && stages.contains(st.value("stage", ""))) order.push_back(st.value("stage", ""));
    for (const auto& [stage, v] : stages.items())
      if (std::find(order.begin(), order.end(), stage) == order.end()) order.push_back(stage);
    for (const auto& stage : order) {
      const auto& v = stages.at(stage);
      md << "| " << stage << " | " << fmt_bytes(at(v, "/peak_allocated_bytes")) << " | "
         << fmt_bytes(at(v, "/peak_reserved_bytes")) << " | " << fmt_bytes(at(v, "/peak_rss_bytes")) << " |\n";
    }
  }
}

// report.md's "Environment": what ran, from the pinned manifest (docs/manifest.md).
void write_environment_md(std::ostream& md, const nlohmann::json& j) {
  const nlohmann::json man = at(j, "/manifest");
  md << "\n## Environment\n\n- anchor " << text_of(at(j, "/anchor/version")) << " (commit "
     << text_of(at(j, "/anchor/git_commit")) << ")\n";
  if (!man.is_object()) {
    md << "- not pinned: the pilot stopped before its pin stage\n";
    return;
  }
  const auto deps = at(man, "/dependencies");
  md << "- LibTorch " << text_of(at(deps, "/libtorch")) << "; CUDA runtime " << text_of(at(deps, "/cuda_runtime"))
     << ", driver " << text_of(at(deps, "/cuda_driver")) << ", cuDNN " << text_of(at(deps, "/cudnn")) << ", NCCL "
     << text_of(at(deps, "/nccl")) << "; HIP " << text_of(at(deps, "/hip_runtime")) << "\n";
  md << "- device: " << text_of(at(man, "/device/accelerator")) << ", " << text_of(at(man, "/device/count"))
     << " visible";
  for (const auto& d : at(man, "/device/devices").is_array() ? at(man, "/device/devices") : nlohmann::json::array())
    md << "; " << text_of(at(d, "/name"));
  md << "\n- host " << text_of(at(man, "/host/hostname")) << ": " << text_of(at(man, "/host/cpu_model")) << ", "
     << text_of(at(man, "/host/cpu_count")) << " CPUs, " << fmt_bytes(at(man, "/host/memory_total_bytes")) << "; "
     << text_of(at(deps, "/os/pretty_name")) << ", glibc " << text_of(at(deps, "/glibc")) << "\n";
  md << "- threads: run.threads " << text_of(at(man, "/threads/run_threads")) << " (intra-op "
     << text_of(at(man, "/threads/intra_op")) << ", inter-op " << text_of(at(man, "/threads/inter_op")) << ", BLAS "
     << text_of(at(man, "/threads/blas/library")) << " " << text_of(at(man, "/threads/blas/threads")) << ")\n";
  md << "- container: "
     << (at(man, "/container/digest").is_string() ? at(man, "/container/digest").get<std::string>()
                                                  : std::string("no digest"))
     << "\n- the manifest's SHA-256: " << text_of(at(j, "/manifest_sha256")) << " (every pinned input and library)\n";
}

// report.md's title, outcome and stage table.
void write_stages_md(std::ostream& md, const nlohmann::json& j) {
  md << "# anchor pilot " << j.value("run_id", "") << "\n\n";
  md << "**" << j.value("status", "") << "**: " << j.value("message", "") << "\n\n";
  md << "| stage | status | time | figure |\n|---|---|---|---|\n";
  for (const auto& s : j["stages"])
    md << "| " << s.value("stage", "") << " | " << s.value("status", "") << " | "
       << (s.contains("seconds") ? fmt_seconds(s["seconds"].get<double>()) : "") << " | " << stage_figure(s) << " |\n";
}

// Where the run started: initialisation, or the checkpoint it restored.
void write_start_md(std::ostream& md, const nlohmann::json& st) {
  md << "\n## Start\n\n";
  if (st.value("from", "init") != "latest" || !st.contains("step")) {
    md << (st.value("from", "init") == "latest" ? "From the newest committed checkpoint (none was restored).\n"
                                                : "From initialisation (run.seed).\n");
    return;
  }
  md << "From step " << st["step"].dump() << ": `" << st.value("dir", "") << "` (manifest sha256 "
     << st.value("manifest_sha256", "") << "), written by run "
     << (st["run_id"].is_string() ? st["run_id"].get<std::string>() : std::string("(not recorded)")) << " with "
     << st.value("world_size", 1) << " rank(s), " << st.value("strategy", "") << ".\n";
  for (const auto& sk : st.value("skipped", nlohmann::json::array()))
    md << "- passed over " << sk.value("dir", "") << ": " << sk.value("reason", "") << "\n";
  for (const auto& d : st.value("config_differences", nlohmann::json::array()))
    md << "- config " << d.value("key", "") << ": " << d["checkpoint"].dump() << " in the checkpoint, "
       << d["config"].dump() << " here" << (d.value("refused", false) ? " (REFUSED)" : "") << "\n";
  const auto& rr = st.value("rng_restore", nlohmann::json::object());
  if (rr.value("saved_world_size", 0) != rr.value("world_size", 0))
    md << "- restored from " << rr.value("saved_world_size", 0) << " rank(s) to " << rr.value("world_size", 0)
       << ": RNG re-derived " << rr.value("rederived", nlohmann::json::array()).dump() << "\n";
}

void write_resume_md(std::ostream& md, const nlohmann::json& resume) {
  md << "\n## Resume\n\nVerdict: " << resume.value("verdict", "") << " (" << resume.value("mode", "") << ")\n\n";
  for (const auto& c : resume["checks"])
    if (!c["ok"].get<bool>())
      md << "- DIVERGED " << c["name"].get<std::string>() << ": " << c["detail"].get<std::string>() << "\n";
}

// The loss, the global gradient norm and the parameters of the precision check, as a table.
void write_precision_table_md(std::ostream& md, const nlohmann::json& p) {
  md << "| value | fp32 | " << p.value("precision", "") << " | relative difference |\n|---|---|---|---|\n";
  md << "| loss | " << p["loss"]["fp32"].get<double>() << " | " << p["loss"]["value"].get<double>() << " | "
     << p["loss"]["rel_diff"].get<double>() << (p["loss"]["flagged"].get<bool>() ? " FLAGGED" : "") << " |\n";
  md << "| global gradient norm | " << p["grad_norm"]["fp32"].get<double>() << " | "
     << p["grad_norm"]["value"].get<double>() << " | " << p["grad_norm"]["rel_diff"].get<double>()
     << (p["grad_norm"]["flagged"].get<bool>() ? " FLAGGED" : "") << " |\n";
  const auto& params = p["parameters"];
  const bool any_flag = !params["flagged"].empty();
  md << "\n"
     << (any_flag ? "Parameters whose gradient norm differs beyond the tolerance:"
                  : "Largest per-parameter gradient-norm differences (none beyond the tolerance):")
     << "\n\n| parameter | grad norm fp32 | grad norm | relative difference | relative error "
        "|\n|---|---|---|---|---|\n";
  for (const auto& x : any_flag ? params["flagged"] : params["largest"])
    md << "| " << x["name"].get<std::string>() << " | " << x["grad_norm_fp32"].get<double>() << " | "
       << x["grad_norm"].get<double>() << " | " << x["rel_diff"].get<double>() << " | " << x["rel_error"].get<double>()
       << " |\n";
}

void write_precision_md(std::ostream& md, const nlohmann::json& p) {
  md << "\n## Precision\n\n"
     << p.value("precision", "") << " vs " << p.value("reference", "fp32") << " on the step " << p.value("step", 0)
     << " from the same state: **" << p.value("verdict", "") << "** (tolerance " << p.value("tolerance", 0.0)
     << ")\n\n";
  for (const auto& n : p.value("non_finite", nlohmann::json::array()))
    md << "- NON-FINITE " << n.value("what", "") << " " << n.value("tensor", "") << "\n";
  if (p.contains("loss")) write_precision_table_md(md, p);
}

void write_loss_scaler_md(std::ostream& md, const nlohmann::json& ls) {
  md << "\n## Loss scaler\n\nScale saved " << ls["saved_scale"].get<double>() << ", restored "
     << ls["restored_scale"].get<double>() << ", final " << ls["final_scale"].get<double>()
     << ". Skipped steps: " << (ls["skipped_steps"].empty() ? "none" : "") << "\n\n";
  for (const auto& st : ls["skipped_steps"])
    md << "- step " << st["step"].dump() << " (" << st["part"].get<std::string>() << "): inf/NaN gradient in "
       << st["nonfinite_grad"].get<std::string>() << " at scale " << st["loss_scale"].dump() << "\n";
}

void write_ranks_md(std::ostream& md, const nlohmann::json& d) {
  const bool nodes = d.value("nodes", 1) > 1;  // several nodes: which one each rank ran on
  md << "\n## Ranks\n\nStrategy " << d.value("strategy", "") << ", " << d.value("world_size", 0) << " ranks"
     << (nodes ? " on " + std::to_string(d.value("nodes", 1)) + " nodes" : std::string())
     << (d.value("backend", "").empty() ? std::string() : " over " + d.value("backend", std::string()))
     << ". Per rank after the measured step (DDP: every rank holds all of it):\n\n"
     << "| rank |" << (nodes ? " node | host |" : "")
     << " optimizer bytes | DDP | gradient bytes | DDP | comm_s |\n|---|" << (nodes ? "---|---|" : "")
     << "---|---|---|---|---|\n";
  for (const auto& r : d["per_rank"]) {
    md << "| " << r.value("rank", 0) << " | ";
    if (nodes) md << r.value("node", 0) << " | " << r.value("host", "") << " | ";
    md << r.value("optimizer_bytes", 0) << " | " << r.value("optimizer_bytes_ddp", 0) << " | "
       << r.value("gradient_bytes", 0) << " | " << r.value("gradient_bytes_ddp", 0) << " | " << r.value("comm_s", 0.0)
       << " |\n";
  }
  const auto& rr = d.value("rng_restore", nlohmann::json::object());
  if (rr.value("saved_world_size", 0) != rr.value("world_size", 0))
    md << "\nRestored from " << rr.value("saved_world_size", 0) << " ranks: RNG re-derived "
       << rr.value("rederived", nlohmann::json::array()).dump() << "\n";
}

// The plan (or why there is none), then whether the report is signed.
void write_plan_and_signed_md(std::ostream& md, const nlohmann::json& j) {
  if (j.contains("plan") && j["plan"].is_object()) {
    const auto& plan = j["plan"];
    if (plan.contains("recommendation"))  // the whole plan, as `anchor plan` prints it
      md << "\n## Plan\n\n```text\n" << plan::format_plan(plan) << "```\n";
    else if (plan.contains("why"))
      md << "\n## Plan\n\nNot planned: " << plan.value("why", std::string()) << "\n";
  }
  md << "\nSigned: "
     << (j.value("signed", false) ? "yes, key " + j.value("signer_key_id", std::string()) + " (report.intoto.json)"
                                  : "NO: " + j.value("unsigned_reason", std::string("not signed")))
     << "\n";
}

}  // namespace

namespace detail {
void measurements_md(std::ostream& md, const nlohmann::json& report) { write_measurements_md(md, report); }
void environment_md(std::ostream& md, const nlohmann::json& report) { write_environment_md(md, report); }
std::string bytes_text(const nlohmann::json& v) { return fmt_bytes(v); }
std::string markup_escape(const std::string& raw) { return xml_escape(raw); }
}  // namespace detail

void Report::begin(const std::string& run_id, const config::Config& cfg, const std::string& config_path) {
  j_["format"] = "anchor.report/v1";
  j_["run_id"] = run_id;
  j_["created_at"] = protocol::utc_now();
  j_["anchor"] = {{"version", build::kVersion}, {"git_commit", build::kGitCommit}};
  j_["config_path"] = config_path;
  j_["config"] = config::to_json(cfg);
  j_["config_digest"] = config::digest(cfg);
  j_["device"] = cfg.device;
  j_["stages"] = nlohmann::json::array();
  j_["status"] = "running";
  j_["signed"] = false;
}

void Report::set_manifest(const nlohmann::json& m) {
  j_["manifest"] = m;
  j_["manifest_sha256"] = sha256_hex(m.dump(2));
}

void Report::add_stage(const nlohmann::json& s) { j_["stages"].push_back(s); }

namespace {

// The loss scaler: every skipped step, and the scale saved vs restored.
nlohmann::json loss_scaler_section(const protocol::WorkerResult& ref, const protocol::WorkerResult& res) {
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& [part, steps] :
       {std::pair<const char*, const std::vector<train::StepRecord>*>{"train", &ref.train_steps},
        {"reference", &ref.reference_steps},
        {"resume", &res.resume_steps}})
    for (const auto& st : *steps)
      if (st.skipped)
        skipped.push_back(
            {{"part", part}, {"step", st.step}, {"loss_scale", st.loss_scale}, {"nonfinite_grad", st.nonfinite_grad}});
  return {{"enabled", ref.loss_scaler_enabled},
          {"skipped_steps", skipped},
          {"saved_scale", ref.saved_state.value().loss_scale},
          {"restored_scale", res.restored_state.value().loss_scale},
          {"final_scale", res.final_state.value().loss_scale}};
}

// measurements.step: the measured step is the last of the K training steps,
// the first with full optimizer state.
nlohmann::json step_section(const protocol::WorkerResult& ref, const nlohmann::json& cfg) {
  const auto& s = ref.train_steps.back();
  const double wall = s.compute_s + s.data_wait_s;
  const double tps = wall > 0 ? static_cast<double>(s.tokens) / wall : 0.0;
  const double achieved = ref.model.flops_per_token * tps;
  const double peak = ref.matmul_flops;
  return {{"step", s.step},
          {"seconds", wall},
          {"data_wait_s", s.data_wait_s},
          {"compute_s", s.compute_s},
          {"comm_s", s.comm_s},  // with several ranks; DDP overlaps it with compute_s
          {"stall_percent", wall > 0 ? 100.0 * s.data_wait_s / wall : 0.0},
          {"tokens", s.tokens},
          {"tokens_per_s", tps},  // one rank's: the plan scales per GPU
          {"tokens_per_s_all_ranks", tps * ref.world_size},
          {"micro_batch", cfg["train"]["micro_batch"]},
          {"grad_accum", cfg["train"]["grad_accum"]},
          {"world_size", ref.world_size},
          {"achieved_flops", achieved},
          {"reference_matmul_flops", peak},
          // An estimate: against a measured 512x512 matmul on this device, not a datasheet peak.
          {"mfu_estimate", peak > 0 ? achieved / peak : 0.0}};
}

}  // namespace

void Report::set_resume(const protocol::WorkerResult& ref, const protocol::WorkerResult& res,
                        const nlohmann::json& verdict) {
  j_["steps"] = {{"train", train::steps_json(ref.train_steps)},
                 {"reference", train::steps_json(ref.reference_steps)},
                 {"resume", train::steps_json(res.resume_steps)}};
  j_["eval"] = {{"before_save", ref.eval_loss.value()},
                {"after_restore", res.eval_loss.value()},
                {"perplexity", std::exp(ref.eval_loss.value())}};
  j_["resume"] = verdict;
  j_["resume"]["saved_step"] = ref.saved_step.value();
  j_["resume"]["restored_step"] = res.restored_step.value();
  j_["resume"]["skipped"] = nlohmann::json::array();
  for (const auto& s : res.skipped) j_["resume"]["skipped"].push_back(s.to_json());
  j_["resume"]["state_digests"] = {{"saved", ref.saved_state.value().groups_json()},
                                   {"restored", res.restored_state.value().groups_json()},
                                   {"final_reference", ref.final_state.value().groups_json()},
                                   {"final_resume", res.final_state.value().groups_json()}};
  j_["resume"]["state_digest_scheme"] = train::kStateDigestScheme;
  j_["loss_scaler"] = loss_scaler_section(ref, res);

  // Measurements (docs/report.md).
  const auto& cfg = j_["config"];
  nlohmann::json m = nlohmann::json::object();
  m["model"] = ref.model.to_json();
  m["step"] = step_section(ref, cfg);
  nlohmann::json stages = nlohmann::json::object();
  for (const auto& st : j_["stages"]) {
    const std::string n = st.value("stage", "");
    const auto& f = st.value("figures", nlohmann::json::object());
    if (f.contains("memory")) stages[n] = f["memory"];
    if (n == "checkpoint_save")
      m["checkpoint_save"] = {{"bytes", f["bytes"]}, {"seconds", f["seconds"]}, {"gb_per_s", f["gb_per_s"]}};
    if (n == "restore")
      m["restore"] = {{"bytes", f.value("bytes", 0)},
                      {"seconds", f.value("seconds", 0.0)},
                      {"gb_per_s", f.value("gb_per_s", 0.0)},
                      {"model_build_s", f.value("model_build_s", 0.0)},
                      {"load_state_s", f.value("load_state_s", 0.0)},
                      {"state_digest_s", f.value("state_digest_s", 0.0)}};
  }
  const auto& step_mem = ref.step_memory.tensors;
  m["memory"] = {{"source", step_mem.source},
                 {"precision", cfg["train"]["precision"]},
                 {"step", ref.step_memory.to_json()},
                 {"state_bytes", ref.state_bytes.to_json()},
                 {"stages", stages},
                 {"points", nlohmann::json::array()},
                 {"device_total_bytes",
                  step_mem.device_total_bytes >= 0 ? nlohmann::json(step_mem.device_total_bytes) : nlohmann::json()},
                 {"workers",
                  {{"reference", {{"rss_bytes", ref.rss_bytes}, {"peak_rss_bytes", ref.peak_rss_bytes}}},
                   {"resume", {{"rss_bytes", res.rss_bytes}, {"peak_rss_bytes", res.peak_rss_bytes}}}}}};
  j_["measurements"] = m;
}

void Report::set_precision(const nlohmann::json& v) { j_["precision"] = v; }

void Report::set_memory_points(const nlohmann::json& points) { j_["measurements"]["memory"]["points"] = points; }

void Report::set_activation_checkpointing(const nlohmann::json& figures) {
  j_["measurements"]["activation_checkpointing"] = figures;
}

void Report::add_checkpoints(const std::string& ckpt_dir, const std::string& run_dir,
                             const std::vector<checkpoint::VerifiedDir>& seen) {
  // Only what the store verifies completely is a checkpoint (a COMMITTED file
  // alone is not): the same rule as restore and signing (report/run_dir.hpp).
  nlohmann::json list = nlohmann::json::array();
  nlohmann::json unverified = nlohmann::json::array();
  for (const auto& v : checkpoint::Store(ckpt_dir).list(seen)) {
    const std::filesystem::path dir(v.dir);
    const auto name = dir.filename().string();
    if (name.rfind("step-", 0) != 0 || name.find('.') != std::string::npos) continue;  // temp, trash
    const std::string rel = printable(std::filesystem::relative(dir, run_dir).string());
    if (!v.ok) {
      // Passed over by restore; say so instead of listing it, or failing here.
      if (v.state != "uncommitted")
        unverified.push_back({{"dir", rel}, {"step", v.step}, {"state", v.state}, {"problems", v.problems}});
      continue;
    }
    list.push_back(
        {{"dir", rel}, {"step", v.step}, {"manifest_sha256", sha256_file((dir / "manifest.json").string()).sha256}});
  }
  std::sort(list.begin(), list.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) { return a["step"] < b["step"]; });
  j_["checkpoints"] = list;
  if (!unverified.empty()) j_["unverified_checkpoints"] = unverified;
}

void Report::set_outcome(const std::string& status, ExitCode exit_code, const std::string& message) {
  j_["status"] = status;
  j_["exit_code"] = static_cast<int>(exit_code);  // report.json holds the number the process exits with
  j_["message"] = message;
  j_["finished_at"] = protocol::utc_now();
}

void Report::set_reproduction(const nlohmann::json& reproduces, const nlohmann::json& result) {
  j_["reproduces"] = reproduces;
  j_["reproduction"] = result;
}

void Report::set_signed(const std::string& key_id) {
  j_["signed"] = true;
  j_["signer_key_id"] = key_id;
}

void Report::set_unsigned(const std::string& why) {
  j_["signed"] = false;
  j_.erase("signer_key_id");
  j_["unsigned_reason"] = why;
}

void Report::write(const std::string& run_dir) const {
  fs::atomic_write_file(run_dir + "/report.json", dump_json(j_, 2) + "\n");
  std::ostringstream md;
  write_stages_md(md, j_);
  if (j_.contains("start")) write_start_md(md, j_["start"]);
  if (j_.contains("resume")) write_resume_md(md, j_["resume"]);
  if (j_.contains("precision")) write_precision_md(md, j_["precision"]);
  if (j_.contains("loss_scaler") && j_["loss_scaler"].value("enabled", false))
    write_loss_scaler_md(md, j_["loss_scaler"]);
  if (j_.contains("distributed")) write_ranks_md(md, j_["distributed"]);
  if (j_.contains("measurements") && j_["measurements"].contains("activation_checkpointing"))
    md << "\n## Activation checkpointing\n\n"
       << j_["measurements"]["activation_checkpointing"].value("trade", "") << "\n";
  write_measurements_md(md, j_);
  write_environment_md(md, j_);
  write_plan_and_signed_md(md, j_);
  fs::atomic_write_file(run_dir + "/report.md", md.str());
  // The trace, then the page that draws its stages (docs/report.md, "report.html" and "trace.json").
  // Views of report.json and events.jsonl: one that cannot be written (a full disk) is a warning,
  // never the pilot's outcome, and no stale copy is left to be signed as this run's.
  try {
    fs::atomic_write_file(run_dir + "/report.html", report_html(j_, write_trace(run_dir)));
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("report", "report.html and trace.json not written: {}", printable(e.what()));
    for (const char* view : {"/report.html", "/trace.json"}) ::unlink((run_dir + view).c_str());
  }
}

void Report::print_summary(std::ostream& os) const {
  os << "\n  " << std::left << std::setw(20) << "stage" << std::setw(8) << "status" << std::setw(11) << "time"
     << "figure\n";
  for (const auto& s : j_["stages"])
    os << "  " << std::setw(20) << s.value("stage", "") << std::setw(8) << s.value("status", "") << std::setw(11)
       << (s.contains("seconds") ? fmt_seconds(s["seconds"].get<double>()) : "-") << stage_figure(s) << "\n";
  os << "\n  " << j_.value("status", "") << ": " << j_.value("message", "") << "\n\n";
}

std::string junit_xml(const nlohmann::json& r, const std::vector<std::string>& planned) {
  int tests = 0, failures = 0, skipped = 0;
  double total = 0;
  std::ostringstream cases;
  std::string stopped_in;  // the stage the pilot stopped in, for the skipped ones' message
  std::vector<std::string> ran;
  for (const auto& s : r["stages"]) {
    ++tests;
    const std::string name = s.value("stage", ""), status = s.value("status", "");
    const double seconds = s.contains("seconds") && s["seconds"].is_number() ? s["seconds"].get<double>() : 0.0;
    total += seconds;
    ran.push_back(name);
    std::string why;
    if (status != "passed") {
      ++failures;
      why = s.value("error", status.empty() ? std::string("failed") : status);
      stopped_in = name;  // the last that failed: later stages may still run after a failure (compare)
    }
    testcase(cases, "anchor.pilot.stage", name, junit_seconds(seconds), status != "passed" ? &why : nullptr, "stage");
  }
  // A pilot that failed without a failed stage (interrupted, or refused
  // after its last stage): its outcome is a failed case, so CI never reads a
  // failed pilot as green.
  const std::string status = r.value("status", ""), message = r.value("message", "");
  if (failures == 0 && !status.empty() && status != "passed") {
    ++tests;
    ++failures;
    const std::string why = status + ": " + message;
    testcase(cases, "anchor.pilot", "outcome", "", &why, status);
  }
  for (const auto& name : planned) {
    if (std::find(ran.begin(), ran.end(), name) != ran.end()) continue;
    ++tests;
    ++skipped;
    const std::string why = !stopped_in.empty() ? "not run: the pilot stopped in stage " + stopped_in
                            : status == "passed" || status.empty()
                                ? std::string("not run by this pilot")
                                : "not run: the pilot " + status + " (" + message + ")";
    testcase(cases, "anchor.pilot.stage", name, "", nullptr, "", &why);
  }
  if (r.contains("resume") && r["resume"].contains("checks"))
    for (const auto& c : r["resume"]["checks"]) {
      ++tests;
      const bool ok = c.value("ok", false);
      const std::string detail = c.value("detail", "");
      if (!ok) ++failures;
      testcase(cases, "anchor.pilot.resume", c.value("name", ""), "", ok ? nullptr : &detail, "resume");
    }
  const std::string created = r.value("created_at", "");
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"anchor pilot\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"0\" time=\"" << junit_seconds(total) << "\">\n"
    << "  <testsuite name=\"anchor pilot " << xml_escape(r.value("run_id", "")) << "\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << junit_seconds(total)
    << "\" timestamp=\"" << xml_escape(created.substr(0, 19)) << "\" hostname=\"" << xml_escape(proc::host_name())
    << "\">\n"
    << cases.str() << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

std::string junit_error_xml(const std::string& name, const std::string& type, const std::string& message,
                            const std::string& timestamp) {
  std::ostringstream cases;
  testcase(cases, "anchor.pilot.stage", name, "0.000", &message, type);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"anchor pilot\" tests=\"1\" failures=\"1\" "
       "errors=\"0\" time=\"0.000\">\n"
    << "  <testsuite name=\"anchor pilot\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\" time=\"0.000\" "
       "timestamp=\""
    << xml_escape(timestamp) << "\" hostname=\"" << xml_escape(proc::host_name()) << "\">\n"
    << cases.str() << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

}  // namespace anchor::run_report
