#include "anchor/train/state_format.hpp"

#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::train {

namespace {
std::string ranked_file(const char* prefix, int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-rank%05d-of-%05d.safetensors", prefix, rank, world);
  return buf;
}

// "<prefix>-rankNNNNN-of-NNNNN.safetensors", loosely: a name of that kind.
bool is_ranked(const std::string& name, const char* prefix) {
  const std::string p = std::string(prefix) + "-rank";
  const std::string suffix = ".safetensors";
  return name.rfind(p, 0) == 0 && name.size() > p.size() + suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr const char* kStepSuffix = ".step";
}  // namespace

std::string rng_file(int rank, int world) { return world == 1 ? "rng.safetensors" : ranked_file("rng", rank, world); }
std::string optimizer_shard_file(int rank, int world) { return ranked_file("optimizer", rank, world); }
bool is_optimizer_file(const std::string& name) { return name == kOptimizerFile || is_ranked(name, "optimizer"); }

std::string adamw_tensor(const std::string& param, AdamWTensor which) {
  switch (which) {
    case AdamWTensor::kExpAvg: return param + ".exp_avg";
    case AdamWTensor::kExpAvgSq: return param + ".exp_avg_sq";
    case AdamWTensor::kStep: return param + kStepSuffix;
  }
  return param;
}

std::optional<std::string> adamw_step_param(const std::string& name) {
  const std::size_t n = std::strlen(kStepSuffix);
  if (name.size() <= n || name.compare(name.size() - n, n, kStepSuffix) != 0) return std::nullopt;
  return name.substr(0, name.size() - n);
}

nlohmann::json state_json(const StateFields& f, nlohmann::json extra) {
  nlohmann::json& s = extra;
  s["step"] = f.step;
  s["format_version"] = kStateFormatVersion;
  s["data_cursor"] = {{"kind", "pure(seed, step, rank)"}, {"next_step", f.step}};
  s["lr_schedule"] = {{"kind", f.schedule}, {"next_lr", f.next_lr}, {"total_steps", f.total_steps}};
  s["precision"] = f.precision;
  s["loss_scale"] = {{"enabled", f.loss_scale_enabled},
                     {"scale", f.scale},
                     {"growth_tracker", f.growth_tracker},
                     {"skipped_steps", f.skipped_steps}};
  s["world_size"] = f.world_size;
  s["strategy"] = f.strategy;
  s["threads"] = f.threads;
  s["libtorch"] = f.libtorch;
  s["config_digest"] = f.config_digest;
  return extra;
}

const char* expected_file_format(const std::string& name) {
  if (name == kModelFile) return kModelFileFormat;
  if (name == kOptimizerFile) return kOptimizerFileFormat;
  if (is_ranked(name, "optimizer")) return kOptimizerShardFileFormat;
  if (name == "rng.safetensors" || is_ranked(name, "rng")) return kRngFileFormat;
  if (name == kScalerFile) return kScalerFileFormat;
  return nullptr;
}

namespace {
// The version of a tag "<kind>/v<N>" of this kind, or -1.
long tag_version(const std::string& tag, const std::string& kind) {
  if (tag.rfind(kind + "v", 0) != 0 || tag.size() == kind.size() + 1) return -1;
  long v = 0;
  for (std::size_t i = kind.size() + 1; i < tag.size(); ++i) {
    if (tag[i] < '0' || tag[i] > '9' || v > 1000000) return -1;
    v = v * 10 + (tag[i] - '0');
  }
  return v;
}
}  // namespace

void check_file_formats(const checkpoint::Store::Loaded& c) {
  for (const auto& [name, file] : c.files) {
    const char* expected = expected_file_format(name);
    const auto tag = file.metadata().find("format");
    if (!expected || tag == file.metadata().end() || tag->second == expected) continue;
    // Same kind, later version ("anchor.model/v2" against v1): saved by a newer anchor.
    const std::string want(expected), kind = want.substr(0, want.find('/') + 1);
    const bool newer = tag_version(tag->second, kind) > tag_version(want, kind);
    throw Error(ErrorKind::kVerification,
                printable(c.dir + "/" + name) + ": format " + printable(tag->second) + ", and this anchor reads " +
                    want + (newer ? " (the checkpoint is of a newer anchor)" : ""),
                newer ? "restore it with the anchor that saved it (state.json's run_id names its run, whose "
                        "report.json says which anchor), or restore from a checkpoint this anchor saved"
                      : "the file was not written by anchor's trainer for this name; restore from another checkpoint");
  }
}

SavedState read_saved_state(const nlohmann::json& state, const std::string& file) {
  using nlohmann::json;
  const std::string where = printable(file);
  if (!state.is_object())
    throw Error(ErrorKind::kVerification,
                where + ": is a JSON " + std::string(state.type_name()) + ", expected an object",
                "the checkpoint's state.json is damaged or was not written by anchor; restore from another checkpoint");
  struct Rule {
    const char* field;
    const char* expected;
    std::function<bool(const json&)> ok;
  };
  const auto integer = [](const json& v) { return v.is_number_integer(); };
  // A world of more ranks than any job runs: the restore walks every rank
  // between the saved world and this one (re-derived or dropped streams).
  const auto world = [](const json& v) {
    return v.is_number_integer() && v.get<std::int64_t>() >= 1 && v.get<std::int64_t>() <= kMaxWorldSize;
  };
  const auto object = [](const json& v) { return v.is_object(); };
  const auto string = [](const json& v) { return v.is_string(); };
  const auto number = [](const json& v) { return v.is_number(); };
  const std::vector<Rule> rules = {
      {"step", "an integer", integer},
      {"format_version", "an integer", integer},
      {"data_cursor", "an object", object},
      {"lr_schedule", "an object", object},
      {"precision", "a string", string},
      {"loss_scale", "an object", object},
      {"world_size", "an integer from 1 to 65536", world},
      {"strategy", "a string", string},
      {"threads", "an integer", integer},
      {"libtorch", "a string", string},
      {"config_digest", "a string", string},
      {"eval_loss", "a number", number},
      {"run_id", "a string", [](const json& v) { return v.is_string() || v.is_null(); }},
      {"config", "an object", object},
  };
  std::string problems;
  for (const auto& r : rules) {
    auto it = state.find(r.field);
    if (it == state.end() || r.ok(*it)) continue;
    std::string shown = it->is_structured() ? std::to_string(it->size()) + " entries" : dump_json(*it);
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    problems += std::string(problems.empty() ? "" : "; ") + "field '" + r.field + "' is a JSON " + it->type_name() +
                " (" + shown + "), expected " + r.expected;
  }
  if (!state.contains("step")) problems += std::string(problems.empty() ? "" : "; ") + "field 'step' is missing";
  if (!problems.empty())
    throw Error(ErrorKind::kVerification, where + ": " + problems,
                "the checkpoint's state.json does not hold what anchor wrote (edited by hand, or another "
                "writer); restore from another checkpoint, or put back the state.json it was saved with");
  if (const auto v = state.find("format_version"); v != state.end() && *v != kStateFormatVersion) {
    // An integer past 2^63 is an unsigned one: newer too.
    const bool newer = v->is_number_unsigned() ? v->get<std::uint64_t>() > kStateFormatVersion
                                               : v->get<std::int64_t>() > kStateFormatVersion;
    throw Error(ErrorKind::kVerification,
                where + ": format_version " + dump_json(*v) + ", and this anchor reads format_version " +
                    std::to_string(kStateFormatVersion) + (newer ? " (the checkpoint is of a newer anchor)" : ""),
                newer ? "restore it with the anchor that saved it (state.json's run_id names its run, whose "
                        "report.json says which anchor), or restore from a checkpoint this anchor saved"
                      : "the checkpoint's state.json was not written by anchor; restore from another checkpoint");
  }
  SavedState s;
  s.step = state["step"].get<std::int64_t>();
  if (state.contains("world_size")) s.world_size = state["world_size"].get<int>();
  if (state.contains("strategy")) s.strategy = state["strategy"].get<std::string>();
  if (state.contains("config_digest")) s.config_digest = state["config_digest"].get<std::string>();
  if (state.contains("run_id")) s.run_id = state["run_id"];
  if (state.contains("config")) s.config = state["config"];
  return s;
}

}  // namespace anchor::train
