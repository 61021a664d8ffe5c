// anchor config check FILE [--json] | anchor config dump FILE [--json]
#include <iostream>

#include "anchor/common/utf8.hpp"

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

// `config check --json`: one document whether the config is good or not, for a CI step to read. The
// problems are those the text lists (exit 2); a file that cannot be read is an error as without --json.
ExitCode check_json(const ConfigOptions& o) {
  nlohmann::json out = {{"file", printable(o.file)}};
  ExitCode code = ExitCode::kOk;
  try {
    const config::Config c = config::load(o.file, o.overrides);
    out["ok"] = true;
    out["config_digest"] = config::digest(c);
    out["problems"] = nlohmann::json::array();
  } catch (const config::ConfigError& e) {
    nlohmann::json problems = nlohmann::json::array();
    for (const auto& p : e.problems())
      problems.push_back({{"file", printable(p.file)},
                          {"line", p.line},
                          {"column", p.column},
                          {"key", printable(p.key)},
                          {"message", printable(p.message)}});
    out["ok"] = false;
    out["problems"] = problems;
    code = exit_code_for(e.kind());
  }
  std::cout << dump_json(out, 2) << std::endl;
  return code;
}

}  // namespace

Runner setup_config(CLI::App& sub, const GlobalOptions&) {
  auto opts = std::make_shared<ConfigOptions>();
  sub.require_subcommand(1);
  CLI::App* check = sub.add_subcommand("check", "Validate a config; lists every problem (exit 2)");
  check->add_option("file", opts->file, "config YAML")->type_name("FILE")->required();
  check->add_option("--set", opts->overrides, "override a key: --set train.micro_batch=8")->type_name("KEY=VALUE");
  check->add_flag("--json", opts->json,
                  "print {file, ok, config_digest, problems: [{file, line, column, key, message}]}; the exit code "
                  "is the same");
  CLI::App* dump = sub.add_subcommand("dump", "Print the effective config (defaults < file < --set)");
  dump->add_option("file", opts->file, "config YAML")->type_name("FILE")->required();
  dump->add_option("--set", opts->overrides, "override a key: --set train.micro_batch=8")->type_name("KEY=VALUE");
  dump->add_flag("--json", opts->json, "print JSON instead of YAML");

  return [opts, check]() {
    if (check->parsed() && opts->json) return check_json(*opts);
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
