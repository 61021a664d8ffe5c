// anchor pilot CONFIG  and the hidden  anchor-torch __worker  and  anchor __sentinel  it starts.
#include "anchor/common/fs.hpp"
#include "anchor/common/sentinel.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/log.hpp"
#include "anchor/pilot/pilot.hpp"
#include "anchor/worker/worker.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace anchor::cli {

namespace {

// The refusal JUnit file is this process's to write: no pilot of it wrote
// the file already, and under a launcher (torchrun, srun) it is the rank that
// runs the supervisor; other ranks refuse with the same --junit path.
void write_refusal_junit(const std::string& junit_path, const Error& e) {
  if (junit_path.empty() || pilot::junit_published()) return;
  try {
    const auto launch = dist::detect_launch();
    if (launch.launcher != dist::Launcher::kNone && launch.rank != 0) return;
  } catch (const Error&) {
    // A launch environment that does not parse: this process is the one refused.
  }
  try {
    fs::atomic_write_file(junit_path, pilot::refusal_junit_xml(e));
  } catch (const Error& w) {
    ANCHOR_LOG_WARN("pilot", "the JUnit file {} could not be written either: {}", junit_path, w.what());
  }
}

}  // namespace

// A command line CLI11 refused (`anchor pilot x.yaml --nproc-per-node 0
// --junit out.xml`): the runner never ran, so the --junit path comes from
// what CLI11 had read of `pilot` or `reproduce` when it refused (a bad value
// is refused once every word was read; a command line cut short may not have
// got as far as --junit, and then there is no file to write).
void write_junit_for_command_line_error(const CLI::App& app, const std::string& message) {
  const auto seen = app.get_subcommands([](const CLI::App* sub) {
    return sub->count() > 0 && (sub->get_name() == "pilot" || sub->get_name() == "reproduce");
  });
  if (seen.empty()) return;
  const CLI::Option* junit = seen.front()->get_option_no_throw("--junit");
  if (junit == nullptr || junit->results().empty() || junit->results().back().empty()) return;
  write_refusal_junit(junit->results().back(), Error(ErrorKind::kUsage, message, "see the command's --help"));
}

ExitCode writing_junit_on_refusal(const std::string& junit_path, const Runner& run) {
  try {
    return run();
  } catch (const Error& e) {
    write_refusal_junit(junit_path, e);
    throw;
  } catch (const std::exception& e) {
    write_refusal_junit(junit_path, Error(ErrorKind::kRuntime, std::string("internal: ") + e.what()));
    throw;
  }
}

Runner setup_pilot(CLI::App& sub, const GlobalOptions& global) {
  auto o = std::make_shared<pilot::PilotOptions>();
  sub.add_option("config", o->config_path, "run config YAML (see docs/config.md)")->type_name("FILE")->required();
  sub.add_option("--set", o->overrides, "override a config key: --set train.micro_batch=8 (repeatable)")
      ->type_name("KEY=VALUE");
  sub.add_option("--run-dir", o->run_dir, "run directory (default: <run.output_dir>/<run-id>)")->type_name("DIR");
  sub.add_option("--junit", o->junit_path, "also write a JUnit XML file: one test case per stage and check")
      ->type_name("FILE");
  sub.add_flag("--json", o->json_stdout, "print report.json on stdout");
  sub.add_flag_callback(
      "--no-cache", [o] { o->use_hash_cache = false; }, "hash every input again instead of trusting the pin cache");
  auto nproc = std::make_shared<int>(0);
  sub.add_option("--nproc-per-node", *nproc,
                 "start N ranks of each worker (DDP over Gloo on CPU, NCCL on GPUs; same as --set "
                 "distributed.nproc_per_node=N)")
      ->check(whole_number_at_least(1));
  auto start_from = std::make_shared<std::string>();
  sub.add_option("--start-from", *start_from,
                 "init: worker A starts from initialisation; latest: from the newest committed checkpoint in "
                 "checkpoint.dir, restored (same as --set pilot.start_from=...; docs/pilot.md)")
      ->check(CLI::IsMember({"init", "latest"}));
  return [o, nproc, start_from, &global]() {
    if (*nproc > 0) o->overrides.push_back("distributed.nproc_per_node=" + std::to_string(*nproc));
    if (!start_from->empty()) o->overrides.push_back("pilot.start_from=" + *start_from);
    o->log_level = global.log_level;
    o->worker_binary = torch_binary();
    return writing_junit_on_refusal(o->junit_path, [&] { return cli::run_pilot(*o); });
  };
}

Runner setup_worker(CLI::App& sub, const GlobalOptions&) {
  sub.group("");  // internal: started by `anchor pilot`, not by people
  // What the worker does is in the spec ANCHOR_PILOT_SPEC names (the worker protocol); only
  // anchor's own options are on its command line.
  auto o = std::make_shared<worker::WorkerOptions>();
  sub.add_flag_callback(
      "--no-cache", [o] { o->use_hash_cache = false; }, "pin without the hash cache");
  return [o]() { return cli::run_worker(*o); };
}

Runner setup_sentinel(CLI::App& sub, const GlobalOptions&) {
  sub.group("");  // internal: started by `anchor pilot` (common/sentinel.hpp), not by people
  auto token = std::make_shared<std::string>();
  sub.add_option("token", *token, "the pilot's token")->required();
  return [token]() {
    proc::run_sentinel(*token);
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
