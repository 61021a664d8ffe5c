#pragma once
// The node measured before a pilot spends time on it (issue 44, item 6;
// docs/pilot.md, "Preflight"): how fast checkpoint.dir takes a write that is
// fsynced, how fast the training data reads from storage. `anchor preflight`
// prints them. Torch-free; what it does not measure yet (the all-reduce over
// the pilot's ranks, NVML health on GPU nodes) it says it skipped, and why.
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

// Both for `cfg` (checkpoint.dir, else `fallback_dir`: `anchor preflight`
// gives run.output_dir, under which a pilot puts its checkpoints then; either
// is created when missing, as the pilot would; data.train's files), as
// {"checkpoint_dir": {...}, "data": {...}, "all_reduce": {"skipped": ...},
//  "gpu_health": {"skipped": ...}}: docs/pilot.md lists the fields.
nlohmann::json preflight(const config::Config& cfg, const std::string& fallback_dir, std::uint64_t bytes);

}  // namespace anchor::pilot
