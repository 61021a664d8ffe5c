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
// `element` "error" instead: the stage did not get to its answer (a crash).
void testcase(std::ostream& os, const std::string& classname, const std::string& name, const std::string& seconds,
              const std::string* failure, const std::string& type, const std::string* skipped = nullptr,
              const char* element = "failure") {
  os << "    <testcase classname=\"" << classname << "\" name=\"" << xml_escape(name) << "\"";
  if (!seconds.empty()) os << " time=\"" << seconds << "\"";
  os << ">";
  if (failure)
    os << "<" << element << " type=\"" << type << "\" message=\"" << xml_escape(headline(*failure)) << "\">"
       << xml_escape(*failure) << "</" << element << ">";
  if (skipped) os << "<skipped message=\"" << xml_escape(*skipped) << "\"/>";
  os << "</testcase>\n";
}

std::string fmt_seconds(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 3 : 1) << s << " s";
  return os.str();
}

// A field as report.md shows it: a string as it is, a number as JSON writes
// it, "n/a" when the report lacks it.
std::string text_of(const Opt<std::string>& v) { return v ? *v : "n/a"; }
template <class T>
std::string text_of(const Opt<T>& v) {
  return v ? Json(*v).dump() : "n/a";
}

std::string fmt_bytes(double b) {
  if (!(b >= 0)) return "n/a";
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
std::string fmt_bytes(const Opt<std::int64_t>& v) { return v ? fmt_bytes(static_cast<double>(*v)) : "n/a"; }

std::string fmt_ms(const Opt<double>& seconds) {
  if (!seconds) return "n/a";
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << *seconds * 1e3 << " ms";
  return os.str();
}

std::string fmt_number(const Opt<double>& v, int precision = 3) {
  if (!v) return "n/a";
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << *v;
  return os.str();
}

// The headline figure of a stage for the summary table.
std::string stage_figure(const Stage& s) {
  const StageFigures& f = or_empty(s.figures);
  std::ostringstream os;
  os << std::setprecision(5);
  const std::string name = s.stage.value_or("");
  if (name == "preflight" && f.finding)
    os << *f.finding;
  else if (name == "precision" && f.verdict)
    os << f.precision.value_or("") << " vs fp32: " << *f.verdict << ", loss rel " << std::setprecision(2)
       << f.loss_rel_diff.value_or(0.0) << ", grad norm rel " << f.grad_norm_rel_diff.value_or(0.0);
  else if (name == "determinism" && f.finding) {
    os << *f.finding;
    if (f.max_relative && f.max_relative->is_number() && f.max_relative->get<double>() > 0)
      os << ", run to run up to " << std::setprecision(2) << f.max_relative->get<double>();
  } else if (name == "determinism" && f.why)
    os << "not run: " << *f.why;
  else if (f.loss)
    os << "loss " << *f.loss;
  else if (f.tokens_per_s)
    os << std::fixed << std::setprecision(0) << *f.tokens_per_s << " tok/s";
  else if (f.bytes && f.seconds)
    os << std::fixed << std::setprecision(2) << static_cast<double>(*f.bytes) / 1e6 << " MB in " << *f.seconds << " s";
  else if (name == "kill" && f.torn_checkpoints)
    os << "SIGKILL, " << f.torn_checkpoints->size() << " torn save left";
  else if (name == "restore" && f.step)
    os << "step " << *f.step << ", skipped " << (f.skipped ? f.skipped->size() : 0);
  else if (f.verdict)
    os << *f.verdict << " (" << f.mode.value_or("") << ")";
  else if (f.parameters)
    os << *f.parameters << " params"
       << (f.attention.value_or("module") != "module" ? ", " + *f.attention + " attention" : std::string())
       << (f.start_from.value_or("init") == "latest" ? ", from step " + text_of(f.start_step) : std::string());
  else if (f.memory_saved_bytes && f.time_added_percent)
    os << std::fixed << std::setprecision(1) << f.memory_saved_percent.value_or(0.0) << "% memory saved, "
       << std::showpos << *f.time_added_percent << "% time";
  return os.str();
}

// report.md's "Node": the preflight's figures (report.json's node).
void write_node_md(std::ostream& md, const Node& n) {
  md << "\n## Node (preflight)\n\n| what | figure |\n|---|---|\n| host | " << text_of(n.host) << " |\n";
  for (const auto* rate : {&n.checkpoint_dir, &n.data}) {
    const char* what = rate == &n.data ? "data.train read" : "checkpoint.dir write + fsync";
    if (const auto& f = *rate; f && f->skipped)
      md << "| " << what << " | skipped: " << *f->skipped << " |\n";
    else if (f)
      md << "| " << what << " | " << fmt_number(f->mb_per_s, 1) << " MB/s (" << fmt_bytes(f->bytes.value_or(-1))
         << " in " << fmt_number(f->seconds) << " s, " << text_of(f->kind) << ")"
         << (f->tokens_per_s ? ", " + fmt_number(f->tokens_per_s, 0) + " tokens/s" : std::string()) << ": "
         << text_of(f->path) << " |\n";
  }
  if (const auto& a = n.all_reduce; a && a->skipped)
    md << "| all-reduce | skipped: " << *a->skipped << " |\n";
  else if (a)
    md << "| all-reduce | " << fmt_number(a->busbw_gb_per_s, 2) << " GB/s bus bandwidth, "
       << fmt_number(a->latency_us, 1) << " us latency over " << text_of(a->ranks) << " ranks (" << text_of(a->backend)
       << ", " << text_of(a->kind) << ") |\n";
  if (const auto& h = n.gpu_health; h && h->skipped)
    md << "| GPU health | skipped: " << *h->skipped << " |\n";
  else if (h) {
    md << "| GPU health | driver " << text_of(h->driver) << "; Xids " << text_of(h->xid_read) << "; "
       << (or_empty(h->failures).empty() ? std::string("no failures")
                                         : std::to_string(h->failures->size()) + " failure(s)")
       << " |\n";
    for (const auto& f : or_empty(h->failures)) md << "| GPU failure | " << f << " |\n";
    for (const auto& w : or_empty(h->warnings)) md << "| GPU warning | " << w << " |\n";
  }
}

// Under "Node": the pipeline's commands as they ran on their samples.
void write_pipeline_md(std::ostream& md, const PipelineFigures& p) {
  for (const auto* c : {&p.download, &p.preprocess})
    if (*c) {
      std::string command;
      for (const auto& a : or_empty((*c)->command)) command += (command.empty() ? "" : " ") + printable(a);
      for (std::size_t at = 0; (at = command.find('|', at)) != std::string::npos; at += 2) command.insert(at, "\\");
      md << "| " << (c == &p.download ? "download command" : "preprocess command") << " | "
         << fmt_bytes((*c)->bytes.value_or(-1)) << " in " << fmt_number((*c)->seconds) << " s, "
         << fmt_number((*c)->mb_per_s, 2) << " MB/s (" << text_of((*c)->kind) << "): " << command << " |\n";
    }
}

// report.md's "Measurements": the measured step, memory against the device,
// checkpoint I/O and validation, from report.json's measurements.
void write_measurements_md(std::ostream& md, const RunReport& r) {
  if (r.node) write_node_md(md, *r.node);
  if (r.pipeline) {
    if (!r.node) md << "\n## Node (preflight)\n\n| what | figure |\n|---|---|\n";
    write_pipeline_md(md, *r.pipeline);
  }
  if (!r.measurements) return;
  const Measurements& m = *r.measurements;
  md << "\n## Measurements\n\n| what | figure |\n|---|---|\n";
  if (const auto& step = m.step) {
    md << "| measured step | " << fmt_number(step->seconds) << " s: compute " << fmt_number(step->compute_s)
       << " s, data wait " << fmt_number(step->data_wait_s, 4) << " s (" << fmt_number(step->stall_percent, 2)
       << "% stalled)";
    if (step->comm_s && step->world_size.value_or(1) > 1) md << ", communication " << fmt_number(step->comm_s) << " s";
    md << "; micro-batch " << text_of(step->micro_batch) << " x grad_accum " << text_of(step->grad_accum) << ", "
       << text_of(step->tokens) << " tokens |\n";
    md << "| throughput | " << fmt_number(step->tokens_per_s, 0) << " tokens/s per rank, "
       << fmt_number(step->tokens_per_s_all_ranks, 0) << " over " << text_of(step->world_size)
       << " rank(s); MFU estimate " << fmt_number(step->mfu_estimate, 3) << " |\n";
  }
  if (const auto& mem = m.memory) {
    const StepMemory& sm = or_empty(mem->step);
    md << "| peak memory, measured step | allocated " << fmt_bytes(sm.peak_allocated_bytes) << ", reserved "
       << fmt_bytes(sm.peak_reserved_bytes) << ", peak RSS " << fmt_bytes(sm.peak_rss_bytes) << ", device total "
       << fmt_bytes(mem->device_total_bytes) << " (" << text_of(mem->source) << ") |\n";
    if (const auto& sb = mem->state_bytes)
      md << "| state | parameters " << fmt_bytes(sb->parameters) << ", gradients " << fmt_bytes(sb->gradients)
         << ", optimizer " << fmt_bytes(sb->optimizer) << " |\n";
  }
  for (const auto* io : {&m.checkpoint_save, &m.restore})
    if (const auto& c = *io) {
      md << "| " << (io == &m.restore ? "restore" : "checkpoint save") << " | " << fmt_bytes(c->bytes) << " in "
         << fmt_number(c->seconds) << " s (" << fmt_number(c->gb_per_s, 2) << " GB/s)";
      if (c->model_build_s)
        md << "; model build " << fmt_number(c->model_build_s) << " s, load " << fmt_number(c->load_state_s)
           << " s, state digest " << fmt_number(c->state_digest_s) << " s";
      md << " |\n";
    }
  // The profile of a step at the configured shape (worker B's last resumed step; docs/report.md, "profile.json").
  for (const auto& st : or_empty(r.stages))
    if (const auto& prof = or_empty(st.figures).profile) {
      if (prof->file)
        md << "| profile of a step | " << *prof->file << ": " << text_of(prof->events)
           << " spans of one step at micro-batch " << text_of(prof->micro_batch) << " x " << text_of(prof->seq_len)
           << " tokens; " << text_of(prof->profiler) << "; open it in ui.perfetto.dev |\n";
      else
        md << "| profile of a step | none: " << text_of(prof->skipped ? prof->skipped : prof->error) << " |\n";
    }
  if (const auto& ev = r.eval)
    md << "| validation loss | " << fmt_number(ev->before_save, 4) << " before the save, "
       << fmt_number(ev->after_restore, 4) << " after the restore |\n";
  const auto* stages = m.memory && m.memory->stages ? &*m.memory->stages : nullptr;
  if (stages && !stages->empty()) {
    md << "\nPeak memory per stage (device total " << fmt_bytes(m.memory->device_total_bytes) << "):\n\n"
       << "| stage | peak allocated | peak reserved | peak RSS |\n|---|---|---|---|\n";
    for (const auto& name : detail::memory_stage_order(r)) {
      const StageMemory& v = stages->at(name);
      md << "| " << name << " | " << fmt_bytes(v.peak_allocated_bytes) << " | " << fmt_bytes(v.peak_reserved_bytes)
         << " | " << fmt_bytes(v.peak_rss_bytes) << " |\n";
    }
  }
  // The profiled step's operators and kernels with the most self time (from profile.json).
  for (const auto& st : or_empty(r.stages))
    if (const auto& prof = or_empty(st.figures).profile; prof && prof->top && !prof->top->empty()) {
      md << "\nTop operators of the profiled step (step " << text_of(prof->step) << ", by self time; "
         << text_of(prof->file)
         << "):\n\n| operator | on | self time | share | total | calls |\n|---|---|---|---|---|---|\n";
      for (const auto& op : *prof->top) {
        const double share = prof->self_s && *prof->self_s > 0 && op.self_s ? 100.0 * *op.self_s / *prof->self_s : -1;
        std::string name = for_terminal(op.name.value_or(""));
        std::replace(name.begin(), name.end(), '|', '/');  // a cell of its own
        md << "| " << name << " | " << text_of(op.device) << " | " << fmt_ms(op.self_s) << " | "
           << (share >= 0 ? fmt_number(share, 1) + "%" : std::string("n/a")) << " | " << fmt_ms(op.total_s) << " | "
           << text_of(op.calls) << " |\n";
      }
    }
}

// report.md's "Environment": what ran, from the pinned manifest (docs/manifest.md).
void write_environment_md(std::ostream& md, const RunReport& r) {
  const AnchorBuild& build = or_empty(r.anchor);
  md << "\n## Environment\n\n- anchor " << text_of(build.version) << " (commit " << text_of(build.git_commit) << ")\n";
  if (!r.manifest) {
    md << "- not pinned: the pilot stopped before its pin stage\n";
    return;
  }
  const Manifest& man = *r.manifest;
  const Dependencies& deps = or_empty(man.dependencies);
  const DeviceFacts& device = or_empty(man.device);
  const HostFacts& host = or_empty(man.host);
  const ThreadFacts& threads = or_empty(man.threads);
  const BlasFacts& blas = or_empty(threads.blas);
  md << "- LibTorch " << text_of(deps.libtorch) << "; CUDA runtime " << text_of(deps.cuda_runtime) << ", driver "
     << text_of(deps.cuda_driver) << ", cuDNN " << text_of(deps.cudnn) << ", NCCL " << text_of(deps.nccl) << "; HIP "
     << text_of(deps.hip_runtime) << "\n";
  md << "- device: " << text_of(device.accelerator) << ", " << text_of(device.count) << " visible";
  for (const auto& d : or_empty(device.devices)) md << "; " << text_of(d.name);
  md << "\n- host " << text_of(host.hostname) << ": " << text_of(host.cpu_model) << ", " << text_of(host.cpu_count)
     << " CPUs, " << fmt_bytes(host.memory_total_bytes) << "; " << text_of(or_empty(deps.os).pretty_name) << ", glibc "
     << text_of(deps.glibc) << "\n";
  md << "- threads: run.threads " << text_of(threads.run_threads) << " (intra-op " << text_of(threads.intra_op)
     << ", inter-op " << text_of(threads.inter_op) << ", BLAS " << text_of(blas.library) << " " << text_of(blas.threads)
     << ")\n";
  md << "- container: " << or_empty(man.container).digest.value_or("no digest")
     << "\n- the manifest's SHA-256: " << text_of(r.manifest_sha256) << " (every pinned input and library)\n";
}

std::string stage_seconds(const Stage& s, const char* none) { return s.seconds ? fmt_seconds(*s.seconds) : none; }

// report.md's title, outcome and stage table.
void write_stages_md(std::ostream& md, const RunReport& r) {
  md << "# anchor pilot " << r.run_id.value_or("") << "\n\n";
  md << "**" << r.status.value_or("") << "**: " << r.message.value_or("") << "\n\n";
  md << "| stage | status | time | figure |\n|---|---|---|---|\n";
  for (const auto& s : or_empty(r.stages))
    md << "| " << s.stage.value_or("") << " | " << s.status.value_or("") << " | " << stage_seconds(s, "") << " | "
       << stage_figure(s) << " |\n";
}

// A restore onto another world size re-derives the RNG of the ranks it lacks.
bool resharded(const Opt<RngRestore>& rr) {
  return rr && rr->saved_world_size.value_or(0) != rr->world_size.value_or(0);
}
std::string rederived(const RngRestore& rr) { return rr.rederived.value_or(Json::array()).dump(); }

// Where the run started: initialisation, or the checkpoint it restored.
void write_start_md(std::ostream& md, const Start& st) {
  md << "\n## Start\n\n";
  const bool latest = st.from.value_or("init") == "latest";
  if (!latest || !st.step) {
    md << (latest ? "From the newest committed checkpoint (none was restored).\n"
                  : "From initialisation (run.seed).\n");
    return;
  }
  md << "From step " << *st.step << ": `" << st.dir.value_or("") << "` (manifest sha256 "
     << st.manifest_sha256.value_or("") << "), written by run " << st.run_id.value_or("(not recorded)") << " with "
     << st.world_size.value_or(1) << " rank(s), " << st.strategy.value_or("") << ".\n";
  for (const auto& sk : or_empty(st.skipped))
    md << "- passed over " << sk.dir.value_or("") << ": " << sk.reason.value_or("") << "\n";
  for (const auto& d : or_empty(st.config_differences))
    md << "- config " << d.key.value_or("") << ": " << d.checkpoint.value_or(Json()).dump() << " in the checkpoint, "
       << d.config.value_or(Json()).dump() << " here" << (d.refused.value_or(false) ? " (REFUSED)" : "") << "\n";
  if (resharded(st.rng_restore))
    md << "- restored from " << st.rng_restore->saved_world_size.value_or(0) << " rank(s) to "
       << st.rng_restore->world_size.value_or(0) << ": RNG re-derived " << rederived(*st.rng_restore) << "\n";
}

void write_resume_md(std::ostream& md, const Resume& resume) {
  md << "\n## Resume\n\nVerdict: " << resume.verdict.value_or("") << " (" << resume.mode.value_or("") << ")\n\n";
  for (const auto& c : or_empty(resume.checks))
    if (!c.ok.value_or(false)) md << "- DIVERGED " << c.name.value_or("") << ": " << c.detail.value_or("") << "\n";
}

void precision_row(std::ostream& md, const char* what, const PrecisionFigure& f) {
  md << "| " << what << " | " << f.fp32.value_or(0.0) << " | " << f.value.value_or(0.0) << " | "
     << f.rel_diff.value_or(0.0) << (f.flagged.value_or(false) ? " FLAGGED" : "") << " |\n";
}

// The loss, the global gradient norm and the parameters of the precision check, as a table.
void write_precision_table_md(std::ostream& md, const Precision& p) {
  md << "| value | fp32 | " << p.precision.value_or("") << " | relative difference |\n|---|---|---|---|\n";
  precision_row(md, "loss", or_empty(p.loss));
  precision_row(md, "global gradient norm", or_empty(p.grad_norm));
  const PrecisionParameters& params = or_empty(p.parameters);
  const bool any_flag = !or_empty(params.flagged).empty();
  md << "\n"
     << (any_flag ? "Parameters whose gradient norm differs beyond the tolerance:"
                  : "Largest per-parameter gradient-norm differences (none beyond the tolerance):")
     << "\n\n| parameter | grad norm fp32 | grad norm | relative difference | relative error "
        "|\n|---|---|---|---|---|\n";
  for (const auto& x : any_flag ? *params.flagged : or_empty(params.largest))
    md << "| " << x.name.value_or("") << " | " << x.grad_norm_fp32.value_or(0.0) << " | " << x.grad_norm.value_or(0.0)
       << " | " << x.rel_diff.value_or(0.0) << " | " << x.rel_error.value_or(0.0) << " |\n";
}

void write_precision_md(std::ostream& md, const Precision& p) {
  md << "\n## Precision\n\n"
     << p.precision.value_or("") << " vs " << p.reference.value_or("fp32") << " on the step " << p.step.value_or(0)
     << " from the same state: **" << p.verdict.value_or("") << "** (tolerance " << p.tolerance.value_or(0.0)
     << ")\n\n";
  for (const auto& n : or_empty(p.non_finite))
    md << "- NON-FINITE " << n.what.value_or("") << " " << n.tensor.value_or("") << "\n";
  if (p.loss) write_precision_table_md(md, p);
}

void write_loss_scaler_md(std::ostream& md, const LossScaler& ls) {
  const auto& skipped = or_empty(ls.skipped_steps);
  md << "\n## Loss scaler\n\nScale saved " << ls.saved_scale.value_or(0.0) << ", restored "
     << ls.restored_scale.value_or(0.0) << ", final " << ls.final_scale.value_or(0.0)
     << ". Skipped steps: " << (skipped.empty() ? "none" : "") << "\n\n";
  for (const auto& st : skipped)
    md << "- step " << text_of(st.step) << " (" << st.part.value_or("") << "): inf/NaN gradient in "
       << st.nonfinite_grad.value_or("") << " at scale " << text_of(st.loss_scale) << "\n";
}

void write_ranks_md(std::ostream& md, const Distributed& d) {
  const std::int64_t node_count = d.nodes.value_or(1);
  const bool nodes = node_count > 1;  // several nodes: which one each rank ran on
  const std::string backend = d.backend.value_or("");
  md << "\n## Ranks\n\nStrategy " << d.strategy.value_or("") << ", " << d.world_size.value_or(0) << " ranks"
     << (nodes ? " on " + std::to_string(node_count) + " nodes" : std::string())
     << (backend.empty() ? std::string() : " over " + backend)
     << ". Per rank after the measured step (DDP: every rank holds all of it):\n\n"
     << "| rank |" << (nodes ? " node | host |" : "")
     << " optimizer bytes | DDP | gradient bytes | DDP | comm_s |\n|---|" << (nodes ? "---|---|" : "")
     << "---|---|---|---|---|\n";
  for (const auto& r : or_empty(d.per_rank)) {
    md << "| " << r.rank.value_or(0) << " | ";
    if (nodes) md << r.node.value_or(0) << " | " << r.host.value_or("") << " | ";
    md << r.optimizer_bytes.value_or(0) << " | " << r.optimizer_bytes_ddp.value_or(0) << " | "
       << r.gradient_bytes.value_or(0) << " | " << r.gradient_bytes_ddp.value_or(0) << " | " << r.comm_s.value_or(0.0)
       << " |\n";
  }
  if (resharded(d.rng_restore))
    md << "\nRestored from " << d.rng_restore->saved_world_size.value_or(0) << " ranks: RNG re-derived "
       << rederived(*d.rng_restore) << "\n";
}

// The plan (or why there is none), then whether the report is signed.
void write_plan_and_signed_md(std::ostream& md, const RunReport& r) {
  if (r.plan && r.plan->is_object()) {
    const Json& plan = *r.plan;
    if (plan.contains("recommendation"))  // the whole plan, as `anchor plan` prints it
      md << "\n## Plan\n\n```text\n" << plan::format_plan(plan) << "```\n";
    else if (const auto why = plan.find("why"); why != plan.end() && why->is_string())
      md << "\n## Plan\n\nNot planned: " << why->get<std::string>() << "\n";
  }
  md << "\nSigned: "
     << (r.is_signed.value_or(false) ? "yes, key " + r.signer_key_id.value_or("") + " (report.intoto.json)"
                                     : "NO: " + r.unsigned_reason.value_or("not signed"))
     << "\n";
}

// report.md, all of it.
std::string report_md(const RunReport& r) {
  std::ostringstream md;
  write_stages_md(md, r);
  if (r.start) write_start_md(md, *r.start);
  if (r.resume) write_resume_md(md, *r.resume);
  if (r.precision) write_precision_md(md, *r.precision);
  if (r.loss_scaler && r.loss_scaler->enabled.value_or(false)) write_loss_scaler_md(md, *r.loss_scaler);
  if (r.distributed) write_ranks_md(md, *r.distributed);
  if (r.measurements && r.measurements->activation_checkpointing)
    md << "\n## Activation checkpointing\n\n" << r.measurements->activation_checkpointing->trade.value_or("") << "\n";
  write_measurements_md(md, r);
  write_environment_md(md, r);
  write_plan_and_signed_md(md, r);
  return md.str();
}

}  // namespace

namespace detail {
void measurements_md(std::ostream& md, const RunReport& report) { write_measurements_md(md, report); }
void environment_md(std::ostream& md, const RunReport& report) { write_environment_md(md, report); }
std::string bytes_text(double bytes) { return fmt_bytes(bytes); }
// In the order the stages ran, then any the stage list lacks.
std::vector<std::string> memory_stage_order(const RunReport& r) {
  std::vector<std::string> order;
  const auto* stages = r.measurements && r.measurements->memory && r.measurements->memory->stages
                           ? &*r.measurements->memory->stages
                           : nullptr;
  if (!stages) return order;
  // A step's life first (a program's pilot has no load, train or eval stage of its own), then the stages as they ran.
  for (const char* s : {"load", "train", "eval", "checkpoint_save", "restore", "eval_after_restore"})
    if (stages->count(s)) order.emplace_back(s);
  for (const auto& st : or_empty(r.stages))
    if (st.stage && stages->count(*st.stage) && std::find(order.begin(), order.end(), *st.stage) == order.end())
      order.push_back(*st.stage);
  for (const auto& [stage, v] : *stages)
    if (std::find(order.begin(), order.end(), stage) == order.end()) order.push_back(stage);
  return order;
}

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
  micro_batch_ = cfg.train.micro_batch, grad_accum_ = cfg.train.grad_accum, precision_ = cfg.train.precision;
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
nlohmann::json step_section(const protocol::WorkerResult& ref, int micro_batch, int grad_accum) {
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
          {"micro_batch", micro_batch},
          {"grad_accum", grad_accum},
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
                 {"resume", train::steps_json(res.resume_steps)},
                 {"numbered_from", kStepsNumberedFrom}};
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
  nlohmann::json m = nlohmann::json::object();
  m["model"] = ref.model.to_json();
  m["step"] = step_section(ref, micro_batch_, grad_accum_);
  // Each stage's peak memory, and the checkpoint I/O of the save and the restore, from the stages' figures.
  nlohmann::json stages = nlohmann::json::object();
  const RunReport so_far = typed();  // named: the loop reads into it
  for (const auto& st : or_empty(so_far.stages)) {
    const std::string n = st.stage.value_or("");
    const StageFigures& f = or_empty(st.figures);
    if (f.memory) stages[n] = section_to_json(*f.memory);
    IoFigures io;
    io.bytes = f.bytes, io.seconds = f.seconds, io.gb_per_s = f.gb_per_s;
    if (n == "checkpoint_save") m["checkpoint_save"] = section_to_json(io);
    if (n == "restore") {
      io.bytes = f.bytes.value_or(0), io.seconds = f.seconds.value_or(0.0), io.gb_per_s = f.gb_per_s.value_or(0.0);
      io.model_build_s = f.model_build_s.value_or(0.0), io.load_state_s = f.load_state_s.value_or(0.0),
      io.state_digest_s = f.state_digest_s.value_or(0.0);
      m["restore"] = section_to_json(io);
    }
  }
  const auto& step_mem = ref.step_memory.tensors;
  m["memory"] = {{"source", step_mem.source},
                 {"precision", precision_},
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

void Report::set_train_steps(const nlohmann::json& steps) {
  // Each stage's peak memory so far, as set_resume gives it: what report.md and report.html draw.
  nlohmann::json stages = nlohmann::json::object();
  const RunReport so_far = typed();  // named: the loop reads into it
  for (const auto& st : or_empty(so_far.stages))
    if (const StageFigures& f = or_empty(st.figures); f.memory)
      stages[st.stage.value_or("")] = section_to_json(*f.memory);
  nlohmann::json patch = {{"steps", {{"train", steps}, {"numbered_from", kStepsNumberedFrom}}}};
  if (!stages.empty()) patch.update({{"measurements", {{"memory", {{"stages", stages}}}}}});
  j_.merge_patch(patch);
}

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
  // The typed report is what every view reads, and what report.json is written from.
  const RunReport r = RunReport::from_json(j_);
  fs::atomic_write_file(run_dir + "/report.json", dump_json(r.to_json(), 2) + "\n");
  fs::atomic_write_file(run_dir + "/report.md", report_md(r));
  // The trace, then the page that draws its stages (docs/report.md, "report.html" and "trace.json").
  // Views of report.json and events.jsonl: one that cannot be written (a full disk) is a warning,
  // never the pilot's outcome, and no stale copy is left to be signed as this run's.
  try {
    fs::atomic_write_file(run_dir + "/report.html", report_html(r, write_trace(run_dir)));
  } catch (const std::exception& e) {
    ANCHOR_LOG_WARN("report", "report.html and trace.json not written: {}", printable(e.what()));
    for (const char* view : {"/report.html", "/trace.json"}) ::unlink((run_dir + view).c_str());
  }
}

void Report::print_summary(std::ostream& os) const {
  const RunReport r = RunReport::from_json(j_);
  os << "\n  " << std::left << std::setw(20) << "stage" << std::setw(8) << "status" << std::setw(11) << "time"
     << "figure\n";
  for (const auto& s : or_empty(r.stages))
    os << "  " << std::setw(20) << s.stage.value_or("") << std::setw(8) << s.status.value_or("") << std::setw(11)
       << stage_seconds(s, "-") << stage_figure(s) << "\n";
  os << "\n  " << r.status.value_or("") << ": " << capped(r.message.value_or("")) << "\n\n";
}

std::string junit_xml(const RunReport& r, const std::vector<std::string>& planned) {
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double total = 0;
  std::ostringstream cases;
  std::string stopped_in;  // the stage the pilot stopped in, for the skipped ones' message
  std::vector<std::string> ran;
  // A pilot that exits 1 stopped on a crash (a worker killed, an I/O error): its failed stage is an
  // <error>, the stage never got to its answer. Exit 3 is a check that failed: a <failure>.
  const bool crashed = r.exit_code.value_or(0) == static_cast<int>(ExitCode::kRuntime);
  for (const auto& s : or_empty(r.stages)) {
    ++tests;
    const std::string name = s.stage.value_or(""), status = s.status.value_or("");
    const double seconds = s.seconds.value_or(0.0);
    total += seconds;
    ran.push_back(name);
    std::string why;
    if (status != "passed") {
      ++(crashed ? errors : failures);
      why = s.error.value_or(status.empty() ? std::string("failed") : status);
      stopped_in = name;  // the last that failed: later stages may still run after a failure (compare)
    }
    testcase(cases, "anchor.pilot.stage", name, junit_seconds(seconds), status != "passed" ? &why : nullptr, "stage",
             nullptr, crashed ? "error" : "failure");
  }
  // A pilot that failed without a failed stage (interrupted, or refused
  // after its last stage): its outcome is a failed case, so CI never reads a
  // failed pilot as green.
  const std::string status = r.status.value_or(""), message = r.message.value_or("");
  if (failures == 0 && errors == 0 && !status.empty() && status != "passed") {
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
  if (r.resume)
    for (const auto& c : or_empty(r.resume->checks)) {
      ++tests;
      const bool ok = c.ok.value_or(false);
      const std::string detail = c.detail.value_or("");
      if (!ok) ++failures;
      testcase(cases, "anchor.pilot.resume", c.name.value_or(""), "", ok ? nullptr : &detail, "resume");
    }
  const std::string created = r.created_at.value_or("");
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"anchor pilot\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" time=\"" << junit_seconds(total) << "\">\n"
    << "  <testsuite name=\"anchor pilot " << xml_escape(r.run_id.value_or("")) << "\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\""
    << junit_seconds(total) << "\" timestamp=\"" << xml_escape(created.substr(0, 19)) << "\" hostname=\""
    << xml_escape(proc::host_name()) << "\">\n"
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
