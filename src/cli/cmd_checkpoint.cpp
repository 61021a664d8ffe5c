// anchor checkpoint verify DIR [--against REPORT] [--json] | anchor checkpoint list ROOT [--json]
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "anchor/common/units.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/checkpoint/dcp.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/error.hpp"
#include "anchor/pilot/observed.hpp"
#include "commands.hpp"
#include "report_file.hpp"

namespace anchor::cli {
namespace {

struct CheckpointOptions {
  std::string dir;
  std::string against;  // a program pilot's report: the digests it pinned for this save
  bool json = false;
};

// A path may hold any byte; JSON only UTF-8: "dir" shows other bytes as \xNN
// (the problems are valid UTF-8 already, Store::Verification).
nlohmann::json to_json(const checkpoint::Store::Verification& v) {
  return {{"dir", printable(v.dir)}, {"step", v.step},        {"state", v.state}, {"ok", v.ok},
          {"bytes", v.bytes},        {"problems", v.problems}};
}

// A program's own save (docs/checkpoints.md, "A program's checkpoints"): a DCP
// directory's structure, and with --against the digests a pilot pinned.
ExitCode verify_program_save(const std::string& dir, const CheckpointOptions& o) {
  std::optional<checkpoint::DcpVerification> dcp;
  std::optional<pilot::observed::PinnedCheck> pinned;
  if (checkpoint::is_dcp_dir(dir)) dcp = checkpoint::verify_dcp(dir);
  if (!o.against.empty()) pinned = pilot::observed::check_pinned(dir, read_report(o.against));
  std::vector<std::string> problems;
  if (dcp) problems = dcp->problems;
  if (pinned) problems.insert(problems.end(), pinned->problems.begin(), pinned->problems.end());
  if (o.json) {
    nlohmann::json j = {{"dir", printable(dir)}, {"ok", problems.empty()}, {"problems", problems}};
    if (dcp) j["dcp"] = dcp->to_json();
    if (pinned) j["against"] = pinned->to_json();
    std::cout << j.dump(2) << "\n";
  } else if (problems.empty()) {
    std::cout << for_terminal(dir) << ": ok (";
    if (dcp) std::cout << "DCP checkpoint, " << dcp->summary() << "; every storage item lies inside its file";
    if (dcp && pinned) std::cout << "; ";
    if (pinned)
      std::cout << "every file's size and SHA-256 match the save of step " << pinned->step << " the report pins";
    std::cout << ")\n";
  } else {
    std::cout << for_terminal(dir) << ": INVALID, " << problems.size()
              << (problems.size() == 1 ? " problem" : " problems") << ":\n";
    for (const auto& p : problems) std::cout << "  - " << p << "\n";
  }
  return problems.empty() ? ExitCode::kOk : ExitCode::kVerification;
}

ExitCode run_verify(const CheckpointOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_directory(o.dir, ec))
    throw Error(ErrorKind::kUsage, "checkpoint verify: " + o.dir + " is not a directory",
                "pass one step directory, e.g. runs/<id>/checkpoints/step-00000002");
  std::string dir = std::filesystem::path(o.dir).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!o.against.empty() || checkpoint::is_dcp_dir(dir)) return verify_program_save(dir, o);
  auto parent = std::filesystem::path(dir).parent_path().string();
  checkpoint::Store store(parent.empty() ? "." : parent);
  auto v = store.verify(dir);
  if (o.json) {
    std::cout << to_json(v).dump(2) << "\n";
  } else if (v.ok) {
    std::cout << dir << ": ok (step " << v.step << ", committed, " << human_bytes(double(v.bytes))
              << ", every file's size and SHA-256 match manifest.json)\n";
  } else {
    std::cout << dir << ": INVALID (" << v.state << "), " << v.problems.size()
              << (v.problems.size() == 1 ? " problem" : " problems") << ":\n";
    for (const auto& p : v.problems) std::cout << "  - " << p << "\n";
    std::cout << "restore skips this directory and falls back to the next older committed step\n";
  }
  return v.ok ? ExitCode::kOk : ExitCode::kVerification;
}

ExitCode run_list(const CheckpointOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_directory(o.dir, ec))
    throw Error(ErrorKind::kUsage, "checkpoint list: " + o.dir + " is not a directory",
                "pass a checkpoint root, e.g. runs/<id>/checkpoints");
  checkpoint::Store store(o.dir);
  auto all = store.list();
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : all) j.push_back(to_json(v));
    std::cout << j.dump(2) << "\n";
    return ExitCode::kOk;
  }
  std::printf("%-10s %-12s %-11s %s\n", "STEP", "STATE", "SIZE", "DIRECTORY / PROBLEMS");
  bool newest_marked = false;
  for (const auto& v : all) {
    std::string state = v.state;
    if (v.ok && !newest_marked) {
      state += "*";
      newest_marked = true;
    }
    std::printf("%-10lld %-12s %-11s %s\n", static_cast<long long>(v.step), state.c_str(),
                human_bytes(double(v.bytes)).c_str(), std::filesystem::path(v.dir).filename().c_str());
    for (const auto& p : v.problems) std::printf("%35s- %s\n", "", p.c_str());
  }
  if (all.empty())
    std::printf("(no checkpoints under %s)\n", o.dir.c_str());
  else if (newest_marked)
    std::printf("* the step restore would pick\n");
  else
    std::printf("no checkpoint verifies: restore would start from scratch\n");
  return ExitCode::kOk;
}

}  // namespace

Runner setup_checkpoint(CLI::App& sub, const GlobalOptions&) {
  auto opts = std::make_shared<CheckpointOptions>();
  sub.require_subcommand(1);
  CLI::App* verify = sub.add_subcommand(
      "verify", "Check one checkpoint directory completely; explains every problem (exit 3 if invalid)");
  verify
      ->add_option("dir", opts->dir,
                   "a step directory, e.g. runs/<id>/checkpoints/step-00000002, or a program's save (a "
                   "torch.distributed.checkpoint directory is recognised by its .metadata)")
      ->type_name("DIR")
      ->required();
  verify
      ->add_option("--against", opts->against,
                   "a program pilot's report.json (or run directory): check every file of this save against the "
                   "SHA-256 it pinned")
      ->type_name("PATH");
  verify->add_flag("--json", opts->json, "print the result as JSON on stdout (default: off)");
  CLI::App* list = sub.add_subcommand("list", "Show every step, temp and trash directory with its state");
  list->add_option("dir", opts->dir, "a checkpoint root, e.g. runs/<id>/checkpoints")->type_name("DIR")->required();
  list->add_flag("--json", opts->json, "print the rows as JSON on stdout (default: off)");
  return [opts, verify]() { return verify->parsed() ? run_verify(*opts) : run_list(*opts); };
}

}  // namespace anchor::cli
