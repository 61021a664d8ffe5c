// anchor-torch: LibTorch is linked; every command runs in this process.
#include "anchor/pilot/pilot.hpp"
#include "anchor/worker/worker.hpp"
#include "bridge.hpp"

namespace anchor::cli {

bool torch_in_process() { return true; }
ExitCode run_pilot(const pilot::PilotOptions& opts) { return pilot::run_pilot(opts); }
ExitCode run_worker(const worker::WorkerOptions& opts) { return worker::run_worker(opts); }
ExitCode run_allreduce_probe(const worker::AllReduceProbeOptions& opts) { return worker::run_allreduce_probe(opts); }

}  // namespace anchor::cli
