#include "anchor/common/faults.hpp"

#include <cstdlib>
#include <stdexcept>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::faults {

const std::vector<Variable>& variables() {
  static const std::vector<Variable> table = {
      {"ANCHOR_FAULT",
       false,
       {},
       "include/anchor/checkpoint/store.hpp",  // kFaultEnv; src/checkpoint/store.cpp reads it
       "stop a checkpoint save at one of its points: `<point>:<exit|sigkill>` or `<point>@<step>:<exit|sigkill>` "
       "(the points: docs/checkpoints.md, \"The fault seam\")"},
      {"ANCHOR_PILOT_FAULT",
       true,
       {{"drop_rng", 0, "drop_rng", "worker B restores without the RNG states"},
        {"drop_optimizer", 0, "drop_optimizer", "worker B restores without the optimizer state"},
        {"wrong_step", 0, "wrong_step", "worker B restores the step counter off by one"},
        {"drop_scaler", 0, "drop_scaler", "worker B's loss scaler restarts at its initial state"},
        {"diverge_replica", 0, "diverge_replica",
         "with several ranks, rank 1 of worker A nudges a parameter right before its first save"},
        {"profiler_refuses", 0, "profiler_refuses",
         "the profiler refuses to start for worker B's last step (the step runs unprofiled; the pilot passes)"},
        {"kineto_refuses", 0, "kineto_refuses",
         "Kineto refuses to start for worker B's last step, which anchor's operator recorder profiles instead "
         "(LibTorch 2.x; where there is no Kineto this changes nothing)"}},
       "src/train/trainer.cpp",
       "the resume proof's negative controls (docs/pilot.md); in a user program's pilot the Python helper reads "
       "it with ANCHOR_FAULT's grammar instead (python/anchor_pilot/store.py, docs/program.md)"},
      {"ANCHOR_GRAD_FAULT",
       true,
       {{"inf", 1, "inf:<step>", "an inf in a gradient at that step"},
        {"nan", 1, "nan:<step>", "a NaN in a gradient at that step"}},
       "src/train/trainer.cpp",
       "a non-finite gradient, for the loss scaler and the non-finite step check (docs/precision.md)"},
      {"ANCHOR_DIST_FAULT",
       false,
       {{"sigkill", 2, "sigkill:<rank>:<step>", "that rank kills itself in that step, before the all-reduce"},
        {"sigkill_save", 2, "sigkill_save:<rank>:<step>",
         "that rank kills itself in the save of that step, after writing its files"},
        {"sigkill_rendezvous", 1, "sigkill_rendezvous:<rank>", "that rank kills itself before the rendezvous"},
        {"sigkill_probe", 1, "sigkill_probe:<rank>",
         "that rank of the preflight's all-reduce probe kills itself before the rendezvous"}},
       "src/dist/launch.cpp",
       "a rank of a multi-rank worker dies (docs/distributed.md)"},
      {"ANCHOR_NODE_FAULT",
       false,
       {{"hide_run_dir", 0, "hide_run_dir",
         "this node looks for the run directory elsewhere, as a node without the shared mount would"}},
       "src/pilot/launched.cpp",
       "a node of a multi-node pilot that cannot see the run (docs/distributed.md)"},
      {"ANCHOR_SIGNAL_FAULT",
       false,
       {{"sigint_at_plan", 0, "sigint_at_plan", "the supervisor raises SIGINT on itself as its plan stage starts"},
        {"sigterm_after_signing", 0, "sigterm_after_signing",
         "the supervisor raises SIGTERM on itself once a passed pilot's report is signed"}},
       "src/pilot/outcome.cpp",
       "a signal in the last moments of a pilot, which must not exit 0 (docs/pilot.md)"},
  };
  return table;
}

const Variable& variable(std::string_view name) {
  for (const auto& v : variables())
    if (name == v.name) return v;
  throw std::logic_error("fault variable " + std::string(name) + " is not in the registry (src/common/faults.cpp)");
}

namespace {

std::string usages(const Variable& v) {
  std::string s;
  for (std::size_t i = 0; i < v.points.size(); ++i)
    s += (i == 0 ? "" : i + 1 == v.points.size() ? " or " : ", ") + std::string(v.points[i].usage);
  return s + (v.list ? ", comma-separated" : "");
}

Item parse_item(const Variable& v, std::string_view item) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::kUsage, std::string(v.name) + " item '" + printable(item) + "': " + why,
                 "use " + usages(v) + " (docs/development.md, \"Fault seams\")");
  };
  Item out;
  const auto colon = item.find(':');
  out.point = std::string(item.substr(0, colon));
  const Point* point = nullptr;
  for (const auto& p : v.points)
    if (out.point == p.name) point = &p;
  if (!point) throw bad("unknown point '" + printable(out.point) + "'");
  for (std::size_t at = colon; at != std::string_view::npos;) {
    const auto next = item.find(':', at + 1);
    const std::string_view arg = item.substr(at + 1, next == std::string_view::npos ? next : next - at - 1);
    if (arg.empty() || arg.size() > 18 || arg.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad("'" + printable(arg) + "' is not a non-negative integer");
    out.args.push_back(std::stoll(std::string(arg)));
    at = next;
  }
  if (static_cast<int>(out.args.size()) != point->args)
    throw bad(std::string(point->name) + " takes " + std::to_string(point->args) + " number(s), not " +
              std::to_string(out.args.size()) + ": " + point->usage);
  return out;
}

}  // namespace

std::vector<Item> parse(std::string_view name, std::string_view value) {
  const Variable& v = variable(name);
  if (v.points.empty())
    throw std::logic_error(std::string(v.name) + " has a grammar of its own; " + v.reader + " reads it");
  std::vector<Item> items;
  if (value.empty()) return items;
  for (std::size_t start = 0;;) {
    const auto comma = value.find(',', start);
    const std::string_view item = value.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (item.empty())  // a stray comma is a typo, and a typo must not pass as "no fault"
      throw Error(ErrorKind::kUsage, std::string(v.name) + "='" + printable(value) + "' has an empty item",
                  "use " + usages(v) + " (docs/development.md, \"Fault seams\")");
    items.push_back(parse_item(v, item));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (!v.list && items.size() > 1)
    throw Error(ErrorKind::kUsage,
                std::string(v.name) + "='" + printable(value) + "' names " + std::to_string(items.size()) +
                    " faults; it takes one",
                "use " + usages(v) + " (docs/development.md, \"Fault seams\")");
  return items;
}

std::vector<Item> read(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  return v ? parse(name, v) : std::vector<Item>{};
}

}  // namespace anchor::faults
