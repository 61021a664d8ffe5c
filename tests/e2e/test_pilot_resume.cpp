// End-to-end: `anchor pilot --start-from latest` (pilot.start_from: latest;
// docs/pilot.md, "Starting from a checkpoint"). Worker A restores the newest
// committed checkpoint of a shared checkpoint.dir instead of initialising,
// trains on from its step, and the pilot proves that restart point: after a
// 2-rank pilot killed in a save, the next pilot starts from the last committed
// step. Negative controls: nothing to start from, another model, another seed,
// a corrupted file, a start from initialisation into a used directory, and a
// save that would land on a broken directory.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/process.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::read_json;
using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

const std::string kPilot = source_path("configs/pilot.yaml");

// `anchor pilot` on configs/pilot.yaml with checkpoint.dir = ckpt and extra arguments.
anchor::testing::AnchorRun pilot(const TempDir& t, const std::string& run, const std::vector<std::string>& extra,
                                 const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> args = {"pilot",    kPilot,  "--run-dir",
                                   t.str(run), "--set", "checkpoint.dir=" + t.str("ckpt")};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_anchor(args, env);
}

bool committed(const TempDir& t, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08d", step);
  return std::filesystem::exists(t.path() / "ckpt" / name / "COMMITTED");
}

// The step directories in ckpt (not the torn `.tmp-` save a pilot's kill leaves, removed by the next pilot).
std::vector<std::string> step_dirs(const TempDir& t) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(t.path() / "ckpt"))
    if (e.path().filename().string().find('.') == std::string::npos) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The state groups a report records for one moment (model, optimizer, RNG, step).
json groups(const json& d) {
  return {{"model", d["model"]}, {"optimizer", d["optimizer"]}, {"rng", d["rng"]}, {"step", d["step"]}};
}

// The scenario: a 2-rank pilot commits step 2; the next one, started
// from it, loses rank 1 in its save of step 4 (no COMMITTED), and another loses
// rank 1 in the middle of step 3; the one after that starts from the last
// committed step (2), passes with bitwise resume on every rank, and its report
// says where it started.
TEST(PilotStartFromLatest, AfterARankKilledInASaveTheNextPilotStartsFromTheLastCommittedStep) {
  TempDir t("startdist");
  const std::vector<std::string> two = {"--nproc-per-node",           "2",     "--set",
                                        "distributed.strategy=zero1", "--set", "distributed.timeout_s=20"};
  auto r1 = pilot(t, "run1", two);
  ASSERT_EQ(r1.status, 0) << r1.output;
  ASSERT_TRUE(committed(t, 2));
  const auto rep1 = read_json(t.str("run1/report.json"));
  EXPECT_EQ(rep1["start"]["from"], "init");

  auto args2 = two;
  args2.push_back("--start-from");
  args2.push_back("latest");
  // The dead rank is named: by rank 0 when its wait ends first ("did not
  // answer"), else by the supervisor, which saw its child die (docs/pilot.md).
  auto names_rank1 = [](const std::string& out) {
    return out.find("rank 1 did not answer (dead or hung)") != std::string::npos ||
           out.find("rank 1 exited with status 137 (killed by SIGKILL)") != std::string::npos;
  };
  auto r2 = pilot(t, "run2", args2, {{"ANCHOR_DIST_FAULT", "sigkill_save:1:4"}});
  EXPECT_EQ(r2.status, 1) << r2.output;
  EXPECT_TRUE(names_rank1(r2.output)) << r2.output;
  EXPECT_NE(r2.output.find("pilot failed in stage checkpoint_save"), std::string::npos) << r2.output;
  EXPECT_FALSE(committed(t, 4));
  EXPECT_EQ(read_json(t.str("run2/report.json"))["start"]["step"], 2);

  // And one killed in the middle of a step (rank 1 in step 3, before its all-reduce).
  auto r2b = pilot(t, "run2b", args2, {{"ANCHOR_DIST_FAULT", "sigkill:1:3"}});
  EXPECT_EQ(r2b.status, 1) << r2b.output;
  EXPECT_TRUE(names_rank1(r2b.output)) << r2b.output;
  EXPECT_NE(r2b.output.find("pilot failed in stage train"), std::string::npos) << r2b.output;
  EXPECT_FALSE(committed(t, 4));

  auto r3 = pilot(t, "run3", args2);
  ASSERT_EQ(r3.status, 0) << r3.output;
  const auto rep = read_json(t.str("run3/report.json"));
  EXPECT_EQ(rep["status"], "passed");
  const auto& st = rep["start"];
  EXPECT_EQ(st["from"], "latest");
  EXPECT_EQ(st["step"], 2);
  EXPECT_EQ(std::filesystem::path(st["dir"].get<std::string>()).filename(), "step-00000002");
  EXPECT_EQ(st["manifest_sha256"], anchor::sha256_file(t.str("ckpt/step-00000002/manifest.json")).sha256);
  EXPECT_EQ(st["run_id"], rep1["run_id"]);  // the run that wrote it
  EXPECT_EQ(st["world_size"], 2);
  EXPECT_EQ(st["strategy"], "zero1");
  EXPECT_TRUE(st["config_differences"].empty()) << st.dump(2);
  EXPECT_EQ(st["rng_restore"]["carried"], json::array({0}));
  // Restored bitwise: the state worker A started from is the state the first pilot saved.
  EXPECT_EQ(st["restored_state"], groups(rep1["resume"]["state_digests"]["saved"]));
  // Steps continue from the restored step on every rank; B restored A's commit of step 4.
  EXPECT_EQ(rep["steps"]["train"][0]["step"], 3);  // step 3 is the one after checkpoint step-2
  EXPECT_EQ(read_json(t.str("run3/work/reference-rank1.json"))["train_steps"][0]["step"], 3);
  EXPECT_EQ(rep["resume"]["saved_step"], 4);
  EXPECT_EQ(rep["resume"]["restored_step"], 4);
  EXPECT_EQ(rep["resume"]["mode"], "bitwise");
  ASSERT_EQ(rep["resume"]["per_rank"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(rep["resume"]["per_rank"][rank]["verdict"], "match");
  // Started from step 2, the pilot trained steps 2 and 3 exactly as the first pilot's reference did.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rep["steps"]["train"][i]["loss"], rep1["steps"]["reference"][i]["loss"]) << i;
    EXPECT_EQ(rep["steps"]["train"][i]["batch_digest"], rep1["steps"]["reference"][i]["batch_digest"]) << i;
  }
  const auto md = anchor::fs::read_file(t.str("run3/report.md"));
  EXPECT_NE(md.find("## Start"), std::string::npos) << md;
  EXPECT_NE(md.find("From step 2: `" + st["dir"].get<std::string>() + "`"), std::string::npos) << md;
  EXPECT_TRUE(committed(t, 4));
}

// One rank: start from the newest committed checkpoint of a previous pilot.
// Then a corrupted file in that checkpoint (step 4): a pilot whose own save
// would land on it is refused and leaves it alone; with another K it falls
// back to step 2 as worker B's restore does, and says what it passed over.
TEST(PilotStartFromLatest, OneRankContinuesFromTheNewestAndPassesOverABrokenOne) {
  TempDir t("start1");
  auto r1 = pilot(t, "run1", {});
  ASSERT_EQ(r1.status, 0) << r1.output;
  const auto rep1 = read_json(t.str("run1/report.json"));

  auto r2 = pilot(t, "run2", {"--start-from", "latest"});
  ASSERT_EQ(r2.status, 0) << r2.output;
  const auto rep2 = read_json(t.str("run2/report.json"));
  EXPECT_EQ(rep2["status"], "passed");
  EXPECT_EQ(rep2["start"]["step"], 2);
  EXPECT_EQ(rep2["start"]["run_id"], rep1["run_id"]);
  EXPECT_EQ(rep2["start"]["restored_state"], groups(rep1["resume"]["state_digests"]["saved"]));
  // The first trained step is the one after the checkpoint: step 3, two steps were done.
  const auto ref2 = read_json(t.str("run2/work/reference.json"));
  EXPECT_EQ(ref2["train_steps"][0]["step"], 3);
  EXPECT_EQ(ref2["saved_step"], 4);
  // Bitwise the first pilot's reference steps 3 and 4; not its steps 1 and 2 (negative control).
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ref2["train_steps"][i]["loss"], rep1["steps"]["reference"][i]["loss"]);
    EXPECT_EQ(ref2["train_steps"][i]["grad_norm"], rep1["steps"]["reference"][i]["grad_norm"]);
    EXPECT_NE(ref2["train_steps"][i]["loss"], rep1["steps"]["train"][i]["loss"]);
  }
  std::string load_fig;
  for (const auto& s : rep2["stages"])
    if (s["stage"] == "load") load_fig = s["figures"].dump();
  EXPECT_NE(load_fig.find("\"start_step\":2"), std::string::npos) << load_fig;
  // `anchor reproduce` would start again from whatever is newest now: refused, saying so.
  auto rr = run_anchor({"reproduce", t.str("run2/report.json"), "--allow-unsigned", "--run-dir", t.str("rerun")});
  EXPECT_EQ(rr.status, 2) << rr.output;
  EXPECT_NE(rr.output.find("reproducing it is not supported"), std::string::npos) << rr.output;
  ASSERT_TRUE(committed(t, 4));

  // Flip one byte of step 4's model.safetensors.
  const std::string model4 = t.str("ckpt/step-00000004/model.safetensors");
  {
    std::fstream f(model4, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(-5, std::ios::end);
    f.write(&c, 1);
  }
  const auto corrupted = anchor::fs::read_file(model4);
  auto r3 = pilot(t, "run3", {"--start-from", "latest"});
  EXPECT_EQ(r3.status, 2) << r3.output;
  EXPECT_NE(r3.output.find("pilot failed in stage load"), std::string::npos) << r3.output;
  EXPECT_NE(r3.output.find("would save step 4 into"), std::string::npos) << r3.output;
  EXPECT_NE(r3.output.find("model.safetensors"), std::string::npos) << r3.output;
  EXPECT_EQ(anchor::fs::read_file(model4), corrupted);  // left for inspection
  EXPECT_EQ(step_dirs(t), (std::vector<std::string>{"step-00000002", "step-00000004"}));

  auto r4 = pilot(t, "run4", {"--start-from", "latest", "--set", "pilot.steps_before_save=3"});
  ASSERT_EQ(r4.status, 0) << r4.output;
  const auto rep4 = read_json(t.str("run4/report.json"));
  EXPECT_EQ(rep4["start"]["step"], 2);
  ASSERT_EQ(rep4["start"]["skipped"].size(), 1u) << rep4["start"].dump(2);
  EXPECT_EQ(std::filesystem::path(rep4["start"]["skipped"][0]["dir"].get<std::string>()).filename(), "step-00000004");
  EXPECT_NE(rep4["start"]["skipped"][0]["reason"].get<std::string>().find("model.safetensors"), std::string::npos);
  EXPECT_EQ(rep4["resume"]["restored_step"], 5);
  // A different pilot.steps_before_save is how this pilot runs, not what it trains: not a config difference.
  EXPECT_TRUE(rep4["start"]["config_differences"].empty()) << rep4["start"].dump(2);
}

// What is refused, and how. None of them commits anything.
TEST(PilotStartFromLatest, RefusesWhatItCannotStartFrom) {
  TempDir t("startneg");
  // Nothing to start from: exit 2 before any worker, stage "start".
  std::filesystem::create_directories(t.path() / "ckpt");
  auto r0 = pilot(t, "run0", {"--start-from", "latest"});
  EXPECT_EQ(r0.status, 2) << r0.output;
  EXPECT_NE(r0.output.find("pilot failed in stage start"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("holds no checkpoint"), std::string::npos) << r0.output;
  EXPECT_EQ(read_json(t.str("run0/report.json"))["status"], "failed");
  EXPECT_TRUE(step_dirs(t).empty());

  auto r1 = pilot(t, "run1", {});
  ASSERT_EQ(r1.status, 0) << r1.output;
  const std::vector<std::string> only2 = {"step-00000002"};
  ASSERT_EQ(step_dirs(t), only2);

  // From initialisation into a directory that holds a checkpoint: it would save step 2 over it.
  auto r2 = pilot(t, "run2", {});
  EXPECT_EQ(r2.status, 2) << r2.output;
  EXPECT_NE(r2.output.find("pilot failed in stage start"), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("already holds 1 checkpoint(s), newest step-00000002"), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("--start-from latest"), std::string::npos) << r2.output;

  // Another model: one block fewer restores without a missing tensor, so the extra ones are named.
  auto r3 = pilot(t, "run3", {"--start-from", "latest", "--set", "model.n_layer=1"});
  EXPECT_EQ(r3.status, 2) << r3.output;
  EXPECT_NE(r3.output.find("pilot failed in stage load"), std::string::npos) << r3.output;
  EXPECT_NE(r3.output.find("does not fit this run: the model: 12 tensor(s) differ: h.1."), std::string::npos)
      << r3.output;
  EXPECT_NE(r3.output.find("is in the checkpoint, not in the model"), std::string::npos) << r3.output;
  // Every reason at once: the tensors and the config key behind them.
  EXPECT_NE(r3.output.find("the config it was written with: model.n_layer is 2 in the checkpoint, 1 here"),
            std::string::npos)
      << r3.output;
  EXPECT_EQ(read_json(t.str("run3/report.json"))["start"]["step"], 2);

  // Another seed (another data order and dropout stream): the key and both values named.
  auto r4 = pilot(t, "run4", {"--start-from", "latest", "--set", "run.seed=7"});
  EXPECT_EQ(r4.status, 2) << r4.output;
  EXPECT_NE(r4.output.find("does not fit this run: the config it was written with: run.seed is 1234 in the "
                           "checkpoint, 7 here"),
            std::string::npos)
      << r4.output;
  EXPECT_EQ(step_dirs(t), only2);

  // A corrupted file and nothing older: exit 3 naming the checkpoint and the file.
  {
    std::fstream f(t.str("ckpt/step-00000002/optimizer.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  auto r5 = pilot(t, "run5", {"--start-from", "latest"});
  EXPECT_EQ(r5.status, 3) << r5.output;
  EXPECT_NE(r5.output.find("pilot failed in stage load"), std::string::npos) << r5.output;
  EXPECT_NE(r5.output.find("is committed and verifies; step-00000002: "), std::string::npos) << r5.output;
  EXPECT_NE(r5.output.find("optimizer.safetensors"), std::string::npos) << r5.output;
  EXPECT_EQ(step_dirs(t), only2);
}

// A different world size: 2 ZeRO-2 ranks start from a 1-rank checkpoint through
// Trainer::restore's reshard path; rank 1 has no saved RNG stream and the
// report says how it was re-derived. The pilot still proves its own resume,
// also when retention (keep_last 1) deletes the start checkpoint on the way.
TEST(PilotStartFromLatest, TwoRanksStartFromAOneRankCheckpoint) {
  TempDir t("startws");
  auto r1 = pilot(t, "run1", {});
  ASSERT_EQ(r1.status, 0) << r1.output;
  const auto manifest2 = anchor::sha256_file(t.str("ckpt/step-00000002/manifest.json")).sha256;
  // keep_last 1: A's commit of step 4 retires the start checkpoint; B restores step 4 and never needs it.
  auto r2 = pilot(t, "run2",
                  {"--start-from", "latest", "--nproc-per-node", "2", "--set", "distributed.strategy=zero2", "--set",
                   "distributed.timeout_s=20", "--set", "checkpoint.keep_last=1"});
  ASSERT_EQ(r2.status, 0) << r2.output;
  const auto rep = read_json(t.str("run2/report.json"));
  const auto& st = rep["start"];
  EXPECT_EQ(st["step"], 2);
  EXPECT_EQ(st["manifest_sha256"], manifest2);  // kept by the report
  EXPECT_EQ(step_dirs(t), std::vector<std::string>{"step-00000004"});
  EXPECT_EQ(rep["resume"]["restored_step"], 4);
  EXPECT_EQ(st["world_size"], 1);
  ASSERT_EQ(st["rng_restore_per_rank"].size(), 2u) << st.dump(2);
  EXPECT_EQ(st["rng_restore_per_rank"][0]["carried"], json::array({0}));
  ASSERT_EQ(st["rng_restore_per_rank"][1]["rederived"].size(), 1u);
  EXPECT_EQ(st["rng_restore_per_rank"][1]["rederived"][0]["rank"], 1);
  // distributed.strategy and nproc_per_node differ from the checkpoint's config: allowed, and listed.
  std::set<std::string> keys;
  for (const auto& d : st["config_differences"]) {
    keys.insert(d["key"].get<std::string>());
    EXPECT_FALSE(d["refused"].get<bool>()) << d.dump();
  }
  EXPECT_TRUE(keys.count("distributed.strategy")) << st.dump(2);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(rep["resume"]["per_rank"][rank]["verdict"], "match");
  EXPECT_NE(anchor::fs::read_file(t.str("run2/report.md")).find("RNG re-derived"), std::string::npos);

  // Issue 43.3: run2's retention retired run1's step 2. run1 still verifies, with the retirement a
  // warning of its own (its manifest's sha256 stays signed), fails under --strict, and bundles.
  auto v = run_anchor({"verify", t.str("run1"), "--json"});
  ASSERT_EQ(v.status, 0) << v.output;
  const auto out = json::parse(v.output.substr(v.output.find('{')));
  EXPECT_EQ(out["retired"], json::array({"../ckpt/step-00000002"})) << out.dump(2);  // as report.json lists it
  bool said = false;
  for (const auto& w : out["warnings"])
    said = said ||
           w.get<std::string>().find("step-00000002 is retired: the whole step directory is gone") != std::string::npos;
  EXPECT_TRUE(said) << out.dump(2);
  auto strict = run_anchor({"verify", t.str("run1"), "--strict"});
  EXPECT_EQ(strict.status, 3) << strict.output;
  EXPECT_NE(strict.output.find("verification FAILED under --strict"), std::string::npos) << strict.output;
  auto b = run_anchor({"bundle", t.str("run1"), "-o", t.str("bundle1")});
  EXPECT_EQ(b.status, 0) << b.output;
  // The negative control: a step directory there without its signed manifest was not retired, it was changed.
  const auto step4 = t.str("ckpt/step-00000004");
  std::filesystem::remove(step4 + "/manifest.json");
  auto changed = run_anchor({"verify", t.str("run2")});
  EXPECT_EQ(changed.status, 3) << changed.output;
  EXPECT_NE(changed.output.find("step-00000004/manifest.json is missing"), std::string::npos) << changed.output;
}

// Issue 14: newer step directories that do not verify, whatever they hold,
// are passed over and the pilot starts from the newest good step; none of
// them is reported as a checkpoint. Step 4: a model.safetensors header byte
// that is not UTF-8 (a bit flip) and a FIFO in place of optimizer.safetensors;
// step 11: a copy of step 4 (its manifest says step 4); step 12: a COMMITTED
// file alone. Before: exit 1 (the skip reason's raw byte broke start.json),
// a hang (the FIFO), or exit 1 with no report (step 12's missing manifest).
// The pilot runs under timeout(1), so a hang fails the test.
TEST(PilotStartFromLatest, PassesOverStepsThatDoNotVerifyWhateverTheyHold) {
  TempDir t("startbad");
  auto r1 = pilot(t, "run1", {});
  ASSERT_EQ(r1.status, 0) << r1.output;
  auto r2 = pilot(t, "run2", {"--start-from", "latest"});
  ASSERT_EQ(r2.status, 0) << r2.output;
  ASSERT_TRUE(committed(t, 4));

  const auto ckpt = t.path() / "ckpt";
  std::filesystem::copy(ckpt / "step-00000004", ckpt / "step-00000011", std::filesystem::copy_options::recursive);
  std::filesystem::create_directories(ckpt / "step-00000012");
  std::ofstream(ckpt / "step-00000012" / "COMMITTED") << std::string(64, 'a') << "\n";
  {
    const auto model4 = (ckpt / "step-00000004" / "model.safetensors").string();
    std::string bytes = anchor::fs::read_file(model4);
    const auto at = bytes.find("\"dtype\"");
    ASSERT_NE(at, std::string::npos);
    bytes[at + 1] = static_cast<char>(bytes[at + 1] ^ 0x80);  // 'd' -> 0xe4: not UTF-8 there
    std::ofstream(model4, std::ios::binary | std::ios::trunc) << bytes;
    const auto opt4 = (ckpt / "step-00000004" / "optimizer.safetensors").string();
    std::filesystem::remove(opt4);
    ASSERT_EQ(::mkfifo(opt4.c_str(), 0644), 0);
  }

  std::vector<std::string> args = {"/usr/bin/timeout",
                                   "-s",
                                   "KILL",
                                   "600",
                                   ANCHOR_BINARY,
                                   "pilot",
                                   kPilot,
                                   "--run-dir",
                                   t.str("run3"),
                                   "--set",
                                   "checkpoint.dir=" + t.str("ckpt"),
                                   "--start-from",
                                   "latest",
                                   "--set",
                                   "pilot.steps_before_save=3"};
  anchor::proc::SpawnOptions o;
  o.merge_stderr = true;
  auto r3 = anchor::proc::run_capture(args, o);
  ASSERT_EQ(r3.status, 0) << r3.out;
  const auto rep = read_json(t.str("run3/report.json"));
  EXPECT_EQ(rep["status"], "passed");
  const auto& st = rep["start"];
  EXPECT_EQ(st["step"], 2);
  ASSERT_EQ(st["skipped"].size(), 3u) << st.dump(2);
  const auto reason = [&](int i) { return st["skipped"][i]["reason"].get<std::string>(); };
  EXPECT_EQ(std::filesystem::path(st["skipped"][0]["dir"].get<std::string>()).filename(), "step-00000012");
  EXPECT_NE(reason(0).find("manifest.json is missing"), std::string::npos) << reason(0);
  EXPECT_NE(reason(1).find("manifest.json step is 4 but the directory is step 11"), std::string::npos) << reason(1);
  EXPECT_NE(reason(2).find("header is not valid JSON"), std::string::npos) << reason(2);
  EXPECT_NE(reason(2).find("\\xe4"), std::string::npos) << reason(2);  // the byte, shown
  EXPECT_NE(reason(2).find("optimizer.safetensors: cannot be read"), std::string::npos) << reason(2);
  EXPECT_NE(reason(2).find("is a FIFO (named pipe), not a regular file"), std::string::npos) << reason(2);
  EXPECT_EQ(rep["resume"]["restored_step"], 5);
  EXPECT_EQ(rep["resume"]["verdict"], "match");
  // Only verified steps are checkpoints in the report; the others are listed with why.
  std::vector<int> steps, unverified;
  for (const auto& c : rep["checkpoints"]) steps.push_back(c["step"].get<int>());
  for (const auto& c : rep["unverified_checkpoints"]) unverified.push_back(c["step"].get<int>());
  std::sort(unverified.begin(), unverified.end());
  EXPECT_EQ(steps, (std::vector<int>{2, 5})) << rep["checkpoints"].dump(2);
  EXPECT_EQ(unverified, (std::vector<int>{4, 11, 12})) << rep["unverified_checkpoints"].dump(2);
  // Nothing good was lost: steps 2 and 5 verify, the broken ones are left for inspection.
  EXPECT_TRUE(committed(t, 2));
  EXPECT_TRUE(committed(t, 5));
  EXPECT_TRUE(std::filesystem::exists(ckpt / "step-00000012" / "COMMITTED"));
}

// Issue 14: the working directory (and so the config's directory, the run
// directories and the checkpoint directory) holds a byte that is not UTF-8.
// Every path anchor writes into JSON is shown with \xNN (config.json and the
// manifest keep the exact bytes of the paths read back, as hex). Before: exit 1,
// "internal: [json.exception.type_error.316] invalid UTF-8 byte", before any
// stage. A newer step with only a COMMITTED file is passed over.
TEST(PilotStartFromLatest, WorkingDirectoryThatIsNotUtf8) {
  TempDir t("startcwd");
  const std::filesystem::path w = t.path() / "w\xff";
  std::filesystem::create_directories(w / "configs");
  std::filesystem::create_directories(w / "data");
  std::filesystem::copy_file(source_path("configs/pilot.yaml"), w / "configs" / "pilot.yaml");
  std::filesystem::copy_file(source_path("configs/catalog.yaml"), w / "configs" / "catalog.yaml");
  std::filesystem::copy(source_path("data/tiny"), w / "data" / "tiny", std::filesystem::copy_options::recursive);
  auto in_w = [&](const std::string& args) {
    anchor::proc::SpawnOptions o;
    o.merge_stderr = true;
    return anchor::proc::run_capture(
        {"/bin/sh", "-c",
         "cd \"$W\" && exec /usr/bin/timeout -s KILL 600 \"$ANCHOR\" pilot configs/pilot.yaml " + args},
        [&] {
          o.env["W"] = w.string();
          o.env["ANCHOR"] = ANCHOR_BINARY;
          return o;
        }());
  };
  auto r1 = in_w("--run-dir runs/r1 --set checkpoint.dir=../ckpt");
  ASSERT_EQ(r1.status, 0) << r1.out;
  EXPECT_EQ(read_json(w / "runs" / "r1" / "report.json")["status"], "passed");
  // The pinned manifest keeps the config directory's exact bytes.
  const auto m1 = read_json(w / "runs" / "r1" / "manifest.json");
  EXPECT_NE(m1["config"]["base_dir"].get<std::string>().find("w\\xff/configs"), std::string::npos) << m1["config"];
  EXPECT_TRUE(m1["config"].contains("base_dir_hex")) << m1["config"];

  std::filesystem::create_directories(w / "ckpt" / "step-00000009");
  std::ofstream(w / "ckpt" / "step-00000009" / "COMMITTED") << std::string(64, 'a') << "\n";
  auto r2 = in_w("--run-dir runs/r2 --set checkpoint.dir=../ckpt --start-from latest");
  ASSERT_EQ(r2.status, 0) << r2.out;
  const auto rep = read_json(w / "runs" / "r2" / "report.json");
  EXPECT_EQ(rep["status"], "passed");
  EXPECT_EQ(rep["start"]["step"], 2);
  EXPECT_NE(rep["start"]["dir"].get<std::string>().find("w\\xff/ckpt/step-00000002"), std::string::npos)
      << rep["start"].dump(2);
  ASSERT_EQ(rep["start"]["skipped"].size(), 1u) << rep["start"].dump(2);
  EXPECT_NE(rep["start"]["skipped"][0]["dir"].get<std::string>().find("w\\xff/ckpt/step-00000009"), std::string::npos);
  EXPECT_EQ(rep["resume"]["verdict"], "match");
  std::vector<int> steps;
  for (const auto& c : rep["checkpoints"]) steps.push_back(c["step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{2, 4}));
}

}  // namespace
