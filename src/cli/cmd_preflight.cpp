// anchor preflight CONFIG: the node measured before a pilot spends time on it
// (include/anchor/pilot/preflight.hpp; docs/pilot.md, "Preflight").
#include <iomanip>
#include <iostream>
#include <sstream>

#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/pilot/preflight.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct PreflightOptions {
  std::string config;
  std::vector<std::string> overrides;
  int mib = 256;
  bool json = false;
};

std::string rate_line(const char* name, const nlohmann::json& f) {
  std::ostringstream o;
  o << "  " << std::left << std::setw(16) << name << std::fixed << std::setprecision(1) << f.value("mb_per_s", 0.0)
    << " MB/s (" << std::setprecision(1) << f.value("bytes", 0.0) / 1048576.0 << " MiB in " << std::setprecision(3)
    << f.value("seconds", 0.0) << " s, " << f.value("kind", "") << "): " << printable(f.value("path", "")) << "\n";
  return o.str();
}

ExitCode run_preflight(const PreflightOptions& o) {
  const config::Config cfg = config::load(o.config, o.overrides);
  const nlohmann::json out = pilot::preflight(cfg, cfg.run.output_dir, static_cast<std::uint64_t>(o.mib) << 20);
  if (o.json) {
    std::cout << dump_json(out, 2) << std::endl;
    return ExitCode::kOk;
  }
  std::cout << "preflight of " << printable(o.config) << "\n"
            << rate_line("checkpoint.dir", out["checkpoint_dir"]) << rate_line("data.train", out["data"]) << "  "
            << std::left << std::setw(16) << "all-reduce"
            << "skipped: " << out["all_reduce"].value("skipped", "") << "\n"
            << "  " << std::setw(16) << "GPU health"
            << "skipped: " << out["gpu_health"].value("skipped", "") << "\n";
  return ExitCode::kOk;
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
  sub.add_flag("--json", o->json, "print {checkpoint_dir, data, all_reduce, gpu_health} as JSON");
  return [o]() { return run_preflight(*o); };
}

}  // namespace anchor::cli
