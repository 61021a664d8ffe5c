#pragma once
// A GPU node's health, read before a pilot spends time on it (the preflight,
// docs/pilot.md, "Preflight"): NVML's uncorrected ECC errors, retired pages
// and remapped rows, clocks and what holds them down, the PCIe link against
// its maximum, the NVLinks that are down; and the NVIDIA driver's Xid errors
// in the kernel log. NVML is opened with dlopen, so that this reads nothing
// and links nothing where no NVIDIA driver is installed. Torch-free.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::measure {

// {"skipped": why} when NVML cannot be opened or initialised (no driver,
// a CPU node); else {"driver", "devices": [{index, name, ecc_uncorrected,
// retired_pages_pending, remapped_rows, sm_clock_mhz, max_sm_clock_mhz,
// clock_limits, pcie, nvlinks_active, nvlinks_down}], "xid": [...],
// "xid_read": where or why not, "failures": [...], "warnings": [...],
// "kind": "MEASURED"}. A failure is a fault the run must not start on: an
// uncorrected ECC error since the driver loaded, a retired page or remapped
// row pending a reset, a row remapping that failed, a hardware slowdown, an Xid
// of the GPU's in the kernel log (any but 13, 31, 43 and 45, which an
// application's fault raises). A warning costs speed, or is an application's
// Xid: a PCIe link narrower than its maximum, a software thermal slowdown, an
// NVLink down. `nvml` is the library to open (a test names another); `kmsg`
// the kernel log. `used`: whether the run uses the GPUs; when not (a pilot on
// the CPU), "not_used" says why the failures listed do not stop it.
nlohmann::json gpu_health(const std::string& nvml = "libnvidia-ml.so.1", const std::string& kmsg = "/dev/kmsg",
                          bool used = true);

// The NVIDIA driver's Xid lines ("NVRM: Xid (PCI:0000:3b:00): 79, ...") in the
// kernel log at `kmsg` (/dev/kmsg: the records since boot still in the ring;
// or a file of them), at most the last 20. Sets `why_not` and returns none
// when it cannot be read (no permission: the Xids are then not checked).
std::vector<std::string> xid_lines(const std::string& kmsg, std::string& why_not);

}  // namespace anchor::measure
