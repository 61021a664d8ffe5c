#include "commands.hpp"

namespace anchor::cli {

const std::vector<Command>& commands() {
  // The order here is the order in --help.
  static const std::vector<Command> kCommands = {
      {"pin", "Pin inputs, dependencies and environment into manifest.json", setup_pin},
      {"config", "Check a config or print the effective config", setup_config},
  };
  return kCommands;
}

}  // namespace anchor::cli
