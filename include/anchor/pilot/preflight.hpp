#pragma once
// The node measured before a pilot spends time on it (issue 44, item 6;
// docs/pilot.md, "Preflight"): how fast checkpoint.dir takes a write that is
// fsynced, how fast the training data reads from storage. `anchor preflight`
// prints them, and the pilot runs it as its first stage. Also the all-reduce's
// latency and bus bandwidth over the pilot's ranks, and a GPU node's health
// (NVML, the driver's Xids). Torch-free: the all-reduce's ranks are anchor-torch
// processes. What it does not measure, it says it skipped, and why.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/config/config.hpp"

namespace anchor::pilot {

struct Throughput {
  std::string where;  // the directory written, or the first file read
  double bytes = 0, seconds = 0;
  double mb_per_s() const { return seconds > 0 ? bytes / 1e6 / seconds : 0.0; }
};

// Writes `bytes` (at least one 4 MiB block) to a new file in `dir`, fsyncs it
// and `dir`, and removes it: what a checkpoint save's data gets there. Throws
// Error (io) naming the directory; the file is gone either way.
Throughput measure_disk_write(const std::string& dir, std::uint64_t bytes);

// Reads `files` in turn, at most `bytes` in all, after asking the kernel to
// drop their cached pages (posix_fadvise DONTNEED: clean pages only, so a file
// just written may still come from memory): the rate the loader gets from the
// storage. Throws Error (io) naming a file that cannot be read.
Throughput measure_data_read(const std::vector<std::string>& files, std::uint64_t bytes);

struct PreflightOptions {
  std::string checkpoint_dir;              // where checkpoints go: written and fsynced, created when missing
  std::uint64_t bytes = 256ull << 20;      // written to checkpoint_dir, and read of the data at most
  int ranks = 1;                           // the all-reduce's ranks; fewer than 2: not measured
  std::string no_allreduce;                // when set, why the all-reduce is not measured
  std::string torch_binary;                // anchor-torch (probe_binary): it runs each rank of the all-reduce
  std::string nvml = "libnvidia-ml.so.1";  // measure::gpu_health's library and kernel log
  std::string kmsg = "/dev/kmsg";
};

// The all-reduce bus bandwidth over `ranks` ranks on this node:
// `torch_binary __allreduce-probe` started once per rank with torchrun's
// variables, meeting on a free loopback port; rank 0's dist::allreduce_json.
// `device` and `backend` are the config's (device, distributed.backend), as
// the pilot's ranks take them. Throws Error naming a rank that fails, how it
// ended and its error (kConfig when it refused the config, as the pilot's
// ranks would: nccl without a GPU; else kRuntime).
nlohmann::json measure_allreduce(const std::string& torch_binary, int ranks, const std::string& device,
                                 const std::string& backend, double timeout_s);

// anchor-torch, which runs the probe's ranks: this executable when it is
// anchor-torch, else the one beside it; "" when there is none (a test's own
// binary, or an install without it), and the all-reduce is then skipped, said.
std::string probe_binary();

// The node for `cfg`: o.checkpoint_dir's fsynced writes (`anchor preflight`
// gives checkpoint.dir, else run.output_dir, under which a pilot puts its
// checkpoints then; the pilot its own), data.train's reads, the all-reduce over o.ranks ranks on cfg.device, and on
// a node with an NVIDIA driver its GPUs' health; as {"host", "checkpoint_dir",
// "data", "all_reduce", "gpu_health"}, each either figures or {"skipped": why}.
// docs/pilot.md, "Preflight", lists the fields.
nlohmann::json preflight(const config::Config& cfg, const PreflightOptions& o);

// What the node fails on (gpu_health's failures): none, or each in words;
// none where the pilot runs on the CPU (gpu_health.not_used says so).
std::vector<std::string> preflight_failures(const nlohmann::json& preflight);

}  // namespace anchor::pilot
