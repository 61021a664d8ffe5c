// The plan's inputs from a typed report (plan_inputs.hpp): strict, because a
// plan made from a figure that is not there would be a guess.
#include "anchor/run_report/plan_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "anchor/error.hpp"
#include "anchor/plan/memory_model.hpp"

namespace anchor::run_report {
namespace {

const char* const kReportHint =
    "the report needs the measurements of a pilot that measures memory and the model "
    "(measurements.model, .step, .memory, .checkpoint_save; docs/plan.md); re-run "
    "`anchor pilot` with this anchor";

template <class T>
const T* ptr(const Opt<T>& v) {
  return v ? &*v : nullptr;
}

// A number the plan needs: the typed field, or the number the section holds
// under `key` in another number type (a count written as 2.5); Error naming
// `where`/`key` when the section or the key is missing or null, or holds
// something other than a number.
template <class S, class T>
double need(const S* section, Opt<T> S::*field, const char* key, const std::string& where) {
  const std::string path = where + "/" + key;
  if (section && section->*field) return static_cast<double>(*(section->*field));
  if (section)
    if (const auto it = section->keys.find(key); it != section->keys.end() && !it->is_null()) {
      if (it->is_number()) return it->template get<double>();
      throw Error(ErrorKind::kUsage, "report: " + path + " is " + it->dump() + ", expected a number", kReportHint);
    }
  throw Error(ErrorKind::kUsage, "report: missing " + path, kReportHint);
}

template <class S, class T>
double positive(const S* section, Opt<T> S::*field, const char* key, const std::string& where) {
  const double v = need(section, field, key, where);
  if (!(v > 0))
    throw Error(ErrorKind::kUsage, "report: " + where + "/" + key + " is " + std::to_string(v) + ", expected > 0",
                kReportHint);
  return v;
}

// A number the report may leave out (absent or null): `otherwise`.
template <class S, class T>
double optional(const S* section, Opt<T> S::*field, const char* key, const std::string& where, double otherwise) {
  if (!section || (!(section->*field) && (!section->keys.contains(key) || section->keys.at(key).is_null())))
    return otherwise;
  return need(section, field, key, where);
}

template <class S>
std::string need_text(const S* section, Opt<std::string> S::*field, const char* key, const std::string& where) {
  if (section && section->*field) return *(section->*field);
  if (section)
    if (const auto it = section->keys.find(key); it != section->keys.end() && !it->is_null())
      throw Error(ErrorKind::kUsage, "report: " + where + "/" + key + " is " + it->dump() + ", expected a string",
                  kReportHint);
  throw Error(ErrorKind::kUsage, "report: missing " + where + "/" + key, kReportHint);
}

constexpr const char* kModel = "measurements/model";

void read_memory(const MemoryFigures* mem, plan::Measured& m) {
  const std::string where = "measurements/memory";
  m.memory_source = need_text(mem, &MemoryFigures::source, "source", where);
  m.precision = plan::parse_precision(need_text(mem, &MemoryFigures::precision, "precision", where));
  if (!mem || !mem->points) {
    if (mem && mem->keys.contains("points") && !mem->keys.at("points").is_null())
      throw Error(ErrorKind::kUsage, "report: measurements.memory.points is not a list of objects", kReportHint);
    throw Error(ErrorKind::kUsage, "report: missing " + where + "/points", kReportHint);
  }
  for (std::size_t i = 0; i < mem->points->size(); ++i) {
    const MemoryPointFigures* pt = &(*mem->points)[i];
    const std::string at = where + "/points/" + std::to_string(i);
    m.memory_points.push_back({static_cast<std::int64_t>(need(pt, &MemoryPointFigures::micro_batch, "micro_batch", at)),
                               static_cast<std::int64_t>(need(pt, &MemoryPointFigures::seq_len, "seq_len", at)),
                               need(pt, &MemoryPointFigures::peak_allocated_bytes, "peak_allocated_bytes", at)});
  }
  const StateBytes* state = ptr(mem->state_bytes);
  if (!state && mem->keys.contains("state_bytes"))
    throw Error(ErrorKind::kUsage, "report: " + where + "/state_bytes is not an object", kReportHint);
  m.state.parameters = need(state, &StateBytes::parameters, "parameters", where + "/state_bytes");
  m.state.gradients = need(state, &StateBytes::gradients, "gradients", where + "/state_bytes");
  m.state.optimizer = need(state, &StateBytes::optimizer, "optimizer", where + "/state_bytes");
  if (mem->baseline_bytes || (mem->keys.contains("baseline_bytes") && !mem->keys.at("baseline_bytes").is_null()))
    m.baseline_bytes = need(mem, &MemoryFigures::baseline_bytes, "baseline_bytes", where);
}

// A program reports its parameters and shape; its FLOPs per token are 6N plus
// the attention term when it said n_layer and n_embd, or what it said.
void read_program_model(const ModelFigures* model, plan::Measured& m) {
  m.program = true;
  m.micro_batch =
      static_cast<std::int64_t>(positive(model, &ModelFigures::micro_batch, "micro_batch", kModel));  // bounded below
  m.seq_len = static_cast<std::int64_t>(positive(model, &ModelFigures::seq_len, "seq_len", kModel));
  m.grad_accum = static_cast<int>(optional(model, &ModelFigures::grad_accum, "grad_accum", kModel, 1));
  m.n_layer = static_cast<int>(optional(model, &ModelFigures::n_layer, "n_layer", kModel, 0));
  m.n_embd = optional(model, &ModelFigures::n_embd, "n_embd", kModel, 0);
  m.flops_per_token = positive(model, &ModelFigures::flops_per_token, "flops_per_token", kModel);
  m.flops_source = need_text(model, &ModelFigures::flops_source, "flops_source", kModel);
  if (model->device) m.device = *model->device;  // where the program ran its step
  constexpr double kMaxSize = 2147483647.0;
  for (const auto& [k, field] :
       {std::pair<const char*, Opt<double> ModelFigures::*>{"micro_batch", &ModelFigures::micro_batch},
        {"seq_len", &ModelFigures::seq_len},
        {"grad_accum", &ModelFigures::grad_accum},
        {"n_layer", &ModelFigures::n_layer},
        {"n_embd", &ModelFigures::n_embd}})
    if (optional(model, field, k, kModel, 1) > kMaxSize)
      throw Error(ErrorKind::kUsage, std::string("report: measurements.model.") + k + " is above 2^31", kReportHint);
  if (m.grad_accum < 1) throw Error(ErrorKind::kUsage, "report: measurements.model.grad_accum is below 1", kReportHint);
}

}  // namespace

namespace {

// A figure the plan may use: finite and above 0, else 0 (not measured, or a
// report's value no plan should rest on).
double usable(const Opt<double>& v) { return v && std::isfinite(*v) && *v > 0 ? *v : 0.0; }

// The communication the pilot's ranks measured, the pipeline's commands as
// timed on their samples, and the node its preflight measured.
void read_node(const RunReport& r, plan::Measured& m) {
  if (const Distributed* d = ptr(r.distributed); d && d->world_size.value_or(1) > 1) {
    m.world_size = static_cast<int>(std::clamp<std::int64_t>(*d->world_size, 1, 1 << 20));
    m.strategy = d->strategy.value_or("");
    for (const auto& rank : or_empty(d->per_rank))
      if (const double c = usable(rank.comm_s); c > 0 && (m.comm_s_min == 0 || c < m.comm_s_min)) m.comm_s_min = c;
  }
  if (const PipelineFigures* pl = ptr(r.pipeline)) {
    if (const PipelineCommand* c = ptr(pl->download); c && usable(c->bytes) > 0 && usable(c->seconds) > 0) {
      m.download_bytes = *c->bytes;
      m.download_seconds = *c->seconds;
    }
    if (const PipelineCommand* c = ptr(pl->preprocess); c && usable(c->bytes) > 0 && usable(c->seconds) > 0) {
      m.preprocess_bytes = *c->bytes;
      m.preprocess_seconds = *c->seconds;
    }
  }
  const Node* n = ptr(r.node);
  if (!n) return;
  if (const NodeRate* data = ptr(n->data)) {
    m.node_input_tokens_per_s = usable(data->tokens_per_s);
    m.node_read_mb_per_s = usable(data->mb_per_s);
  }
  if (const AllReduceFigures* a = ptr(n->all_reduce); a && a->ranks.value_or(0) > 1) {
    m.allreduce_ranks = static_cast<int>(std::min<std::int64_t>(*a->ranks, 1 << 20));
    m.allreduce_latency_s = usable(a->latency_us) * 1e-6;
    m.allreduce_busbw = usable(a->busbw_gb_per_s) * 1e9;
    m.allreduce_backend = a->backend.value_or("");
    if (m.allreduce_busbw <= 0) m.allreduce_ranks = 0;
  }
}

}  // namespace

plan::Measured measured_from_report(const RunReport& r) {
  plan::Measured m;
  m.device = r.device.value_or("unknown");
  const Measurements* ms = ptr(r.measurements);
  const ModelFigures* model = ms ? ptr(ms->model) : nullptr;
  m.parameters = positive(model, &ModelFigures::parameters, "parameters", kModel);
  if (r.program || r.keys.contains("program")) {
    read_program_model(model, m);
  } else {
    m.n_layer = static_cast<int>(positive(model, &ModelFigures::n_layer, "n_layer", kModel));
    m.n_embd = positive(model, &ModelFigures::n_embd, "n_embd", kModel);
    m.seq_len = static_cast<std::int64_t>(positive(model, &ModelFigures::seq_len, "seq_len", kModel));
    m.flops_per_token = positive(model, &ModelFigures::flops_per_token, "flops_per_token", kModel);
    m.flops_source = "the built-in model's 6N + 12 x n_layer x n_embd x seq_len";
    if (model->n_head) m.n_head = static_cast<int>(*model->n_head);
    if (model->vocab_size) m.vocab_size = static_cast<int>(*model->vocab_size);
  }
  const MeasuredStep* step = ms ? ptr(ms->step) : nullptr;
  const std::string at_step = "measurements/step";
  m.step_seconds = positive(step, &MeasuredStep::seconds, "seconds", at_step);
  m.step_tokens = positive(step, &MeasuredStep::tokens, "tokens", at_step);
  m.tokens_per_s = positive(step, &MeasuredStep::tokens_per_s, "tokens_per_s", at_step);
  m.data_wait_s = need(step, &MeasuredStep::data_wait_s, "data_wait_s", at_step);
  m.compute_s = need(step, &MeasuredStep::compute_s, "compute_s", at_step);
  m.stall_percent = need(step, &MeasuredStep::stall_percent, "stall_percent", at_step);
  const IoFigures* save = ms ? ptr(ms->checkpoint_save) : nullptr;
  m.save_bytes = positive(save, &IoFigures::bytes, "bytes", "measurements/checkpoint_save");
  m.save_seconds = positive(save, &IoFigures::seconds, "seconds", "measurements/checkpoint_save");
  read_memory(ms ? ptr(ms->memory) : nullptr, m);
  if (r.manifest && r.manifest->dependencies && r.manifest->dependencies->libtorch)
    m.libtorch = *r.manifest->dependencies->libtorch;
  else if (r.program && r.program->versions && r.program->versions->torch)
    m.libtorch = *r.program->versions->torch;
  read_node(r, m);
  for (const auto& s : or_empty(r.stages)) {
    const bool passed = s.status == "passed";
    if (passed) m.stages_passed.push_back(s.stage.value_or(""));
    const StageFigures& f = or_empty(s.figures);
    // The export copied off the node: the rate the plan's copies take.
    if (s.stage == "copy_off" && passed && f.bytes.value_or(0) > 0 && f.seconds.value_or(0) > 0) {
      m.copy_off_bytes = static_cast<double>(*f.bytes);
      m.copy_off_seconds = *f.seconds;
    }
    // The built-in loader's training windows: how much data the run has (a program's is not known).
    if (s.stage == "load" && f.train_windows.value_or(0) > 0) m.train_sequences = *f.train_windows;
  }
  return m;
}

}  // namespace anchor::run_report
