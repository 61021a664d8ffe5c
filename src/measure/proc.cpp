#include "anchor/measure/proc.hpp"

#include <fstream>
#include <string>

namespace anchor::measure {

ProcMemory read_proc_memory() {
  ProcMemory m;
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    std::uint64_t kb = 0;
    if (key == "VmRSS:" && in >> kb) m.rss_bytes = kb * 1024;
    else if (key == "VmHWM:" && in >> kb) m.hwm_bytes = kb * 1024;
    in.ignore(1 << 16, '\n');
  }
  return m;
}

}  // namespace anchor::measure
