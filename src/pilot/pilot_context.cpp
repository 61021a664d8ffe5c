#include "pilot_context.hpp"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace anchor::pilot {

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

}  // namespace anchor::pilot
