// anchor-torch: LibTorch is linked; every command runs in this process.
#include "anchor/pilot/pilot.hpp"
#include "bridge.hpp"

namespace anchor::cli {

bool torch_in_process() { return true; }
int run_pilot(const pipeline::PilotOptions& opts) { return pipeline::run_pilot(opts); }
int run_worker(const pipeline::WorkerOptions& opts) { return pipeline::run_worker(opts); }

}  // namespace anchor::cli
