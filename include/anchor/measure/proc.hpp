#pragma once
// Process memory from /proc/self/status: what the tensor allocator does not
// see (BLAS and oneDNN scratch, the libraries themselves).
#include <cstdint>

namespace anchor::measure {

struct ProcMemory {
  std::uint64_t rss_bytes = 0;  // VmRSS
  std::uint64_t hwm_bytes = 0;  // VmHWM: peak RSS since start
};

ProcMemory read_proc_memory();

}  // namespace anchor::measure
