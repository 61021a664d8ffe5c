// anchor, the front end: no LibTorch. Nothing here may reference a symbol of a
// torch translation unit, or the linker pulls LibTorch back in (a test reads
// this binary's NEEDED entries: tests/e2e/test_frontend.cpp).
#include "anchor/dist/launch.hpp"
#include "anchor/pilot/pilot.hpp"
#include "bridge.hpp"

namespace anchor::cli {

bool torch_in_process() { return false; }

ExitCode run_pilot(const pilot::PilotOptions& opts) {
  const auto launch = dist::detect_launch();  // a partial or contradictory environment: exit 2
  if (launch.launcher != dist::Launcher::kNone)
    hand_over_to_torch(std::string("started by ") + dist::launcher_name(launch.launcher) +
                       ": the ranks meet through c10d's store");
  return pilot::run_supervisor(opts, 0);
}

ExitCode run_worker(const worker::WorkerOptions&) { hand_over_to_torch("a pilot worker trains"); }
ExitCode run_allreduce_probe(const worker::AllReduceProbeOptions&) {
  hand_over_to_torch("the probe's ranks meet in a c10d process group");
}

}  // namespace anchor::cli
