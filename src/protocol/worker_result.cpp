#include "anchor/protocol/worker_result.hpp"

#include <stdexcept>

#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::protocol {
namespace {

using nlohmann::json;

std::vector<train::StepRecord> steps_of(const JsonFields& f, const char* key) {
  std::vector<train::StepRecord> out;
  const auto& a = f.array(key);
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(train::StepRecord::from_json(a[i], JsonFields::item(f.path(key), i)));
  return out;
}

train::StateDigest digest_of(const JsonFields& f, const char* key) {
  return train::StateDigest::from_json(f.object(key), f.path(key));
}

// Each element an object (its own fields pass through to the report).
const json& objects(const JsonFields& f, const char* key) {
  const auto& a = f.array(key);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!a[i].is_object()) JsonFields(a[i], JsonFields::item(f.path(key), i));  // throws, naming it
  return a;
}

void check_stages(const JsonFields& f) {
  const auto& a = objects(f, "stages");
  for (std::size_t i = 0; i < a.size(); ++i) {
    JsonFields s(a[i], JsonFields::item("stages", i));
    s.str("stage");
    s.str("status");
    s.number("seconds");
    s.object("figures");
  }
}

template <typename T>
std::vector<T> items_of(const JsonFields& f, const char* key) {
  std::vector<T> out;
  const auto& a = f.array(key);
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(T::from_json(a[i], JsonFields::item(f.path(key), i)));
  return out;
}

template <typename T>
json array_of(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& x : v) a.push_back(x.to_json());
  return a;
}

std::int64_t bytes(const JsonFields& f, const char* key) {
  const std::int64_t v = f.integer(key);
  if (v < 0) throw std::invalid_argument(f.path(key) + " is " + std::to_string(v) + ", not a byte count");
  return v;
}

}  // namespace

json ModelInfo::to_json() const {
  return {{"parameters", parameters},
          {"n_layer", n_layer},
          {"n_head", n_head},
          {"n_embd", n_embd},
          {"vocab_size", vocab_size},
          {"seq_len", seq_len},
          {"flops_per_token", flops_per_token},
          {"source", source},
          {"flops_per_token_note", flops_per_token_note},
          {"attention", attention}};
}

ModelInfo ModelInfo::from_json(const json& j, const std::string& where) {
  const JsonFields f(j, where);
  ModelInfo m;
  m.parameters = bytes(f, "parameters");
  m.n_layer = f.integer("n_layer");
  m.n_head = f.integer("n_head");
  m.n_embd = f.integer("n_embd");
  m.vocab_size = f.integer("vocab_size");
  m.seq_len = f.integer("seq_len");
  m.flops_per_token = f.number("flops_per_token");
  m.source = f.str("source");
  m.flops_per_token_note = f.str("flops_per_token_note");
  m.attention = f.str("attention");
  return m;
}

json MemoryReading::to_json() const {
  json j = measure::memory_json(tensors, process);
  if (!device_report.empty()) j["device_report"] = device_report;
  return j;
}

MemoryReading MemoryReading::from_json(const json& j, const std::string& where) {
  const JsonFields f(j, where);
  MemoryReading m;
  m.tensors.allocated_bytes = bytes(f, "allocated_bytes");
  m.tensors.peak_allocated_bytes = bytes(f, "peak_allocated_bytes");
  m.tensors.source = f.str("source");
  if (f.has("reserved_bytes")) {
    m.tensors.reserved_bytes = bytes(f, "reserved_bytes");
    m.tensors.peak_reserved_bytes = bytes(f, "peak_reserved_bytes");
  }
  if (f.has("device_total_bytes")) {
    m.tensors.device_total_bytes = bytes(f, "device_total_bytes");
    m.tensors.device_free_bytes = bytes(f, "device_free_bytes");
  }
  m.process.rss_bytes = static_cast<std::uint64_t>(bytes(f, "rss_bytes"));
  m.process.hwm_bytes = static_cast<std::uint64_t>(bytes(f, "peak_rss_bytes"));
  m.device_report = f.str_or("device_report", "");
  return m;
}

json MemoryPoint::to_json() const {
  json j = {{"micro_batch", micro_batch},
            {"seq_len", seq_len},
            {"peak_allocated_bytes", peak_allocated_bytes},
            {"peak_reserved_bytes", peak_reserved_bytes},
            {"state_bytes", state_bytes.to_json()},
            {"from", from}};
  if (seconds) j["seconds"] = *seconds;
  return j;
}

MemoryPoint MemoryPoint::from_json(const json& j, const std::string& where) {
  const JsonFields f(j, where);
  MemoryPoint p;
  p.micro_batch = f.integer("micro_batch");
  p.seq_len = f.integer("seq_len");
  if (p.micro_batch < 1 || p.seq_len < 1)
    throw std::invalid_argument(where + " is a step of " + std::to_string(p.micro_batch) + " x " +
                                std::to_string(p.seq_len) + " tokens, not a shape");
  p.peak_allocated_bytes = bytes(f, "peak_allocated_bytes");
  p.peak_reserved_bytes = f.integer_or("peak_reserved_bytes", -1);
  p.state_bytes = train::StateBytes::from_json(f.object("state_bytes"), f.path("state_bytes"));
  p.from = f.str("from");
  if (p.from != "reference" && p.from != "probe")
    throw std::invalid_argument(f.path("from") + " is \"" + p.from + "\", expected reference or probe");
  p.seconds = f.optional_number("seconds");
  return p;
}

json SkippedDir::to_json() const { return {{"dir", dir}, {"reason", reason}}; }

SkippedDir SkippedDir::from_json(const json& j, const std::string& where) {
  const JsonFields f(j, where);
  return {f.str("dir"), f.str("reason")};
}

json WorkerResult::to_json() const {
  json j = {{"format", kWorkerResultFormat},
            {"role", role},
            {"pid", pid},
            {"memory", {{"rss_bytes", rss_bytes}, {"peak_rss_bytes", peak_rss_bytes}}},
            {"stages", stages}};
  if (world_size > 1) {
    j["rank"] = rank;
    j["world_size"] = world_size;
    j["backend"] = backend;
  }
  if (role == "reference") {
    j["start"] = start;
    j["model"] = model.to_json();
    j["loss_scaler_enabled"] = loss_scaler_enabled;
    if (!precision.is_null()) j["precision"] = precision;
    j["train_steps"] = train::steps_json(train_steps);
    j["reference_steps"] = train::steps_json(reference_steps);
    j["step_memory"] = step_memory.to_json();
    j["state_bytes"] = state_bytes.to_json();
    if (!sharding.is_null()) j["sharding"] = sharding;
    j["matmul_flops"] = matmul_flops;
    if (saved_step) j["saved_step"] = *saved_step;
    if (saved_state) j["saved_state"] = saved_state->to_json();
  } else if (role == "resume") {
    if (restored_step) j["restored_step"] = *restored_step;
    j["restored_dir"] = restored_dir;
    if (!restored_seen.empty()) j["restored_seen"] = restored_seen.to_json();
    j["skipped"] = array_of(skipped);
    if (restored_state) j["restored_state"] = restored_state->to_json();
    j["rng_restore"] = rng_restore;
    j["resume_steps"] = train::steps_json(resume_steps);
  } else if (role == "probe") {
    j["memory_points"] = array_of(memory_points);
    if (!activation_checkpointing.is_null()) j["activation_checkpointing"] = activation_checkpointing;
  }
  if (eval_loss) j["eval_loss"] = *eval_loss;
  if (final_state) j["final_state"] = final_state->to_json();
  return j;
}

WorkerResult WorkerResult::from_json(const json& j) {
  JsonFields f(j, "");
  const std::string format = f.str("format");
  if (format != kWorkerResultFormat)
    throw std::invalid_argument("format is \"" + format + "\"; this anchor reads \"" + kWorkerResultFormat + "\"");
  WorkerResult r;
  r.role = f.str("role");
  r.pid = f.integer("pid");
  JsonFields mem(f.object("memory"), "memory");
  r.rss_bytes = mem.integer("rss_bytes");
  r.peak_rss_bytes = mem.integer("peak_rss_bytes");
  check_stages(f);
  r.stages = f.array("stages");
  r.world_size = static_cast<int>(f.integer_or("world_size", 1));
  r.rank = static_cast<int>(f.integer_or("rank", 0));
  if (r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size)
    throw std::invalid_argument("rank " + std::to_string(r.rank) + " of world_size " + std::to_string(r.world_size) +
                                " is not a rank of that world");
  if (r.world_size > 1) r.backend = f.str("backend");

  if (r.role == "reference") {
    r.start = f.object("start");
    JsonFields(r.start, "start").str("from");
    r.model = ModelInfo::from_json(f.object("model"), "model");
    r.loss_scaler_enabled = f.boolean("loss_scaler_enabled");
    if (f.has("precision")) r.precision = f.object("precision");
    r.train_steps = steps_of(f, "train_steps");
    if (r.train_steps.empty()) throw std::invalid_argument("train_steps is empty: worker A reports its measured step");
    r.reference_steps = steps_of(f, "reference_steps");
    r.step_memory = MemoryReading::from_json(f.object("step_memory"), "step_memory");
    r.state_bytes = train::StateBytes::from_json(f.object("state_bytes"), "state_bytes");
    if (f.has("sharding")) r.sharding = f.object("sharding");
    r.matmul_flops = f.number("matmul_flops");
    r.saved_step = f.integer("saved_step");
    r.saved_state = digest_of(f, "saved_state");
  } else if (r.role == "resume") {
    r.restored_step = f.integer("restored_step");
    r.restored_dir = f.str("restored_dir");
    if (f.has("restored_seen")) {
      try {
        r.restored_seen = checkpoint::VerifiedDir::from_json(f.object("restored_seen"));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(f.path("restored_seen") + ": " + e.what());
      }
    }
    r.skipped = items_of<SkippedDir>(f, "skipped");
    r.restored_state = digest_of(f, "restored_state");
    r.rng_restore = f.object("rng_restore");
    r.resume_steps = steps_of(f, "resume_steps");
  } else if (r.role == "probe") {
    r.memory_points = items_of<MemoryPoint>(f, "memory_points");
    if (f.has("activation_checkpointing")) r.activation_checkpointing = f.object("activation_checkpointing");
    return r;
  } else {
    throw std::invalid_argument("role is \"" + r.role + "\", expected reference, resume or probe");
  }
  r.eval_loss = f.number("eval_loss");
  r.final_state = digest_of(f, "final_state");
  return r;
}

WorkerResult read_worker_result(const std::string& path, const std::string& role) {
  const char* hint =
      "the pilot's workers run anchor-torch from the same build as anchor; rebuild both (`make build`), "
      "and leave <run dir>/work to the pilot that owns it";
  const std::string text = fs::read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kRuntime, "worker result " + printable(path) + " is not JSON: " + e.what(), hint);
  }
  WorkerResult r;
  try {
    r = WorkerResult::from_json(doc);
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorKind::kRuntime, "worker result " + printable(path) + ": " + printable(e.what()), hint);
  }
  if (r.role != role)
    throw Error(
        ErrorKind::kRuntime,
        "worker result " + printable(path) + " is the " + r.role + " worker's, expected the " + role + " worker's",
        hint);
  return r;
}

}  // namespace anchor::protocol
