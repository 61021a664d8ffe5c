#include "anchor/measure/memory.hpp"

namespace anchor::measure {

nlohmann::json memory_json(const TensorMemory& m, const ProcMemory& proc) {
  nlohmann::json j = {
      {"allocated_bytes", m.allocated_bytes}, {"peak_allocated_bytes", m.peak_allocated_bytes}, {"source", m.source}};
  if (m.reserved_bytes >= 0) {
    j["reserved_bytes"] = m.reserved_bytes;
    j["peak_reserved_bytes"] = m.peak_reserved_bytes;
  }
  if (m.device_total_bytes >= 0) {
    j["device_total_bytes"] = m.device_total_bytes;
    j["device_free_bytes"] = m.device_free_bytes;
  }
  j["rss_bytes"] = proc.rss_bytes;
  j["peak_rss_bytes"] = proc.hwm_bytes;
  return j;
}

}  // namespace anchor::measure
