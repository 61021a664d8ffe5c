// A GPU node's health from NVML and the kernel log (include/anchor/measure/gpu_health.hpp).
#include "anchor/measure/gpu_health.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>

#include "anchor/common/unique_fd.hpp"

namespace anchor::measure {
namespace {

// NVML's C API, as nvml.h declares it: opaque handles, int enums, 0 success.
using Ret = int;
using Dev = void*;
constexpr Ret kOk = 0;
constexpr int kUncorrected = 1, kVolatileEcc = 0, kClockSm = 1, kMaxLinks = 18;
// nvmlClocksEventReason* / nvmlClocksThrottleReason*: the bits that cost speed.
struct Reason {
  unsigned long long bit;
  const char* name;
  bool fault;  // a hardware slowdown: the GPU protects itself
};
constexpr Reason kReasons[] = {{0x4, "software power cap", false},
                               {0x8, "hardware slowdown", true},
                               {0x20, "software thermal slowdown", false},
                               {0x40, "hardware thermal slowdown", true},
                               {0x80, "hardware power brake slowdown", true}};

class Nvml {
 public:
  explicit Nvml(const std::string& lib) : h_(::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (!h_) why_ = lib + " could not be opened (" + std::string(::dlerror()) + "): no NVIDIA driver on this node";
  }
  ~Nvml() {
    if (inited_) call<Ret (*)()>("nvmlShutdown")();
    if (h_) ::dlclose(h_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Initialises NVML; "" when it answers, else why not.
  std::string init() {
    if (!h_) return why_;
    auto f = call<Ret (*)()>("nvmlInit_v2");
    if (!f) return "NVML has no nvmlInit_v2";
    const Ret r = f();
    if (r != kOk) return "nvmlInit failed: " + error(r);
    inited_ = true;
    return "";
  }

  template <typename F>
  F call(const char* name) const {
    return h_ ? reinterpret_cast<F>(::dlsym(h_, name)) : nullptr;
  }
  std::string error(Ret r) const {
    auto f = call<const char* (*)(Ret)>("nvmlErrorString");
    return f ? f(r) : "error " + std::to_string(r);
  }

 private:
  void* h_;
  bool inited_ = false;
  std::string why_;
};

// One GPU's findings: what it reads into its JSON, what fails the node, what costs speed.
struct Findings {
  nlohmann::json d;
  std::string who;  // "GPU 0 (NVIDIA H100 80GB HBM3)"
  std::vector<std::string>& failures;
  std::vector<std::string>& warnings;
};

// Uncorrected ECC errors, pages retired or rows remapped pending a reset, a remapping that failed.
void read_memory_health(const Nvml& nvml, Dev dev, Findings& g) {
  if (auto f = nvml.call<Ret (*)(Dev, int, int, unsigned long long*)>("nvmlDeviceGetTotalEccErrors")) {
    unsigned long long n = 0;
    if (f(dev, kUncorrected, kVolatileEcc, &n) == kOk) {
      g.d["ecc_uncorrected"] = n;
      if (n > 0)
        g.failures.push_back(g.who + ": " + std::to_string(n) + " uncorrected ECC errors since the driver loaded");
    }
  }
  if (auto f = nvml.call<Ret (*)(Dev, int*)>("nvmlDeviceGetRetiredPagesPendingStatus")) {
    int pending = 0;
    if (f(dev, &pending) == kOk) {
      g.d["retired_pages_pending"] = pending != 0;
      if (pending)
        g.failures.push_back(g.who + ": retired memory pages pending: it needs a reset before it is trusted");
    }
  }
  if (auto f = nvml.call<Ret (*)(Dev, unsigned*, unsigned*, unsigned*, unsigned*)>("nvmlDeviceGetRemappedRows")) {
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    if (f(dev, &corr, &unc, &pending, &failed) == kOk) {
      g.d["remapped_rows"] = {
          {"correctable", corr}, {"uncorrectable", unc}, {"pending", pending != 0}, {"failed", failed != 0}};
      if (failed) g.failures.push_back(g.who + ": a row remapping failed: the memory has an error it cannot isolate");
      if (pending) g.failures.push_back(g.who + ": remapped rows pending: it needs a reset before it is trusted");
    }
  }
}

// The SM clock against its maximum, and what holds it down.
void read_clocks(const Nvml& nvml, Dev dev, Findings& g) {
  unsigned clock = 0, max_clock = 0;
  if (auto f = nvml.call<Ret (*)(Dev, int, unsigned*)>("nvmlDeviceGetClockInfo"); f && f(dev, kClockSm, &clock) == kOk)
    g.d["sm_clock_mhz"] = clock;
  if (auto f = nvml.call<Ret (*)(Dev, int, unsigned*)>("nvmlDeviceGetMaxClockInfo");
      f && f(dev, kClockSm, &max_clock) == kOk)
    g.d["max_sm_clock_mhz"] = max_clock;
  auto reasons = nvml.call<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksEventReasons");
  if (!reasons) reasons = nvml.call<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksThrottleReasons");
  unsigned long long bits = 0;
  if (reasons && reasons(dev, &bits) == kOk) {
    nlohmann::json limits = nlohmann::json::array();
    for (const auto& r : kReasons)
      if (bits & r.bit) {
        limits.push_back(r.name);
        (r.fault ? g.failures : g.warnings).push_back(g.who + ": clocks held down by " + r.name);
      }
    g.d["clock_limits"] = std::move(limits);
  }
}

// The PCIe link against its maximum, and the NVLinks up and down.
void read_links(const Nvml& nvml, Dev dev, Findings& g) {
  unsigned gen = 0, max_gen = 0, width = 0, max_width = 0;
  const auto get = [&](const char* fn, unsigned& v) {
    auto f = nvml.call<Ret (*)(Dev, unsigned*)>(fn);
    return f && f(dev, &v) == kOk;
  };
  if (get("nvmlDeviceGetCurrPcieLinkWidth", width) && get("nvmlDeviceGetMaxPcieLinkWidth", max_width)) {
    g.d["pcie"] = {{"width", width}, {"max_width", max_width}};
    if (get("nvmlDeviceGetCurrPcieLinkGeneration", gen) && get("nvmlDeviceGetMaxPcieLinkGeneration", max_gen)) {
      g.d["pcie"]["generation"] = gen;  // an idle link may step its generation down to save power; its width does not
      g.d["pcie"]["max_generation"] = max_gen;
    }
    if (width < max_width)
      g.warnings.push_back(g.who + ": PCIe link x" + std::to_string(width) + " of x" + std::to_string(max_width) +
                           ": host transfers run at " + std::to_string(width * 100 / max_width) + "%");
  }
  if (auto f = nvml.call<Ret (*)(Dev, unsigned, int*)>("nvmlDeviceGetNvLinkState")) {
    int active = 0, down = 0;
    for (unsigned link = 0; link < kMaxLinks; ++link) {
      int state = 0;
      if (f(dev, link, &state) != kOk) continue;  // a link this part does not have
      (state ? active : down) += 1;
    }
    g.d["nvlinks_active"] = active;
    g.d["nvlinks_down"] = down;
    if (down > 0)
      g.warnings.push_back(g.who + ": " + std::to_string(down) + " of " + std::to_string(active + down) +
                           " NVLinks down: peer traffic takes the others, or PCIe");
  }
}

nlohmann::json read_device(const Nvml& nvml, unsigned i, std::vector<std::string>& failures,
                           std::vector<std::string>& warnings) {
  Findings g{{{"index", i}}, "GPU " + std::to_string(i), failures, warnings};
  Dev dev = nullptr;
  auto handle = nvml.call<Ret (*)(unsigned, Dev*)>("nvmlDeviceGetHandleByIndex_v2");
  if (!handle || handle(i, &dev) != kOk) {
    failures.push_back(g.who + ": NVML gives no handle for it");
    return g.d;
  }
  char name[96] = {};
  if (auto f = nvml.call<Ret (*)(Dev, char*, unsigned)>("nvmlDeviceGetName"); f && f(dev, name, sizeof name) == kOk) {
    g.d["name"] = std::string(name);
    g.who += std::string(" (") + name + ")";
  }
  read_memory_health(nvml, dev, g);
  read_clocks(nvml, dev, g);
  read_links(nvml, dev, g);
  return g.d;
}

// The Xid's number in "NVRM: Xid (PCI:0000:3b:00): 79, ...": -1 when there is none.
int xid_code(const std::string& line) {
  const auto at = line.find("): ", line.find("NVRM: Xid"));
  if (at == std::string::npos) return -1;
  int code = -1;
  return std::sscanf(line.c_str() + at + 3, "%d", &code) == 1 ? code : -1;
}

// The Xids NVIDIA's XID catalog puts on the GPU, its memory or its links (a
// double-bit ECC error, row remapping, an NVLink error, fallen off the bus,
// contained or uncontained ECC, GSP errors), not on an application (13, 31,
// 43, 45: a kernel's bad access, a process killed). Unknown numbers count as
// the GPU's: a node is named before a pilot spends time on it.
bool hardware_xid(int code) {
  switch (code) {
    case 13:
    case 31:
    case 43:
    case 45: return false;
    default: return true;
  }
}

}  // namespace

std::vector<std::string> xid_lines(const std::string& kmsg, std::string& why_not) {
  std::deque<std::string> found;
  const fs::UniqueFd fd(::open(kmsg.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    why_not = kmsg + ": " + std::strerror(errno);
    return {};
  }
  std::string pending;
  std::vector<char> buf(8192);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EPIPE)) continue;  // EPIPE: a record overwritten while read
    if (n <= 0) break;                                          // EAGAIN: the end of /dev/kmsg's records
    pending.append(buf.data(), static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const std::string line = pending.substr(0, nl);
      if (line.find("NVRM: Xid") == std::string::npos) continue;
      const auto semi = line.find(';');  // /dev/kmsg's "6,1234,5678,-;" prefix
      found.push_back(semi != std::string::npos && line.find("NVRM") > semi ? line.substr(semi + 1) : line);
      if (found.size() > 20) found.pop_front();
    }
  }
  return {found.begin(), found.end()};
}

nlohmann::json gpu_health(const std::string& nvml_lib, const std::string& kmsg, bool used) {
  Nvml nvml(nvml_lib);
  if (std::string why = nvml.init(); !why.empty()) return {{"skipped", why}};
  nlohmann::json out = {{"kind", "MEASURED"}};
  char driver[96] = {};
  if (auto f = nvml.call<Ret (*)(char*, unsigned)>("nvmlSystemGetDriverVersion"); f && f(driver, sizeof driver) == kOk)
    out["driver"] = std::string(driver);
  std::vector<std::string> failures, warnings;
  unsigned count = 0;
  if (auto f = nvml.call<Ret (*)(unsigned*)>("nvmlDeviceGetCount_v2"); !f || f(&count) != kOk)
    failures.push_back("NVML does not count this node's GPUs");
  nlohmann::json devices = nlohmann::json::array();
  for (unsigned i = 0; i < count; ++i) devices.push_back(read_device(nvml, i, failures, warnings));
  out["devices"] = std::move(devices);
  std::string why_not;
  const auto xids = xid_lines(kmsg, why_not);
  out["xid"] = xids;
  out["xid_read"] = why_not.empty() ? kmsg : "not read: " + why_not;
  for (const auto& x : xids) {
    const int code = xid_code(x);
    if (hardware_xid(code))
      failures.push_back("the driver logged " + x);
    else
      warnings.push_back("the driver logged " + x + " (Xid " + std::to_string(code) +
                         ": an application's fault, as a rule, not the GPU's)");
  }
  out["failures"] = failures;
  out["warnings"] = warnings;
  if (!used && !failures.empty())
    out["not_used"] = "device cpu: the pilot does not use this node's GPUs, so their failures do not stop it";
  return out;
}

}  // namespace anchor::measure
