// The command tree (command_tree.hpp) and what is generated from it: bash and
// zsh completion, and the man page.
#include "command_tree.hpp"

#include <map>
#include <sstream>

namespace anchor::cli {
namespace {

bool internal(const CLI::App& app) { return app.get_group().empty() || app.get_name().rfind("__", 0) == 0; }

// CLI11 writes an IsMember check into the type name as "TEXT:{init,latest}".
std::vector<std::string> choices_of(const CLI::Option& opt) {
  const std::string type = opt.get_type_name();
  const auto open = type.rfind('{'), close = type.rfind('}');
  std::vector<std::string> out;
  if (open == std::string::npos || close == std::string::npos || close < open) return out;
  std::stringstream list(type.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

OptionInfo option_info(const CLI::Option& opt) {
  OptionInfo o;
  for (const auto& s : opt.get_snames()) o.names.push_back("-" + s);
  for (const auto& l : opt.get_lnames()) o.names.push_back("--" + l);
  if (o.names.empty()) o.positional = opt.get_name(true);
  o.description = opt.get_description();
  o.envname = opt.get_envname();
  o.choices = choices_of(opt);
  o.takes_value = opt.get_type_size() > 0 && opt.get_items_expected_max() > 0;
  o.repeatable = opt.get_items_expected_max() > 1 || opt.get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll;
  const std::string type = opt.get_type_name();
  o.numeric = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0 ||
              type.rfind("NUMBER", 0) == 0;
  o.required = opt.get_required();
  if (o.takes_value && o.choices.empty() && !o.numeric && type != "TEXT") o.metavar = type;
  return o;
}

CommandInfo walk(const CLI::App& app, std::vector<std::string> path) {
  CommandInfo c;
  c.path = std::move(path);
  c.description = app.get_description();
  c.footer = app.get_footer();
  c.requires_subcommand = app.get_require_subcommand_min() > 0;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    auto info = option_info(*opt);
    if (opt == app.get_help_ptr()) info.description = "print this command's help and exit";
    (info.names.empty() ? c.positionals : c.options).push_back(std::move(info));
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (internal(*sub)) continue;
    auto sub_path = c.path;
    sub_path.push_back(sub->get_name());
    c.subcommands.push_back(walk(*sub, std::move(sub_path)));
  }
  return c;
}

}  // namespace

std::string CommandInfo::path_text() const {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : " ") + p;
  return out;
}

// The root is "anchor" whatever argv[0] was (CLI11 names the app after it).
CommandInfo command_tree(const CLI::App& root) { return walk(root, {"anchor"}); }

}  // namespace anchor::cli
