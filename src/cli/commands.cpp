#include "commands.hpp"

#include <limits>
#include <string>

namespace anchor::cli {

const std::vector<Command>& commands() {
  // The order here is the order in --help.
  static const std::vector<Command> kCommands = {
      {"pilot", "Run the pilot: pin, train, eval, save, kill, restore, resume, compare, report", setup_pilot},
      {"reproduce", "Re-run a past pilot from its signed report and show what drifted", setup_reproduce},
      {"pin", "Pin inputs, dependencies and environment into manifest.json", setup_pin},
      {"preflight", "Measure the node: checkpoint.dir's fsynced writes and the data's reads", setup_preflight},
      {"verify", "Check a signed report: signature, statement, and the run's files", setup_verify},
      {"config", "Check a config or print the effective config", setup_config},
      {"checkpoint", "Verify one checkpoint or list every step with its state", setup_checkpoint},
      {"plan", "Plan hardware, parallelism and budget from a report's measurements", setup_plan},
      {"bundle", "Write a reproduction bundle of a signed run, for `anchor reproduce` on another node", setup_bundle},
      {"diff", "Show what differs between a config and a past run, or between two runs", setup_diff},
      {"keygen", "Create an ECDSA P-256 signing key pair for reports", setup_keygen},
      {"completion", "Print the bash, zsh or fish completion script", setup_completion},
      {"manpage", "Print the man page (roff): anchor manpage | man -l -", setup_manpage},
      {"__worker", "internal: a pilot worker process", setup_worker},
      {"__sentinel", "internal: ends what a killed pilot left running", setup_sentinel},
      {"__allreduce-probe", "internal: one rank of the preflight's all-reduce probe", setup_allreduce_probe},
      {"__process-facts", "internal: what pin needs of a process that trains (anchor-torch)", setup_process_facts},
  };
  return kCommands;
}

}  // namespace anchor::cli

namespace anchor::cli {

CLI::Validator whole_number_at_least(long long least) {
  constexpr long long kMost = std::numeric_limits<int>::max();  // the options are ints
  const std::string what =
      "a whole number of at least " + std::to_string(least) + " (and at most " + std::to_string(kMost) + ")";
  return CLI::Validator(
      [least, what](std::string& value) -> std::string {
        std::size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || n < least || n > kMost)
          return "must be " + what + ", got '" + value + "'";
        return "";
      },
      "INT >= " + std::to_string(least));
}

}  // namespace anchor::cli
