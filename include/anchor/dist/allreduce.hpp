#pragma once
// The node's all-reduce, measured (`anchor preflight`, the pilot's preflight
// stage): timings of an in-place sum at several sizes, and the latency and
// bus bandwidth a line through them gives, in nccl-tests' convention. Torch-free:
// the timing itself is dist::time_allreduce (process_group.hpp), run by
// `anchor-torch __allreduce-probe` on each rank.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::dist {

struct AllReduceTiming {
  std::int64_t bytes = 0;
  double seconds = 0;  // the median of the timed calls, as rank 0 saw them
};

// The sizes the probe times: small enough to show the latency, one DDP
// bucket (25 MiB, distributed.bucket_mb's default), and one larger.
std::vector<std::int64_t> allreduce_probe_sizes();

// A ring all-reduce of B bytes over n ranks moves 2(n-1)/n x B through each
// rank's link: the bus bandwidth is that over the time (nccl-tests' busbw).
double bus_factor(int ranks);

struct AllReduceFit {
  double latency_s = 0;          // the quickest size's time
  double busbw_bytes_per_s = 0;  // bus_factor / the line's slope; 0 when the times do not grow with size
};

// The line time = latency + bytes x slope from the quickest size's timing
// (the latency) to the largest size's. A least-squares line lets the large
// sizes' milliseconds of noise decide the latency (it put 1.7 ms on a 0.6 ms
// call here), and on a busy node the smallest size is not always the quickest.
AllReduceFit fit_allreduce(const std::vector<AllReduceTiming>& timings, int ranks);

// What the probe reports: {"backend", "ranks", "sizes": [{bytes, seconds,
// algbw_gb_per_s, busbw_gb_per_s}], "latency_us", "busbw_gb_per_s", "what",
// "kind": "MEASURED"}.
nlohmann::json allreduce_json(const std::vector<AllReduceTiming>& timings, int ranks, const std::string& backend,
                              int iters);

}  // namespace anchor::dist
