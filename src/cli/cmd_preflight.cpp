// anchor preflight CONFIG: the node measured before a pilot spends time on it
// (include/anchor/pilot/preflight.hpp; docs/pilot.md, "Preflight").
#include <iomanip>
#include <iostream>
#include <sstream>

#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/pilot/preflight.hpp"
#include "anchor/worker/worker.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct PreflightOptions {
  std::string config;
  std::vector<std::string> overrides;
  int mib = 256;
  int ranks = 0;  // 0: distributed.nproc_per_node
  bool json = false;
};

std::string rate_line(const char* name, const nlohmann::json& f) {
  std::ostringstream o;
  o << "  " << std::left << std::setw(16) << name << std::fixed << std::setprecision(1) << f.value("mb_per_s", 0.0)
    << " MB/s (" << std::setprecision(1) << f.value("bytes", 0.0) / 1048576.0 << " MiB in " << std::setprecision(3)
    << f.value("seconds", 0.0) << " s, " << f.value("kind", "") << "): " << for_terminal(f.value("path", "")) << "\n";
  return o.str();
}

std::string skipped_line(const char* name, const nlohmann::json& f) {
  std::ostringstream o;
  o << "  " << std::left << std::setw(16) << name << "skipped: " << for_terminal(f.value("skipped", "")) << "\n";
  return o.str();
}

std::string allreduce_lines(const nlohmann::json& a) {
  if (a.contains("skipped")) return skipped_line("all-reduce", a);
  std::ostringstream o;
  o << "  " << std::left << std::setw(16) << "all-reduce" << std::fixed << std::setprecision(2)
    << a.value("busbw_gb_per_s", 0.0) << " GB/s bus bandwidth, " << std::setprecision(1) << a.value("latency_us", 0.0)
    << " us latency (" << a.value("ranks", 0) << " ranks, " << for_terminal(a.value("backend", "")) << ", "
    << a.value("kind", "") << ")\n";
  for (const auto& s : a.value("sizes", nlohmann::json::array()))
    o << "  " << std::setw(16) << "" << std::right << std::setw(10) << s.value("bytes", 0) << " bytes "
      << std::setprecision(3) << std::setw(9) << s.value("seconds", 0.0) * 1e3 << " ms  busbw " << std::setprecision(2)
      << s.value("busbw_gb_per_s", 0.0) << " GB/s\n"
      << std::left;
  return o.str();
}

std::string health_lines(const nlohmann::json& h) {
  if (h.contains("skipped")) return skipped_line("GPU health", h);
  std::ostringstream o;
  const auto failures = h.value("failures", nlohmann::json::array());
  const auto warnings = h.value("warnings", nlohmann::json::array());
  o << "  " << std::left << std::setw(16) << "GPU health" << h.value("devices", nlohmann::json::array()).size()
    << " GPUs, driver " << for_terminal(h.value("driver", "?")) << ": "
    << (failures.empty() ? "healthy" : std::to_string(failures.size()) + " failures") << "; Xids "
    << for_terminal(h.value("xid_read", "")) << "\n";
  for (const auto& f : failures) o << "    FAIL " << for_terminal(f.get<std::string>()) << "\n";
  for (const auto& w : warnings) o << "    warn " << for_terminal(w.get<std::string>()) << "\n";
  return o.str();
}

ExitCode run_preflight(const PreflightOptions& o) {
  const config::Config cfg = config::load(o.config, o.overrides);
  pilot::PreflightOptions po;
  po.checkpoint_dir = cfg.checkpoint.dir.empty() ? cfg.run.output_dir : config::resolve_path(cfg, cfg.checkpoint.dir);
  po.bytes = static_cast<std::uint64_t>(o.mib) << 20;
  po.ranks = o.ranks > 0 ? o.ranks : cfg.distributed.nproc_per_node;
  po.torch_binary = pilot::probe_binary();
  const nlohmann::json out = pilot::preflight(cfg, po);
  const auto failures = pilot::preflight_failures(out);
  if (o.json) {
    std::cout << dump_json(out, 2) << std::endl;
  } else {
    std::cout << "preflight of " << for_terminal(o.config) << " on " << for_terminal(out.value("host", "")) << "\n"
              << rate_line("checkpoint.dir", out["checkpoint_dir"])
              << (out["data"].contains("skipped") ? skipped_line("data.train", out["data"])
                                                  : rate_line("data.train", out["data"]))
              << allreduce_lines(out["all_reduce"]) << health_lines(out["gpu_health"]);
  }
  if (failures.empty()) return ExitCode::kOk;
  throw Error(ErrorKind::kVerification,
              "node " + out.value("host", std::string("?")) + " fails its health check: " + failures.front() +
                  (failures.size() > 1 ? " (and " + std::to_string(failures.size() - 1) + " more)" : ""),
              "run the pilot on another node, or have this one reset or serviced first");
}

}  // namespace

Runner setup_preflight(CLI::App& sub, const GlobalOptions&) {
  auto o = std::make_shared<PreflightOptions>();
  sub.add_option("config", o->config, "run config YAML (its checkpoint.dir and data.train are measured)")
      ->type_name("FILE")
      ->required();
  sub.add_option("--set", o->overrides, "override a config key: --set checkpoint.dir=/scratch/ckpt (repeatable)")
      ->type_name("KEY=VALUE");
  sub.add_option("--mib", o->mib, "MiB to write to checkpoint.dir and to read of the data (default 256)")
      ->check(whole_number_at_least(1));
  sub.add_option("--ranks", o->ranks,
                 "ranks to all-reduce over (default distributed.nproc_per_node; under 2: not measured)")
      ->check(whole_number_at_least(1));
  sub.add_flag("--json", o->json, "print {host, checkpoint_dir, data, all_reduce, gpu_health} as JSON");
  return [o]() { return run_preflight(*o); };
}

Runner setup_allreduce_probe(CLI::App& sub, const GlobalOptions&) {
  sub.group("");  // internal: started by `anchor preflight`, once per rank, with torchrun's variables
  auto o = std::make_shared<worker::AllReduceProbeOptions>();
  sub.add_option("--device", o->device, "the config's device");
  sub.add_option("--backend", o->backend, "the config's distributed.backend");
  sub.add_option("--timeout", o->timeout_s, "seconds for the rendezvous and each call");
  return [o]() { return cli::run_allreduce_probe(*o); };
}

}  // namespace anchor::cli
