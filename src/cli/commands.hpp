#pragma once
// The subcommand table. Each command lives in its own cmd_<name>.cpp with a
// setup function that declares its options on a CLI11 subcommand and returns
// the function that runs it (returning the process's ExitCode).
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "anchor/error.hpp"

namespace anchor::cli {

// Options every subcommand shares (bound before the subcommand name or after it).
struct GlobalOptions {
  std::string log_level = "info";
};

using Runner = std::function<ExitCode()>;

struct Command {
  const char* name;
  const char* summary;
  Runner (*setup)(CLI::App& sub, const GlobalOptions& global);
};

const std::vector<Command>& commands();

// Declared by each cmd_<name>.cpp.
Runner setup_config(CLI::App& sub, const GlobalOptions& global);
Runner setup_pin(CLI::App& sub, const GlobalOptions& global);
Runner setup_process_facts(CLI::App& sub, const GlobalOptions& global);
Runner setup_pilot(CLI::App& sub, const GlobalOptions& global);
Runner setup_worker(CLI::App& sub, const GlobalOptions& global);
Runner setup_sentinel(CLI::App& sub, const GlobalOptions& global);
Runner setup_reproduce(CLI::App& sub, const GlobalOptions& global);
Runner setup_keygen(CLI::App& sub, const GlobalOptions& global);
Runner setup_verify(CLI::App& sub, const GlobalOptions& global);
Runner setup_checkpoint(CLI::App& sub, const GlobalOptions& global);
Runner setup_plan(CLI::App& sub, const GlobalOptions& global);
Runner setup_diff(CLI::App& sub, const GlobalOptions& global);
Runner setup_preflight(CLI::App& sub, const GlobalOptions& global);
Runner setup_allreduce_probe(CLI::App& sub, const GlobalOptions& global);
Runner setup_bundle(CLI::App& sub, const GlobalOptions& global);
Runner setup_completion(CLI::App& sub, const GlobalOptions& global);
Runner setup_manpage(CLI::App& sub, const GlobalOptions& global);

// Runs a pilot (`pilot`, `reproduce`); when it throws, it was refused before
// it wrote a report: the JUnit file (when asked for) then says why
// (pilot::refusal_junit_xml), and the error goes on to main.
ExitCode writing_junit_on_refusal(const std::string& junit_path, const Runner& run);
// The same for a command line that did not parse (main: CLI11's ParseError,
// `message` its words), when it was a `pilot` or `reproduce` with --junit.
void write_junit_for_command_line_error(const CLI::App& app, const std::string& message);

// `anchor --version`: anchor's version and commit, what it was built against
// (LibTorch, CUDA, the NCCL backend) and the build type.
std::string version_text();

// A whole number of at least `least`, refused in words ("--nproc-per-node:
// must be a whole number of at least 1, got '0'"), not as CLI11's range to
// the largest double.
CLI::Validator whole_number_at_least(long long least);

// Binds an option to an ANCHOR_* environment variable too, and says so in --help.
inline CLI::Option* with_env(CLI::Option* opt, const char* var) { return opt->envname(var); }

}  // namespace anchor::cli
