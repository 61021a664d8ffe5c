// A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for the preflight's
// health check on a machine without a GPU (tests/unit/measure/test_gpu_health.cpp,
// tests/e2e/test_preflight.cpp). It answers the NVML calls measure::gpu_health
// makes, for one GPU whose state ANCHOR_FAKE_NVML sets:
//   name=<text>,ecc=<n>,pending=<0|1>,reasons=<bits>,width=<cur>/<max>,links=<up>/<down>,init=<ret>
// Only what gpu_health reads; the real library runs where a driver is
// (scripts/gpu-check.sh). Built as tests/fake-nvml/libnvidia-ml.so.1, found
// through LD_LIBRARY_PATH the way dlopen finds the real one.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct State {
  std::string name = "Fake GPU";
  unsigned long long ecc = 0, reasons = 0;
  int pending = 0, init = 0;
  unsigned width = 16, max_width = 16, up = 0, down = 0;
};

State state() {
  State s;
  const char* env = std::getenv("ANCHOR_FAKE_NVML");
  std::string all = env ? env : "";
  for (std::size_t at = 0; at <= all.size();) {
    std::size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(at, end - at);
    const auto eq = item.find('=');
    const std::string k = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (k == "name") s.name = v;
    if (k == "ecc") s.ecc = std::strtoull(v.c_str(), nullptr, 0);
    if (k == "pending") s.pending = std::atoi(v.c_str());
    if (k == "reasons") s.reasons = std::strtoull(v.c_str(), nullptr, 0);
    if (k == "init") s.init = std::atoi(v.c_str());
    if (k == "width") std::sscanf(v.c_str(), "%u/%u", &s.width, &s.max_width);
    if (k == "links") std::sscanf(v.c_str(), "%u/%u", &s.up, &s.down);
    at = end + 1;
  }
  return s;
}

int dev_token;

}  // namespace

extern "C" {
int nvmlInit_v2() { return state().init; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlSystemGetDriverVersion(char* out, unsigned n) {
  std::snprintf(out, n, "%s", "999.99-fake");
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 1;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev) {
  if (i != 0) return 2;
  *dev = &dev_token;
  return 0;
}
int nvmlDeviceGetName(void*, char* out, unsigned n) {
  std::snprintf(out, n, "%s", state().name.c_str());
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void*, int, int, unsigned long long* n) {
  *n = state().ecc;
  return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void*, int* pending) {
  *pending = state().pending;
  return 0;
}
int nvmlDeviceGetClockInfo(void*, int, unsigned* mhz) {
  *mhz = 1410;
  return 0;
}
int nvmlDeviceGetMaxClockInfo(void*, int, unsigned* mhz) {
  *mhz = 1980;
  return 0;
}
int nvmlDeviceGetCurrentClocksEventReasons(void*, unsigned long long* bits) {
  *bits = state().reasons;
  return 0;
}
int nvmlDeviceGetCurrPcieLinkWidth(void*, unsigned* w) {
  *w = state().width;
  return 0;
}
int nvmlDeviceGetMaxPcieLinkWidth(void*, unsigned* w) {
  *w = state().max_width;
  return 0;
}
int nvmlDeviceGetNvLinkState(void*, unsigned link, int* active) {
  const State s = state();
  if (link >= s.up + s.down) return 3;  // NVML_ERROR_NOT_SUPPORTED: no such link
  *active = link < s.up ? 1 : 0;
  return 0;
}
}
