// anchor config check FILE | anchor config dump FILE [--json]
#include <iostream>

#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;
  bool json = false;
};

}  // namespace

Runner setup_config(CLI::App& sub, const GlobalOptions&) {
  auto opts = std::make_shared<ConfigOptions>();
  sub.require_subcommand(1);
  CLI::App* check = sub.add_subcommand("check", "Validate a config; lists every problem (exit 2)");
  check->add_option("file", opts->file, "config YAML")->required();
  check->add_option("--set", opts->overrides, "override a key: --set train.micro_batch=8");
  CLI::App* dump = sub.add_subcommand("dump", "Print the effective config (defaults < file < --set)");
  dump->add_option("file", opts->file, "config YAML")->required();
  dump->add_option("--set", opts->overrides, "override a key: --set train.micro_batch=8");
  dump->add_flag("--json", opts->json, "print JSON instead of YAML");

  return [opts, check]() {
    config::Config c = config::load(opts->file, opts->overrides);
    if (check->parsed()) {
      std::cout << opts->file << ": ok (config digest " << config::digest(c) << ")\n";
      return ExitCode::kOk;
    }
    if (opts->json)
      std::cout << config::to_json(c).dump(2) << "\n";
    else
      std::cout << config::to_yaml(c);
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
