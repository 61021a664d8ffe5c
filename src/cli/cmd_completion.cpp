// anchor completion bash|zsh|fish, anchor manpage: generated from the command tree
// (command_tree.hpp), so they say what --help says.
#include <cctype>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "anchor/build_info.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "command_tree.hpp"
#include "commands.hpp"

namespace anchor::cli {
namespace {

// Every option a command accepts: its own, then its ancestors' (the root app
// falls through, so `anchor pilot x.yaml -q` is `anchor -q pilot x.yaml`).
struct Visible {
  const CommandInfo* command;
  std::vector<const OptionInfo*> options;
};

void visit(const CommandInfo& c, const std::vector<const OptionInfo*>& inherited, std::vector<Visible>& out) {
  Visible v{&c, {}};
  std::set<std::string> seen;
  for (const auto& o : c.options) {
    v.options.push_back(&o);
    seen.insert(o.names.begin(), o.names.end());
  }
  for (const OptionInfo* o : inherited)
    if (!seen.count(o->names.front())) v.options.push_back(o);
  out.push_back(v);
  for (const auto& sub : c.subcommands) {
    std::vector<const OptionInfo*> pass;
    for (const OptionInfo* o : v.options)
      if (o->names.front() != "-h" && o->names.front() != "--help" && o->names.back() != "--version") pass.push_back(o);
    visit(sub, pass, out);
  }
}

std::vector<Visible> visible(const CommandInfo& root) {
  std::vector<Visible> out;
  visit(root, {}, out);
  return out;
}

std::string joined(const std::vector<std::string>& words, const char* sep = " ") {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

// A word in single quotes, for the shell.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// ---- bash -------------------------------------------------------------------

const char* const kBashFunction = R"(_anchor() {
  local cur=${COMP_WORDS[COMP_CWORD]} key=anchor value_of= prefix= w i
  # The command path so far, and whether the word before the cursor is an
  # option that takes a value. "=" is a word of its own when COMP_WORDBREAKS
  # holds it (the default): --start-from=latest is three words then.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == = ]] && continue
    if [[ -n $value_of ]]; then value_of=; continue; fi
    case $w in
      -*=*) ;;
      -*) [[ " ${_anchor_valued[$key]-} " == *" $w "* ]] && value_of=$w ;;
      *) [[ " ${_anchor_subs[$key]-} " == *" $w "* ]] && key="$key $w" ;;
    esac
  done
  [[ $cur == = ]] && cur=
  if [[ -z $value_of && $cur == --*=* ]]; then
    value_of=${cur%%=*} prefix=${cur%%=*}= cur=${cur#*=}
  fi
  COMPREPLY=()
  if [[ -n $value_of ]]; then
    local choices=${_anchor_choices["$key $value_of"]-}
    if [[ -n $choices ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$choices" -P "$prefix" -- "$cur")
    elif [[ -n $prefix ]]; then
      :
    elif [[ ${_anchor_valuekind["$key $value_of"]-} == KEY=VALUE ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$_anchor_setting_keys" -S = -- "$cur")
      compopt -o nospace 2>/dev/null
    elif [[ ${_anchor_valuekind["$key $value_of"]-} == DIR ]]; then
      mapfile -t COMPREPLY < <(compgen -d -- "$cur")
      compopt -o filenames 2>/dev/null
    elif [[ -z ${_anchor_numeric["$key $value_of"]-} ]]; then
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      compopt -o filenames 2>/dev/null
    fi
  elif [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_anchor_opts[$key]-}" -- "$cur")
  elif [[ -n ${_anchor_subs[$key]-} ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_anchor_subs[$key]-}" -- "$cur")
  elif [[ -n ${_anchor_args[$key]-} ]]; then
    mapfile -t COMPREPLY < <(compgen -W "${_anchor_args[$key]}" -- "$cur")
  elif [[ ${_anchor_files[$key]-} == DIR ]]; then
    mapfile -t COMPREPLY < <(compgen -d -- "$cur")
    compopt -o filenames 2>/dev/null
  elif [[ -n ${_anchor_files[$key]-} ]]; then
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    compopt -o filenames 2>/dev/null
  fi
  return 0
}
complete -F _anchor anchor
)";

// ---- zsh --------------------------------------------------------------------

// Text inside an _arguments spec's [...] or a _describe item.
std::string zsh_text(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\' || ch == '[' || ch == ']' || ch == ':') out += '\\';
    out += ch == '\n' ? ' ' : ch;
  }
  return out;
}

std::string zsh_function_name(const CommandInfo& c) {
  std::string name = "_anchor";
  for (std::size_t i = 1; i < c.path.size(); ++i) {
    name += "__";
    for (char ch : c.path[i]) name += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
  }
  return name;
}

std::string zsh_action(const OptionInfo& o) {
  if (!o.choices.empty()) return "(" + joined(o.choices) + ")";
  if (o.numeric) return " ";
  if (o.metavar == "DIR") return "_files -/";
  if (o.metavar == "KEY=VALUE") return "_anchor_setting_keys";
  return "_files";
}

// One _arguments spec per option: '(-q --quiet)'{-q,--quiet}'[...]'.
std::string zsh_option_spec(const OptionInfo& o) {
  const std::string desc = "[" + zsh_text(o.description) + "]";
  const std::string value = o.takes_value ? ":value:" + zsh_action(o) : "";
  auto spelled = [&](const std::string& n) {
    if (!o.takes_value) return n;
    return n + (n.rfind("--", 0) == 0 ? "=" : "+");
  };
  const std::string star = o.repeatable ? "*" : "";
  if (o.names.size() == 1) return quoted(star + spelled(o.names[0]) + desc + value);
  std::string braces;
  for (const auto& n : o.names) braces += (braces.empty() ? "" : ",") + spelled(n);
  const std::string exclusive = o.repeatable ? "*" : "(" + joined(o.names) + ")";
  return quoted(exclusive) + "{" + braces + "}" + quoted(desc + value);
}

void zsh_command(const Visible& v, std::ostream& out) {
  const CommandInfo& c = *v.command;
  out << zsh_function_name(c) << "() {\n"
      << "  local curcontext=$curcontext state state_descr line\n"
      << "  typeset -A opt_args\n"
      << "  _arguments -C";
  for (const OptionInfo* o : v.options) out << " \\\n    " << zsh_option_spec(*o);
  int n = 0;
  for (const auto& p : c.positionals) {
    const std::string spec = p.repeatable ? "*" : std::to_string(++n);
    out << " \\\n    " << quoted(spec + ":" + zsh_text(p.positional) + ":" + zsh_action(p));
  }
  // (-): once the command word is there, the words after it are its own
  // (`anchor pilot -q --j`), not this level's options.
  if (!c.subcommands.empty()) out << " \\\n    '(-)1: :->command' \\\n    '(-)*:: :->argument'";
  out << " && return 0\n";
  if (!c.subcommands.empty()) {
    out << "  case $state in\n    command)\n      local -a commands=(";
    for (const auto& s : c.subcommands) out << "\n        " << quoted(zsh_text(s.path.back()) + ":" + s.description);
    out << "\n      )\n      _describe -t commands " << quoted(c.path_text() + " command") << " commands\n      ;;\n"
        << "    argument)\n      case $words[1] in\n";
    for (const auto& s : c.subcommands)
      out << "        " << quoted(s.path.back()) << ") " << zsh_function_name(s) << " ;;\n";
    out << "      esac\n      ;;\n  esac\n";
  }
  out << "}\n\n";
}

// ---- man --------------------------------------------------------------------

// Text for roff: backslashes escaped, no line that starts a request.
std::string roff(const std::string& s) {
  std::string out;
  bool line_start = true;
  for (char ch : s) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else
      out += ch;
    line_start = ch == '\n';
  }
  return out;
}

void man_option(const OptionInfo& o, std::ostream& out) {
  out << ".TP\n";
  std::string names;
  for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + std::string("\\fB") + roff(n) + "\\fR";
  out << names;
  if (o.takes_value)
    out << " \\fI"
        << (!o.choices.empty()   ? roff(joined(o.choices, "|"))
            : !o.metavar.empty() ? roff(o.metavar)
            : o.numeric          ? std::string("N")
                                 : std::string("VALUE"))
        << "\\fR";
  out << "\n" << roff(o.description);
  if (o.repeatable && o.description.find("repeatable") == std::string::npos) out << " (repeatable)";
  if (!o.envname.empty()) out << " (environment: " << roff(o.envname) << ")";
  out << "\n";
}

std::string usage(const CommandInfo& c) {
  std::string u = "\\fB" + roff(c.path_text()) + "\\fR";
  for (const auto& p : c.positionals)
    u += p.required ? " \\fI" + roff(p.positional) + "\\fR" : " [\\fI" + roff(p.positional) + "\\fR]";
  if (!c.subcommands.empty()) u += " \\fIcommand\\fR";
  if (!c.options.empty()) u += " [\\fIoptions\\fR]";
  return u;
}

void man_command(const CommandInfo& c, std::ostream& out) {
  out << ".SS \"" << roff(c.path_text()) << "\"\n" << roff(c.description) << "\n.PP\n" << usage(c) << "\n";
  for (const auto& o : c.options)
    if (o.names.back() != "--help") man_option(o, out);
  for (const auto& sub : c.subcommands) man_command(sub, out);
}

}  // namespace

std::string bash_completion(const CommandInfo& root, const std::string& version) {
  std::map<std::string, std::string> subs, opts, valued, choices, numeric, kinds, files, args;
  for (const auto& v : visible(root)) {
    const std::string key = v.command->path_text();
    std::vector<std::string> sub_names, opt_names, valued_names;
    for (const auto& s : v.command->subcommands) sub_names.push_back(s.path.back());
    for (const OptionInfo* o : v.options) {
      opt_names.insert(opt_names.end(), o->names.begin(), o->names.end());
      if (!o->takes_value) continue;
      valued_names.insert(valued_names.end(), o->names.begin(), o->names.end());
      for (const auto& n : o->names) {
        if (!o->choices.empty()) choices[key + " " + n] = joined(o->choices);
        if (o->numeric) numeric[key + " " + n] = "1";
        if (!o->metavar.empty()) kinds[key + " " + n] = o->metavar;
      }
    }
    if (!sub_names.empty()) subs[key] = joined(sub_names);
    opts[key] = joined(opt_names);
    if (!valued_names.empty()) valued[key] = joined(valued_names);
    if (!v.command->positionals.empty() && !v.command->positionals.front().choices.empty())
      args[key] = joined(v.command->positionals.front().choices);
    else if (!v.command->positionals.empty())
      files[key] = v.command->positionals.front().metavar == "DIR" ? "DIR" : "FILE";
  }
  std::ostringstream out;
  out << "# bash completion for anchor " << version << ", generated by `anchor completion bash` from its\n"
      << "# command tree. Install it as ~/.local/share/bash-completion/completions/anchor (or\n"
      << "# /usr/share/bash-completion/completions/anchor), or source it from ~/.bashrc.\n";
  auto table = [&out](const char* name, const std::map<std::string, std::string>& rows) {
    out << "declare -gA " << name << "=(";
    for (const auto& [k, v] : rows) out << "\n  [" << quoted(k) << "]=" << quoted(v);
    out << "\n)\n";
  };
  table("_anchor_subs", subs);
  table("_anchor_opts", opts);
  table("_anchor_valued", valued);
  table("_anchor_choices", choices);
  table("_anchor_numeric", numeric);
  table("_anchor_valuekind", kinds);
  table("_anchor_files", files);
  table("_anchor_args", args);
  out << "_anchor_setting_keys=" << quoted(joined(config::setting_keys())) << "\n";
  out << kBashFunction;
  return out.str();
}

std::string zsh_completion(const CommandInfo& root, const std::string& version) {
  std::ostringstream out;
  out << "#compdef anchor\n"
      << "# zsh completion for anchor " << version << ", generated by `anchor completion zsh` from its\n"
      << "# command tree. Put it on $fpath as _anchor (such as <prefix>/share/zsh/site-functions),\n"
      << "# or source it after compinit.\n\n";
  out << "_anchor_setting_keys() {\n  local -a keys=(";
  for (const auto& k : config::setting_keys()) out << "\n    " << quoted(k + "=");
  out << "\n  )\n  compadd -S '' -a keys\n}\n\n";
  for (const auto& v : visible(root)) zsh_command(v, out);
  out << "if [[ $funcstack[1] == _anchor ]]; then\n  _anchor \"$@\"\nelse\n  compdef _anchor anchor\nfi\n";
  return out.str();
}

namespace {

// ---- fish -------------------------------------------------------------------

// A word in fish's single quotes: only \ and ' are special there.
std::string fish_quoted(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\\' || ch == '\'') out += '\\';
    out += ch == '\n' ? ' ' : ch;
  }
  return out + "'";
}

// The command path before the cursor ("anchor config check"): the words that
// name a command, past options and the values they take.
const char* const kFishFunctions = R"(function __anchor_path
    set -l words (commandline -opc)
    set -e words[1]
    set -l path anchor
    set -l value 0
    for w in $words
        if test $value = 1
            set value 0
            continue
        end
        switch $w
            case '-*=*'
            case '-*'
                contains -- "$path $w" $__anchor_valued; and set value 1
            case '*'
                contains -- "$path $w" $__anchor_commands; and set path "$path $w"
        end
    end
    echo $path
end

function __anchor_at
    test (__anchor_path) = "$argv"
end

function __anchor_setting_keys
    printf '%s=\n' $__anchor_keys
end

)";

// One `complete` line's value part for an option, and for the first positional.
std::string fish_value(const OptionInfo& o) {
  if (!o.choices.empty()) return " -x -a " + fish_quoted(joined(o.choices));
  if (o.numeric) return " -x";
  if (o.metavar == "DIR") return " -x -a '(__fish_complete_directories (commandline -ct))'";
  if (o.metavar == "KEY=VALUE") return " -x -a '(__anchor_setting_keys)'";
  return " -r -F";
}

}  // namespace

std::string fish_completion(const CommandInfo& root, const std::string& version) {
  std::ostringstream out;
  out << "# fish completion for anchor " << version << ", generated by `anchor completion fish` from its\n"
      << "# command tree. Install it as ~/.config/fish/completions/anchor.fish (or\n"
      << "# <prefix>/share/fish/vendor_completions.d/anchor.fish).\n\n";
  const auto all = visible(root);
  std::vector<std::string> commands, valued;
  for (const auto& v : all) {
    if (v.command != &root) commands.push_back(quoted(v.command->path_text()));
    for (const OptionInfo* o : v.options)
      if (o->takes_value)
        for (const auto& n : o->names) valued.push_back(quoted(v.command->path_text() + " " + n));
  }
  out << "set -g __anchor_commands " << joined(commands) << "\n"
      << "set -g __anchor_valued " << joined(valued) << "\n"
      << "set -g __anchor_keys " << joined(config::setting_keys()) << "\n\n"
      << kFishFunctions << "complete -c anchor -f\n";
  for (const auto& v : all) {
    const CommandInfo& c = *v.command;
    const std::string at = " -n " + fish_quoted("__anchor_at " + c.path_text());
    for (const auto& sub : c.subcommands)
      out << "complete -c anchor" << at << " -f -a " << fish_quoted(sub.path.back()) << " -d "
          << fish_quoted(sub.description) << "\n";
    for (const OptionInfo* o : v.options) {
      out << "complete -c anchor" << at;
      for (const auto& n : o->names) out << (n.rfind("--", 0) == 0 ? " -l " + n.substr(2) : " -s " + n.substr(1));
      out << " -d " << fish_quoted(o->description) << (o->takes_value ? fish_value(*o) : "") << "\n";
    }
    if (!c.positionals.empty()) {  // its choices, directories or files
      const OptionInfo& p = c.positionals.front();
      const std::string what = fish_value(p);
      out << "complete -c anchor" << at << (what == " -r -F" ? std::string(" -F") : " -f" + what.substr(3)) << "\n";
    }
  }
  return out.str();
}

namespace {

// "anchor: prove a training run ..." -> "prove a training run ...".
std::string what_it_does(const std::string& description) {
  const std::string prefix = "anchor: ";
  return description.rfind(prefix, 0) == 0 ? description.substr(prefix.size()) : description;
}

}  // namespace

std::string man_page(const CommandInfo& root, const std::string& version, const std::string& date) {
  std::ostringstream out;
  out << ".\\\" Generated by `anchor manpage` from its command tree; edit src/cli, not this page.\n"
      << ".TH ANCHOR 1 \"" << date << "\" \"anchor " << roff(version) << "\" \"User Commands\"\n"
      << ".SH NAME\nanchor, anchor-torch \\- " << roff(what_it_does(root.description)) << "\n"
      << ".SH SYNOPSIS\n\\fBanchor\\fR [\\fIglobal options\\fR] \\fIcommand\\fR [\\fIoptions\\fR] [\\fIarguments\\fR]\n"
      << ".SH DESCRIPTION\n"
      << "anchor proves a PyTorch training run on one node before the long run: it pins what decides the result, "
         "trains, checkpoints, kills the process, restores in a fresh one, checks that the resumed run matches the "
         "uninterrupted one, measures, plans the long run, and writes a signed report.\n"
      << ".PP\n\\fBanchor\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR lists a command's options.\n"
      << ".PP\n\\fBanchor\\-torch\\fR is the same command line with LibTorch linked: the pilot's workers run it, "
         "and \\fBanchor\\fR hands it the commands that need LibTorch in their own process. Either binary accepts "
         "every command.\n"
      << ".SH GLOBAL OPTIONS\nThese may come before or after the command.\n";
  for (const auto& o : root.options) man_option(o, out);
  out << ".SH COMMANDS\n";
  for (const auto& sub : root.subcommands) man_command(sub, out);
  std::map<std::string, std::string> env;
  for (const auto& v : visible(root))
    for (const OptionInfo* o : v.options)
      if (!o->envname.empty()) env[o->envname] = o->names.back();
  out << ".SH ENVIRONMENT\n";
  for (const auto& [name, option] : env)
    out << ".TP\n.B " << roff(name) << "\nThe value of \\fB" << roff(option)
        << "\\fR when the command line does not give it.\n";
  // What anchor reads (or sets) besides its options' variables; the fault seams are in docs/development.md.
  static const std::pair<const char*, const char*> kMore[] = {
      {"NO_COLOR", "Set and not empty: no colour in the log, even on a terminal."},
      {"ANCHOR_KEY_PASSPHRASE", "The passphrase of an encrypted private key, where no --passphrase-file gives it."},
      {"XDG_CONFIG_HOME, HOME",
       "Your signing key, made on first use, is kept in XDG_CONFIG_HOME/anchor, else "
       "HOME/.config/anchor."},
      {"ANCHOR_CACHE_DIR, XDG_CACHE_HOME",
       "The hash cache and what anchor-torch reported of a process that "
       "trains: ANCHOR_CACHE_DIR, else XDG_CACHE_HOME/anchor, else "
       "HOME/.cache/anchor."},
      {"ANCHOR_CONTAINER_DIGEST",
       "The container image's digest, pinned where anchor cannot read it from the "
       "container runtime."},
      {"ANCHOR_PROGRESS_S", "Seconds between a long stage's progress lines (0.1 to 86400)."},
      {"RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
       "Set by torchrun: anchor pilot runs as one of its ranks."},
      {"SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE",
       "Set by srun: anchor pilot runs as one of its tasks."},
      {"GLOO_SOCKET_IFNAME", "The network interface of a multi-node pilot's gloo process group, as in PyTorch."},
      {"ANCHOR_PILOT_SPEC",
       "Set by anchor for a program it pilots: the file that says what this process is to do "
       "(python/anchor_pilot reads it)."},
      {"ANCHOR_PILOT_GUARD",
       "Set by anchor for every process a pilot starts, and inherited by what they start: if "
       "anchor is killed, its sentinel ends every process that carries it."},
      {"ANCHOR_FAULT, ANCHOR_PILOT_FAULT, ANCHOR_GRAD_FAULT, ANCHOR_DIST_FAULT, ANCHOR_NODE_FAULT, "
       "ANCHOR_SIGNAL_FAULT",
       "Fault seams for anchor's own tests (docs/development.md); never set for a real run."},
  };
  for (const auto& [name, what] : kMore) out << ".TP\n.B " << roff(name) << "\n" << roff(what) << "\n";
  const std::pair<ExitCode, const char*> codes[] = {
      {ExitCode::kOk, "success"},
      {ExitCode::kRuntime, "a stage failed, an I/O error, an internal error"},
      {ExitCode::kUsage, "a bad command line or config"},
      {ExitCode::kVerification, "verification failed: drift, a resume mismatch, a bad signature, a corrupt checkpoint"},
      {ExitCode::kInterrupted, "interrupted (SIGINT)"},
      {ExitCode::kTerminated, "terminated (SIGTERM)"},
  };
  out << ".SH EXIT STATUS\n";
  for (const auto& [code, what] : codes) out << ".TP\n.B " << static_cast<int>(code) << "\n" << roff(what) << "\n";
  out << ".SH SEE ALSO\n"
      << "README.md and docs/ of the source tree, installed under share/doc/anchor; "
         "\\fBanchor completion\\fR \\fIbash\\fR|\\fIzsh\\fR|\\fIfish\\fR for shell completion.\n";
  return out.str();
}

Runner setup_completion(CLI::App& sub, const GlobalOptions&) {
  auto shell = std::make_shared<std::string>();
  sub.add_option("shell", *shell, "bash, zsh or fish")->required()->check(CLI::IsMember({"bash", "zsh", "fish"}));
  return [&sub, shell]() {
    const CommandInfo tree = command_tree(*sub.get_parent());
    std::cout << (*shell == "bash"  ? bash_completion(tree, build::kVersion)
                  : *shell == "zsh" ? zsh_completion(tree, build::kVersion)
                                    : fish_completion(tree, build::kVersion));
    return ExitCode::kOk;
  };
}

Runner setup_manpage(CLI::App& sub, const GlobalOptions&) {
  return [&sub]() {
    std::cout << man_page(command_tree(*sub.get_parent()), build::kVersion, build::kGitDate);
    return ExitCode::kOk;
  };
}

}  // namespace anchor::cli
