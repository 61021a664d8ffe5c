// anchor and anchor-torch (cli/bridge.hpp): the binaries. It parses the command line, dispatches to the
// subcommand table (commands.cpp), and is the only place that catches
// anchor::Error and turns it into a message and an exit code.
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "anchor/build_info.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "bridge.hpp"
#include "commands.hpp"

namespace {

// Ends the process once a command's results are durably written (every file
// anchor writes is fsynced before it is renamed into place): the static
// destructors of LibTorch's ~290 shared libraries cost ~0.2 s per process and
// protect nothing. Sanitizer builds exit normally so leak checks still run.
int finish(anchor::ExitCode code) {
  const int rc = static_cast<int>(code);  // the one place an ExitCode becomes the process's int
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  anchor::log::flush();
#if defined(__SANITIZE_ADDRESS__) || defined(ANCHOR_SANITIZED)
  return rc;
#else
  std::_Exit(rc);
#endif
}

}  // namespace

namespace anchor::cli {

std::string version_text() {
  using namespace anchor::build;
  std::string cuda = kLibTorchHasCuda
                         ? std::string(", CUDA ") + (*kLibTorchCudaVersion ? kLibTorchCudaVersion : "(version unknown)")
                         : std::string(", CPU only");
  return std::string("anchor ") + kVersion + " (" + kGitCommit + (kGitDirty ? ", with uncommitted changes" : "") +
         ")\nbuilt against LibTorch " + kLibTorchVersion + cuda + (kWithNccl ? ", NCCL backend" : ", no NCCL backend") +
         "\nbuild " + kBuildType + ", " + kCompiler +
         "\n(what a run loads is pinned by `anchor pin` and in every report: versions, libraries, driver)";
}

}  // namespace anchor::cli

namespace {

// The word where a command was expected, when it names no command (a typo:
// `anchor pilto`), else "". Only global options may come before it
// (--log-level takes a value); after anything else CLI11's message stands
// (`anchor --log-lvl debug pilot` is about the option, not about "debug").
std::string unknown_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (a.rfind("--log-level=", 0) == 0 || a == "-q" || a == "--quiet" || a == "-v" || a == "--verbose") continue;
    if (a.empty() || a[0] == '-') return "";
    for (const auto& c : anchor::cli::commands())
      if (a == c.name) return "";
    return a;
  }
  return "";
}

// "unknown command 'pilto' (did you mean 'pilot'?)", and the commands there are.
anchor::Error unknown_command_error(const std::string& word) {
  std::string nearest, names;
  std::size_t best = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : anchor::cli::commands()) {
    if (c.name[0] == '_') continue;  // internal
    names += (names.empty() ? "" : ", ") + std::string(c.name);
    const std::size_t d = anchor::config::edit_distance(word, c.name);
    if (d < best) {
      best = d;
      nearest = c.name;
    }
  }
  return anchor::Error(anchor::ErrorKind::kUsage,
                       "unknown command '" + anchor::printable(word) + "'" +
                           (nearest.empty() ? "" : " (did you mean '" + nearest + "'?)"),
                       "the commands are " + names + "; `anchor --help` says what each does");
}

// "\033[K" in a worker whose live line the supervisor draws on this terminal
// (include/anchor/protocol/progress.hpp): that line ends at column 0, where this starts.
const char* clear_line() {
  const char* live = std::getenv("ANCHOR_LIVE_PROGRESS");
  return live && std::string(live) == "1" && ::isatty(STDERR_FILENO) == 1 ? "\033[K" : "";
}

// The one place a fatal error is printed: "anchor: error: <what>", a config's
// problems one a line, "hint: <hint>"; returns the kind's exit code.
// A value quoted whole is cut (anchor::capped), and at most 20 problems are listed.
anchor::ExitCode report_error(const anchor::Error& e) {
  std::fprintf(stderr, "%sanchor: error: %s\n", clear_line(), anchor::for_terminal(anchor::capped(e.what())).c_str());
  if (const auto* config_error = dynamic_cast<const anchor::config::ConfigError*>(&e)) {
    constexpr std::size_t kListed = 20;
    const auto& problems = config_error->problems();
    for (std::size_t i = 0; i < problems.size() && i < kListed; ++i)
      std::fprintf(stderr, "  %s\n", anchor::for_terminal(anchor::capped(problems[i].format())).c_str());
    if (problems.size() > kListed) std::fprintf(stderr, "  ... and %zu more problems\n", problems.size() - kListed);
  }
  if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", anchor::for_terminal(anchor::capped(e.hint())).c_str());
  return anchor::exit_code_for(e.kind());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace anchor;
  cli::remember_argv(argc, argv);
  CLI::App app{
      "anchor: prove a training run on one node before the long run, "
      "and leave a signed record of it"};
  app.name("anchor");  // "Usage: anchor ...", not the path it was run by (issue 43.13)
  app.set_version_flag("--version", cli::version_text());
  app.require_subcommand(1);
  app.fallthrough();
  cli::GlobalOptions global;
  app.add_option("--log-level", global.log_level, "how much the log says")
      ->envname("ANCHOR_LOG_LEVEL")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  bool quiet = false, verbose = false;
  auto* quiet_flag = app.add_flag("-q,--quiet", quiet,
                                  "warnings and errors only on stderr (--log-level warn unless it is error or off)");
  app.add_flag("-v,--verbose", verbose, "debug lines too (--log-level debug)")->excludes(quiet_flag);

  std::vector<std::pair<CLI::App*, cli::Runner>> runners;
  for (const auto& cmd : cli::commands()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.summary);
    runners.emplace_back(sub, cmd.setup(*sub, global));
  }
  app.footer(
      "Exit codes: 0 ok, 1 runtime failure, 2 usage or config error, "
      "3 verification failed, 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n"
      "Docs: README.md and docs/ in the source tree.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string word = unknown_command(argc, argv); !word.empty())
      return static_cast<int>(report_error(unknown_command_error(word)));
    int rc = app.exit(e);
    if (rc != 0) cli::write_junit_for_command_line_error(app, e.what());
    return static_cast<int>(rc == 0 ? ExitCode::kOk : ExitCode::kUsage);
  }

  // -q lowers --log-level/ANCHOR_LOG_LEVEL to warn, never raises it (error and off stay);
  // -v is debug whatever they say: the flag is the nearer word.
  if (quiet && (global.log_level == "debug" || global.log_level == "info")) global.log_level = "warn";
  if (verbose) global.log_level = "debug";
  try {
    log::init(log::parse_level(global.log_level));
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return finish(run());
  } catch (const Error& e) {
    return static_cast<int>(report_error(e));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%sanchor: error: internal: %s\n", clear_line(), e.what());
    std::fprintf(stderr, "hint: this is a bug in anchor; please report it with the command line\n");
    return static_cast<int>(ExitCode::kRuntime);
  }
  return static_cast<int>(ExitCode::kUsage);
}
