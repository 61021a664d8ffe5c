// `anchor completion bash|zsh|fish` and `anchor manpage` (src/cli/cmd_completion.cpp):
// generated from the command tree, run in real bash, zsh and fish, the page linted by
// mandoc. Each check holds a control that would catch a completion that offers
// everything, or nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "anchor/common/fs.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using Words = std::set<std::string>;

std::string stdout_of(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ANCHOR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = anchor::proc::run_capture(argv);
  EXPECT_EQ(r.status, 0) << r.out;
  return r.out;
}

Words lines_of(const std::string& text) {
  Words out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line != "<done>") out.insert(line);
  return out;
}

std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// What bash offers for `words` (the last one is being completed), from the
// generated script sourced into a clean bash, run in `cwd`.
class BashCompletion : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("completion-bash");
    // The command docs/development.md gives, into a file of our own.
    anchor::fs::atomic_write_file(dir_->str("anchor.bash"), stdout_of({"completion", "bash"}));
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static Words complete(const std::vector<std::string>& words, const std::string& cwd = ANCHOR_SOURCE_DIR) {
    std::string array;
    for (const auto& w : words) array += shell_word(w) + " ";
    const std::string script = "source " + shell_word(dir_->str("anchor.bash")) + " || exit 9\n" +
                               "complete -p anchor >/dev/null || exit 8\n" + "cd " + shell_word(cwd) + "\n" +
                               "COMP_WORDS=(" + array + "); COMP_CWORD=" + std::to_string(words.size() - 1) + "\n" +
                               "_anchor; printf '%s\\n' \"${COMPREPLY[@]}\"\n";
    // set -u: a user's nounset must not break completion.
    auto r = anchor::proc::run_capture({"/bin/bash", "--norc", "--noprofile", "-u", "-c", script});
    EXPECT_EQ(r.status, 0) << r.out;
    return lines_of(r.out);
  }

  static std::unique_ptr<TempDir> dir_;
};
std::unique_ptr<TempDir> BashCompletion::dir_;

TEST_F(BashCompletion, OffersThePublicCommandsAndNoInternalOne) {
  const Words all = complete({"anchor", ""});
  for (const char* c : {"pilot", "reproduce", "pin", "verify", "config", "checkpoint", "plan", "diff", "bundle",
                        "keygen", "completion", "manpage"})
    EXPECT_TRUE(all.count(c)) << c;
  for (const auto& w : all) EXPECT_EQ(w.rfind("__", 0), std::string::npos) << w;
  EXPECT_EQ(complete({"anchor", "pi"}), (Words{"pilot", "pin"}));
  EXPECT_EQ(complete({"anchor", "config", ""}), (Words{"check", "dump"}));
  EXPECT_EQ(complete({"anchor", "-q", "checkpoint", "l"}), (Words{"list"}));
}

TEST_F(BashCompletion, OffersEachCommandsOwnOptionsAndTheGlobalOnes) {
  EXPECT_EQ(complete({"anchor", "pilot", "--j"}), (Words{"--json", "--junit"}));
  const Words dump = complete({"anchor", "config", "dump", "--"});
  EXPECT_TRUE(dump.count("--json") && dump.count("--set") && dump.count("--log-level") && dump.count("--quiet"));
  // Control: pilot's options are not offered to another command, nor to a typo.
  EXPECT_FALSE(dump.count("--run-dir"));
  EXPECT_TRUE(complete({"anchor", "config", "check", "--"}).count("--json"));
  EXPECT_FALSE(complete({"anchor", "config", "check", "--"}).count("--run-dir"));
  EXPECT_EQ(complete({"anchor", "pilto", "--j"}), Words{});
}

TEST_F(BashCompletion, OffersAnOptionsChoicesAndFilesWhereAFileIsExpected) {
  EXPECT_EQ(complete({"anchor", "pilot", "x.yaml", "--start-from", ""}), (Words{"init", "latest"}));
  // --start-from=la: bash splits at "=" by default, and need not.
  EXPECT_EQ(complete({"anchor", "pilot", "--start-from", "=", "la"}), (Words{"latest"}));
  EXPECT_EQ(complete({"anchor", "pilot", "--start-from=la"}), (Words{"--start-from=latest"}));
  EXPECT_EQ(complete({"anchor", "--log-level", "w"}), (Words{"warn"}));
  // A positional with choices offers them, not files.
  EXPECT_EQ(complete({"anchor", "completion", ""}), (Words{"bash", "fish", "zsh"}));
  // A number is not a file name.
  EXPECT_EQ(complete({"anchor", "pilot", "--nproc-per-node", ""}), Words{});
  // The config and the --junit path are files, in the directory the shell is in.
  TempDir cwd("completion-cwd");
  anchor::fs::atomic_write_file(cwd.str("pilot-a.yaml"), "");
  anchor::fs::atomic_write_file(cwd.str("pilot-b.yaml"), "");
  EXPECT_EQ(complete({"anchor", "pilot", "pilot-"}, cwd.str()), (Words{"pilot-a.yaml", "pilot-b.yaml"}));
  EXPECT_EQ(complete({"anchor", "pilot", "--junit", "pilot-a"}, cwd.str()), (Words{"pilot-a.yaml"}));
  // Control: where a command is expected, no file is offered.
  EXPECT_EQ(complete({"anchor", "pilot-"}, cwd.str()), Words{});
  // Where a directory is expected, only directories (control: --junit takes both).
  std::filesystem::create_directory(cwd.str("pilot-runs"));
  EXPECT_EQ(complete({"anchor", "pilot", "--run-dir", "pilot-"}, cwd.str()), (Words{"pilot-runs"}));
  EXPECT_EQ(complete({"anchor", "checkpoint", "list", "pilot-"}, cwd.str()), (Words{"pilot-runs"}));
  EXPECT_EQ(complete({"anchor", "pilot", "--junit", "pilot-"}, cwd.str()),
            (Words{"pilot-a.yaml", "pilot-b.yaml", "pilot-runs"}));
}

// --set offers the config's keys, "=" attached: every key, and only keys.
TEST_F(BashCompletion, SetOffersTheConfigsKeys) {
  EXPECT_EQ(complete({"anchor", "pilot", "x.yaml", "--set", "train.micro"}), (Words{"train.micro_batch="}));
  EXPECT_EQ(complete({"anchor", "plan", "r", "--set", "budget.no"}), (Words{"budget.nodes="}));
  const Words all = complete({"anchor", "config", "dump", "x.yaml", "--set", ""});
  EXPECT_TRUE(all.count("run.seed=") && all.count("device=") && all.count("checkpoint.dir="))
      << ::testing::PrintToString(all);
  EXPECT_GE(all.size(), 40u);
  // Control: a key that is not there is not offered, and --junit offers files, not keys.
  EXPECT_EQ(complete({"anchor", "pilot", "--set", "train.nope"}), Words{});
  EXPECT_FALSE(complete({"anchor", "pilot", "--junit", "train."}).count("train.micro_batch="));
}

// Every option `--help` lists is offered: the script comes from the same tree.
TEST_F(BashCompletion, OffersEveryOptionThatHelpLists) {
  for (const auto& cmd : std::vector<std::vector<std::string>>{{"pilot"},
                                                               {"reproduce"},
                                                               {"pin"},
                                                               {"verify"},
                                                               {"config", "dump"},
                                                               {"checkpoint", "list"},
                                                               {"plan"},
                                                               {"diff"},
                                                               {"bundle"},
                                                               {"keygen"}}) {
    std::vector<std::string> args = cmd;
    args.push_back("--help");
    const std::string help = stdout_of(args);
    std::vector<std::string> words = {"anchor"};
    words.insert(words.end(), cmd.begin(), cmd.end());
    words.push_back("-");
    const Words offered = complete(words);
    int listed = 0;
    std::istringstream in(help);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("  -", 0) != 0) continue;  // option rows: two spaces, then the names ("-h,--help")
      std::istringstream names(line.substr(2, line.find(' ', 2) - 2));
      for (std::string name; std::getline(names, name, ',');) {
        ++listed;
        EXPECT_TRUE(offered.count(name)) << "anchor " << cmd[0] << ": " << name << " is in --help, not offered";
      }
    }
    EXPECT_GE(listed, 3) << "the check read no options out of --help:\n" << help;
  }
}

// What zsh offers for `line` (completion at its end), in a real interactive zsh
// under a pty with compinit and the generated _anchor on $fpath.
Words zsh_complete(const std::string& fpath_dir, const std::string& line) {
  TempDir out("completion-zsh-out");
  auto r = anchor::proc::run_capture(
      {"/usr/bin/zsh", "-f", source_path("tests/support/zsh_complete.zsh"), fpath_dir, out.str("hits"), line});
  EXPECT_EQ(r.status, 0) << line << ": " << r.out;
  return lines_of(anchor::fs::read_file(out.str("hits")));
}

TEST(ZshCompletion, RunsInZshAndOffersCommandsOptionsAndChoices) {
  TempDir dir("completion-zsh");
  const std::string script = stdout_of({"completion", "zsh"});
  anchor::fs::atomic_write_file(dir.str("_anchor"), script);
  auto syntax = anchor::proc::run_capture({"/usr/bin/zsh", "-n", dir.str("_anchor")});
  ASSERT_EQ(syntax.status, 0) << syntax.out;

  const Words commands = zsh_complete(dir.str(), "anchor ");
  EXPECT_TRUE(commands.count("pilot") && commands.count("reproduce") && commands.count("manpage"))
      << ::testing::PrintToString(commands);
  for (const auto& w : commands) EXPECT_EQ(w.rfind("__", 0), std::string::npos) << w;
  const Words pilot = zsh_complete(dir.str(), "anchor pilot x.yaml --j");
  EXPECT_TRUE(pilot.count("--json") && pilot.count("--junit")) << ::testing::PrintToString(pilot);
  EXPECT_FALSE(pilot.count("--run-dir")) << ::testing::PrintToString(pilot);
  const Words start = zsh_complete(dir.str(), "anchor pilot x.yaml --start-from ");
  EXPECT_EQ(start, (Words{"init", "latest"}));
  EXPECT_EQ(zsh_complete(dir.str(), "anchor config "), (Words{"check", "dump"}));
  // A global option after the command is the command's business (CLI11 falls through).
  const Words quiet = zsh_complete(dir.str(), "anchor pilot -q --j");
  EXPECT_TRUE(quiet.count("--json") && quiet.count("--junit")) << ::testing::PrintToString(quiet);
  EXPECT_EQ(zsh_complete(dir.str(), "anchor config -v c"), (Words{"check"}));
  EXPECT_EQ(zsh_complete(dir.str(), "anchor pilot x.yaml --set train.micro"), (Words{"train.micro_batch="}));
  // Control: without the generated function on $fpath zsh offers no anchor command.
  TempDir empty("completion-zsh-empty");
  EXPECT_FALSE(zsh_complete(empty.str(), "anchor ").count("pilot"));
}

// What fish offers for `line` (completion at its end) with the generated
// script sourced: `complete -C`, fish's own completion of a command line.
Words fish_complete(const std::string& script, const std::string& line, const std::string& cwd = ANCHOR_SOURCE_DIR) {
  auto r = anchor::proc::run_capture(
      {"/usr/bin/fish", "--no-config", "-c",
       "cd " + shell_word(cwd) + "; and source " + shell_word(script) + "; and complete -C " + shell_word(line)});
  EXPECT_EQ(r.status, 0) << line << ": " << r.out;
  Words out;
  for (const auto& row : lines_of(r.out)) out.insert(row.substr(0, row.find('\t')));  // without the description
  return out;
}

TEST(FishCompletion, RunsInFishAndOffersCommandsOptionsChoicesKeysAndFiles) {
  TempDir dir("completion-fish");
  const std::string script = dir.str("anchor.fish");
  anchor::fs::atomic_write_file(script, stdout_of({"completion", "fish"}));
  auto syntax = anchor::proc::run_capture({"/usr/bin/fish", "--no-execute", script});
  ASSERT_EQ(syntax.status, 0) << syntax.out;
  const Words commands = fish_complete(script, "anchor ");
  EXPECT_TRUE(commands.count("pilot") && commands.count("reproduce") && commands.count("manpage"))
      << ::testing::PrintToString(commands);
  for (const auto& w : commands) EXPECT_EQ(w.rfind("__", 0), std::string::npos) << w;
  EXPECT_EQ(fish_complete(script, "anchor pi"), (Words{"pilot", "pin"}));
  EXPECT_EQ(fish_complete(script, "anchor config "), (Words{"check", "dump"}));
  EXPECT_EQ(fish_complete(script, "anchor -q checkpoint l"), (Words{"list"}));
  EXPECT_EQ(fish_complete(script, "anchor pilot x.yaml --j"), (Words{"--json", "--junit"}));
  EXPECT_EQ(fish_complete(script, "anchor pilot x.yaml --start-from "), (Words{"init", "latest"}));
  EXPECT_EQ(fish_complete(script, "anchor completion "), (Words{"bash", "fish", "zsh"}));
  EXPECT_EQ(fish_complete(script, "anchor pilot --set train.micro"), (Words{"train.micro_batch="}));
  EXPECT_EQ(fish_complete(script, "anchor pilot --nproc-per-node "), Words{});
  // Options of another command are not offered (control for the path logic).
  EXPECT_FALSE(fish_complete(script, "anchor config dump --").count("--run-dir"));
  EXPECT_TRUE(fish_complete(script, "anchor config dump --").count("--set"));
  TempDir cwd("completion-fish-cwd");
  anchor::fs::atomic_write_file(cwd.str("pilot-a.yaml"), "");
  std::filesystem::create_directory(cwd.str("pilot-runs"));
  EXPECT_EQ(fish_complete(script, "anchor pilot pilot-a", cwd.str()), (Words{"pilot-a.yaml"}));
  EXPECT_EQ(fish_complete(script, "anchor pilot --run-dir pilot-", cwd.str()), (Words{"pilot-runs/"}));
  EXPECT_EQ(fish_complete(script, "anchor pilot-", cwd.str()), Words{});
  // Control: without the script fish knows no anchor command.
  TempDir empty("completion-fish-empty");
  anchor::fs::atomic_write_file(empty.str("none.fish"), "\n");
  EXPECT_FALSE(fish_complete(empty.str("none.fish"), "anchor ").count("pilot"));
}

// mandoc's linter at warning level: "" when the page is clean.
std::string lint(const std::string& page_path) {
  auto r = anchor::proc::run_capture({"/usr/bin/mandoc", "-T", "lint", "-W", "warning", page_path});
  return r.status == 0 && r.out.empty() ? "" : "mandoc exit " + std::to_string(r.status) + ":\n" + r.out;
}

TEST(ManPage, IsCleanRoffThatDocumentsEveryCommandAndOption) {
  TempDir dir("manpage");
  const std::string page = stdout_of({"manpage"});
  anchor::fs::atomic_write_file(dir.str("anchor.1"), page);
  EXPECT_EQ(lint(dir.str("anchor.1")), "");
  auto r = anchor::proc::run_capture({"/usr/bin/mandoc", "-T", "utf8", dir.str("anchor.1")});
  ASSERT_EQ(r.status, 0) << r.out;
  std::string text;  // without the overstrike that marks bold and underlined text
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    if (i + 1 < r.out.size() && r.out[i + 1] == '\b') {
      ++i;
      continue;
    }
    text += r.out[i];
  }
  for (const char* want : {"anchor pilot",
                           "anchor config check",
                           "anchor checkpoint list",
                           "--start-from",
                           "--nproc-per-node",
                           "ANCHOR_LOG_LEVEL",
                           "EXIT STATUS",
                           "143",
                           "anchor completion",
                           "ANCHOR_KEY_PASSPHRASE",
                           "ANCHOR_CACHE_DIR",
                           "ANCHOR_PILOT_GUARD",
                           "MASTER_ADDR",
                           "SLURM_PROCID",
                           "ANCHOR_PILOT_FAULT",
                           "anchor, anchor-torch - ",
                           "--run-dir DIR",
                           "--junit FILE",
                           "--set KEY=VALUE",
                           "--map OLD=NEW",
                           "fish"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text.substr(0, 3000);
  EXPECT_EQ(text.find("__worker"), std::string::npos);
  // Control: the linter sees a broken page.
  anchor::fs::atomic_write_file(dir.str("broken.1"), page + ".SH\n.BOGUS macro\n");
  EXPECT_NE(lint(dir.str("broken.1")), "");
}

}  // namespace
