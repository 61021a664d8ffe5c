#include "anchor/pipeline/worker_result.hpp"

#include <stdexcept>

#include "anchor/common/fs.hpp"
#include "anchor/common/json_fields.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::pipeline {
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

void check_memory_points(const JsonFields& f) {
  const auto& a = objects(f, "memory_points");
  for (std::size_t i = 0; i < a.size(); ++i) {
    JsonFields p(a[i], JsonFields::item("memory_points", i));
    p.integer("micro_batch");
    p.integer("seq_len");
    p.integer("peak_allocated_bytes");
    train::StateBytes::from_json(p.object("state_bytes"), p.path("state_bytes"));
  }
}

}  // namespace

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
    j["model"] = model;
    j["loss_scaler_enabled"] = loss_scaler_enabled;
    if (!precision.is_null()) j["precision"] = precision;
    j["train_steps"] = train::steps_json(train_steps);
    j["reference_steps"] = train::steps_json(reference_steps);
    j["step_memory"] = step_memory;
    j["state_bytes"] = state_bytes.to_json();
    if (!sharding.is_null()) j["sharding"] = sharding;
    j["matmul_flops"] = matmul_flops;
    if (saved_step) j["saved_step"] = *saved_step;
    if (saved_state) j["saved_state"] = saved_state->to_json();
  } else if (role == "resume") {
    if (restored_step) j["restored_step"] = *restored_step;
    j["restored_dir"] = restored_dir;
    j["skipped"] = skipped;
    if (restored_state) j["restored_state"] = restored_state->to_json();
    j["rng_restore"] = rng_restore;
    j["resume_steps"] = train::steps_json(resume_steps);
  } else if (role == "probe") {
    j["memory_points"] = memory_points;
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
    r.model = f.object("model");
    JsonFields(r.model, "model").integer("parameters");
    r.loss_scaler_enabled = f.boolean("loss_scaler_enabled");
    if (f.has("precision")) r.precision = f.object("precision");
    r.train_steps = steps_of(f, "train_steps");
    if (r.train_steps.empty()) throw std::invalid_argument("train_steps is empty: worker A reports its measured step");
    r.reference_steps = steps_of(f, "reference_steps");
    r.step_memory = f.object("step_memory");
    r.state_bytes = train::StateBytes::from_json(f.object("state_bytes"), "state_bytes");
    if (f.has("sharding")) r.sharding = f.object("sharding");
    r.matmul_flops = f.number("matmul_flops");
    r.saved_step = f.integer("saved_step");
    r.saved_state = digest_of(f, "saved_state");
  } else if (r.role == "resume") {
    r.restored_step = f.integer("restored_step");
    r.restored_dir = f.str("restored_dir");
    r.skipped = objects(f, "skipped");
    r.restored_state = digest_of(f, "restored_state");
    r.rng_restore = f.object("rng_restore");
    r.resume_steps = steps_of(f, "resume_steps");
  } else if (r.role == "probe") {
    check_memory_points(f);
    r.memory_points = f.array("memory_points");
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

}  // namespace anchor::pipeline
