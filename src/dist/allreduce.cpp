// The all-reduce's latency and bus bandwidth from its timings (include/anchor/dist/allreduce.hpp).
#include "anchor/dist/allreduce.hpp"

#include <algorithm>
#include <cmath>

namespace anchor::dist {

std::vector<std::int64_t> allreduce_probe_sizes() { return {4 << 10, 256 << 10, 4 << 20, 25 << 20, 64 << 20}; }

double bus_factor(int ranks) { return ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0; }

AllReduceFit fit_allreduce(const std::vector<AllReduceTiming>& timings, int ranks) {
  AllReduceFit f;
  if (timings.empty()) return f;
  const auto by_bytes = [](const auto& a, const auto& b) { return a.bytes < b.bytes; };
  const auto by_time = [](const auto& a, const auto& b) { return a.seconds < b.seconds; };
  const auto hi = std::max_element(timings.begin(), timings.end(), by_bytes);
  const auto lo = std::min_element(timings.begin(), timings.end(), by_time);
  f.latency_s = lo->seconds;
  const double slope =
      hi->bytes > lo->bytes ? (hi->seconds - lo->seconds) / static_cast<double>(hi->bytes - lo->bytes) : 0.0;
  f.busbw_bytes_per_s = slope > 0 ? bus_factor(ranks) / slope : 0.0;
  return f;
}

nlohmann::json allreduce_json(const std::vector<AllReduceTiming>& timings, int ranks, const std::string& backend,
                              int iters) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const auto& t : timings) {
    const double algbw = t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0.0;
    sizes.push_back({{"bytes", t.bytes},
                     {"seconds", t.seconds},
                     {"algbw_gb_per_s", algbw},
                     {"busbw_gb_per_s", algbw * bus_factor(ranks)}});
  }
  const AllReduceFit fit = fit_allreduce(timings, ranks);
  return {{"backend", backend},
          {"ranks", ranks},
          {"sizes", std::move(sizes)},
          {"latency_us", fit.latency_s * 1e6},
          {"busbw_gb_per_s", fit.busbw_bytes_per_s / 1e9},
          {"what", "in-place fp32 sum over " + std::to_string(ranks) + " ranks (" + backend + "), the median of " +
                       std::to_string(iters) +
                       " calls per size after a barrier each; latency the quickest size's time, bus bandwidth "
                       "the slope from it to the largest, busbw = bytes x 2(n-1)/n / time (nccl-tests)"},
          {"kind", "MEASURED"}};
}

}  // namespace anchor::dist
