#pragma once
// Two binaries, one command line (docs/architecture.md, "Two binaries"):
//   anchor        what people run. No LibTorch: it supervises the pilot, verifies
//                 and plans reports, checks configs and checkpoints, makes keys.
//   anchor-torch  the same commands with LibTorch linked. The pilot's workers run
//                 it, and so do the commands that need LibTorch in their own
//                 process: `reproduce` (it pins and trains) and `pilot` under
//                 torchrun or srun (c10d's store). `pin` stays in anchor: it asks
//                 anchor-torch (`__process-facts`) what a process that trains
//                 has loaded, and caches the answer (manifest/process_facts.hpp).
// `anchor` hands those commands to anchor-torch by exec, with the same
// arguments, so either binary accepts every command. Loading LibTorch costs a
// process ~0.4 s of CPU and ~165 MB before it does anything; the supervisor,
// which never trains, no longer pays it (docs/benchmarks.md).
#include <string>

#include "anchor/error.hpp"

namespace anchor::pilot {
struct PilotOptions;
}  // namespace anchor::pilot
namespace anchor::worker {
struct WorkerOptions;
struct AllReduceProbeOptions;
}  // namespace anchor::worker

namespace anchor::cli {

// main() records its arguments first, for hand_over_to_torch.
void remember_argv(int argc, char** argv);

// Whether LibTorch is linked into this binary (anchor-torch) or not (anchor).
bool torch_in_process();

// The binary the pilot's workers run: this one when it has LibTorch, else
// anchor-torch beside it (same directory).
std::string torch_binary();

// Replaces this process with anchor-torch running the same command line.
// Throws Error (kRuntime) when anchor-torch cannot be started.
[[noreturn]] void hand_over_to_torch(const std::string& why);

// `anchor pilot`: the supervisor here when no launcher started us (anchor has
// no c10d store); anchor-torch takes the torchrun/srun case.
ExitCode run_pilot(const pilot::PilotOptions& opts);
// `anchor __worker`: only in anchor-torch.
ExitCode run_worker(const worker::WorkerOptions& opts);
// `anchor __allreduce-probe`: only in anchor-torch (c10d).
ExitCode run_allreduce_probe(const worker::AllReduceProbeOptions& opts);

}  // namespace anchor::cli
