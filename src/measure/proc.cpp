#include "anchor/measure/proc.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

#include "anchor/common/process.hpp"

namespace anchor::measure {

ProcMemory read_proc_memory() { return read_proc_memory(0); }

ProcMemory read_proc_memory(int pid) {
  ProcMemory m;
  std::ifstream in(pid > 0 ? "/proc/" + std::to_string(pid) + "/status" : std::string("/proc/self/status"));
  std::string key;
  while (in >> key) {
    std::uint64_t kb = 0;
    if (key == "VmRSS:" && in >> kb)
      m.rss_bytes = kb * 1024;
    else if (key == "VmHWM:" && in >> kb)
      m.hwm_bytes = kb * 1024;
    in.ignore(1 << 16, '\n');
  }
  return m;
}

std::string device_smi_report(const std::string& device) {
  if (device.rfind("cuda", 0) != 0) return "";
  try {
    if (auto smi = proc::find_on_path("nvidia-smi"); !smi.empty()) {
      auto r = proc::run_capture({smi, "--query-compute-apps=pid,process_name,used_memory", "--format=csv"});
      if (r.status == 0) return r.out;
    }
    if (auto smi = proc::find_on_path("rocm-smi"); !smi.empty()) {
      auto r = proc::run_capture({smi, "--showmeminfo", "vram", "--json"});
      if (r.status == 0) return r.out;
    }
  } catch (...) {
    // The report is supplementary: a missing or failing tool never fails the pilot.
  }
  return "";
}

}  // namespace anchor::measure
