#pragma once
// What the tensor allocator does not see: process memory from
// /proc/self/status (BLAS and oneDNN scratch, the libraries themselves) and the
// GPU's own report of its memory use.
#include <cstdint>
#include <string>

namespace anchor::measure {

struct ProcMemory {
  std::uint64_t rss_bytes = 0;  // VmRSS
  std::uint64_t hwm_bytes = 0;  // VmHWM: peak RSS since start
};

ProcMemory read_proc_memory();
// Another process's (/proc/<pid>/status); zeros once it has ended.
ProcMemory read_proc_memory(int pid);

// The device's own report of memory use, for what the allocator does not see
// (CUDA context, cuBLAS/cuDNN workspaces, other processes): the output of
// `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`
// or `rocm-smi --showmeminfo vram --json` when the tool is on PATH and the
// device is a GPU; "" otherwise. Never throws.
std::string device_smi_report(const std::string& device);

}  // namespace anchor::measure
