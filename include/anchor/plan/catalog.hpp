#pragma once
// The device catalog (configs/catalog.yaml): accelerators the plan can target,
// with spec-sheet figures and EXAMPLE prices. Loaded strictly: unknown keys,
// missing fields, bad numbers and duplicate names are all collected and
// reported together with file:line:column (docs/plan.md has the format).
#include <string>
#include <vector>

#include "anchor/config/config.hpp"

namespace anchor::plan {

struct Device {
  std::string name;                  // e.g. "H100-80GB-SXM"
  std::string platform;              // cuda | rocm
  double memory_gb = 0;              // device memory, 10^9 bytes
  double bf16_tflops = 0;            // peak dense bf16 throughput, 10^12 FLOP/s
  double memory_bandwidth_tbps = 0;  // TB/s
  std::string interconnect;          // e.g. "NVLink 4"
  double interconnect_gbps = 0;      // GB/s per GPU (vendor figure)
  // NCCL's (RCCL's) all-reduce bus bandwidth over a node's GPUs, GB/s, as
  // published (the catalog cites it); 0: not given, kBusBwOfLink x the link's.
  double allreduce_busbw_gbps = 0;
  double interconnect_latency_us = 0;  // per collective step inside a node; 0: kIntraLatencyUs
  // The network between nodes, per GPU (one NIC per GPU): "" / 0 when not given.
  std::string network;
  double network_gbps = 0;        // GB/s per GPU
  double network_latency_us = 0;  // per collective step across nodes; 0: kNetworkLatencyUs
  double price_on_demand = 0;     // per GPU-hour on demand, billed by use (EXAMPLE); 0: not given
  double price_7_day = 0;         // per GPU-hour on a 7-day term (EXAMPLE)
  double price_30_day = 0;        // per GPU-hour on a 30-day term (EXAMPLE)
  std::string currency = "USD";
  std::string notes;

  double memory_bytes() const { return memory_gb * 1e9; }

  // What the communication model takes when the catalog does not say: the bus
  // bandwidth NCCL's ring reaches is about 0.4 of the vendor's aggregate link
  // figure (H100: 370 of 900 GB/s, NVIDIA's figure in nccl-tests issue 212),
  // a step inside a node 5 us, across nodes 10 us.
  static constexpr double kBusBwOfLink = 0.4;
  static constexpr double kIntraLatencyUs = 5;
  static constexpr double kNetworkLatencyUs = 10;
};

struct Catalog {
  std::string path;
  std::string sha256;  // of the bytes the devices were read from (the plan records it: a bundle carries them)
  std::vector<Device> devices;
  // nullptr when no device has that name.
  const Device* find(const std::string& name) const;
};

// A catalog with problems: what() is "catalog <file> has N problems" followed
// by one line per problem ("  file:line:col: key: message"); kind kConfig
// (exit code 2); the hint points at docs/plan.md.
class CatalogError : public Error {
 public:
  CatalogError(const std::string& file, std::vector<config::Problem> problems);
  const std::vector<config::Problem>& problems() const { return problems_; }

 private:
  std::vector<config::Problem> problems_;
};

// Reads and validates the catalog. Throws Error (kIo) naming the path when it
// cannot be read; CatalogError listing every problem otherwise.
Catalog load_catalog(const std::string& path);
// The same from text; `name` is used in problems and as Catalog::path.
Catalog load_catalog_string(const std::string& yaml, const std::string& name = "<catalog>");

// Which catalog file to use: `explicit_path` when non-empty; else
// budget.catalog resolved against the config's directory (config::resolve_path)
// when set; else ./configs/catalog.yaml (the file shipped with anchor, when
// run from the source tree). Returns the first candidate that exists (an
// explicit path is returned as is, so a missing one fails in load_catalog
// naming it). Throws Error (kUsage) listing the paths tried when none exists.
std::string find_catalog(const config::Config& cfg, const std::string& explicit_path = "");

}  // namespace anchor::plan
