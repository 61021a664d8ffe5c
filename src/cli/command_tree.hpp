#pragma once
// The command tree as people see it, read from the CLI11 app that parses the
// command line: what `anchor completion bash|zsh|fish` and `anchor manpage` are
// generated from, so they cannot drift from --help. Internal commands (their
// group is empty, or their name starts with "__") are left out.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace anchor::cli {

struct OptionInfo {
  std::vector<std::string> names;  // "-q", "--quiet"; a positional: empty
  std::string positional;          // a positional's name ("config"); else ""
  std::string description;
  std::string envname;               // ANCHOR_LOG_LEVEL, or ""
  std::vector<std::string> choices;  // from an IsMember check: "init", "latest"
  bool takes_value = false;          // false: a flag
  bool repeatable = false;           // --set a=1 --set b=2
  bool numeric = false;              // INT, FLOAT: no file names to offer
  // What the value is, as --help names it: FILE, DIR, PATH (either),
  // KEY=VALUE (a config key's setting: completion offers the keys), OLD=NEW;
  // "" for a number, a choice or plain text.
  std::string metavar;
  bool required = false;
};

struct CommandInfo {
  std::vector<std::string> path;  // {"anchor", "config", "check"}
  std::string description;
  std::vector<OptionInfo> options;      // its own, the help flag included
  std::vector<OptionInfo> positionals;  // in order
  std::vector<CommandInfo> subcommands;
  bool requires_subcommand = false;
  std::string footer;

  std::string path_text() const;  // "anchor config check"
};

CommandInfo command_tree(const CLI::App& root);

// The scripts and the page (cmd_completion.cpp). `version` goes into their
// header; `date` (YYYY-MM-DD) into the page's title line.
std::string bash_completion(const CommandInfo& root, const std::string& version);
std::string zsh_completion(const CommandInfo& root, const std::string& version);
std::string fish_completion(const CommandInfo& root, const std::string& version);
std::string man_page(const CommandInfo& root, const std::string& version, const std::string& date);

}  // namespace anchor::cli
