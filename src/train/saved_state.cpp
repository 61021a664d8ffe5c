#include "anchor/train/saved_state.hpp"

#include <functional>
#include <limits>
#include <vector>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::train {

const char* expected_file_format(const std::string& name) {
  const auto ranked = [&](const char* prefix) {  // "<prefix>-rankNNNNN-of-NNNNN.safetensors"
    const std::string p = std::string(prefix) + "-rank";
    const std::string suffix = ".safetensors";
    return name.rfind(p, 0) == 0 && name.size() > p.size() + suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (name == "model.safetensors") return kModelFileFormat;
  if (name == "optimizer.safetensors") return kOptimizerFileFormat;
  if (ranked("optimizer")) return kOptimizerShardFileFormat;
  if (name == "rng.safetensors" || ranked("rng")) return kRngFileFormat;
  if (name == "scaler.safetensors") return kScalerFileFormat;
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
    throw Error(ErrorKind::kVerification, where + ": is a JSON " + std::string(state.type_name()) + ", expected an object",
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
