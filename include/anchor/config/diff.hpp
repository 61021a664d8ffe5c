#pragma once
// A config against a past run's (`anchor diff`, docs/config.md "Comparing
// with a past run"). Apart from config.hpp so that the many files including
// it do not rebuild for this.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::config {

// One key whose value differs between a past run's effective config and a
// config about to run (`anchor diff`, docs/config.md "Comparing with a past
// run"). Paths relative to a config's directory are compared resolved (each
// against its own directory) and shown as written.
struct Difference {
  std::string key;           // "train.micro_batch"
  nlohmann::json past, now;  // as written; null: the key is not in the past run's config (an older anchor)
  nlohmann::json past_resolved, now_resolved;  // a config-relative path's, as each resolves; else null
  // false: budget.*, report.*, run.name, run.output_dir, checkpoint.keep_last,
  // checkpoint.dir unless pilot.start_from is latest; for a program pilot also
  // model.*, data.*, train.* (they do not reach the program); and a key an
  // older report lacks whose value now is the default.
  bool decides_result = true;
};
// `past`: a report's "config" (to_json of the run's config); `past_base_dir`:
// the directory its relative paths resolved against (manifest.config.base_dir;
// when it is empty or relative, paths are compared as written).
std::vector<Difference> diff(const nlohmann::json& past, const std::string& past_base_dir, const Config& now);

}  // namespace anchor::config
