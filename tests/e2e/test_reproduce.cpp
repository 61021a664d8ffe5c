// End-to-end: a signed pilot, then `anchor reproduce` from its report —
// bitwise when nothing drifted, and a named drift when a data shard changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;

using anchor::testing::read_json;

class Reproduce : public ::testing::Test {
 protected:
  void SetUp() override {
    // The data lives in the temp dir so the drift case can change it.
    std::filesystem::copy_file(source_path("data/tiny/train.txt"), t_.str("train.txt"));
    std::filesystem::copy_file(source_path("data/tiny/val.txt"), t_.str("val.txt"));
    ASSERT_EQ(run_anchor({"keygen", "-o", t_.str("keys")}).status, 0);
    // The original copies its export off the node (export.copy_to); a reproduction never writes there.
    std::filesystem::create_directories(t_.path() / "share");
    auto r = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t_.str("orig"), "--set",
                         "data.train=[" + t_.str("train.txt") + "]", "--set", "data.val=[" + t_.str("val.txt") + "]",
                         "--set", "report.signing_key=" + t_.str("keys/anchor.key"), "--set",
                         "export.copy_to=" + t_.str("share")});
    ASSERT_EQ(r.status, 0) << r.output;
  }
  TempDir t_{"repro"};
};

TEST_F(Reproduce, ReproducesBitwiseAndLinksTheOriginal) {
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again"), "--signing-key", t_.str("keys/anchor.key")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no drift"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  reproduced: the re-run matches " + t_.str("orig/report.intoto.json") + " (bitwise)\n"),
            std::string::npos)
      << r.output;
  auto rep = read_json(t_.str("again/report.json"));
  EXPECT_EQ(rep["reproduction"]["verdict"], "reproduced");
  EXPECT_EQ(rep["reproduction"]["mode"], "bitwise");
  EXPECT_GT(rep["reproduction"]["checks"].size(), 10u);
  EXPECT_EQ(rep["reproduces"]["run_id"], read_json(t_.str("orig/report.json"))["run_id"]);
  EXPECT_TRUE(rep["reproduces"]["verified"].get<bool>());
  EXPECT_TRUE(rep["reproduces"]["drift"].empty());
  // The recorded export.copy_to is not used: the original's copy is the only one.
  EXPECT_NE(r.output.find("export.copy_to of the recorded config is not used by a reproduction"), std::string::npos)
      << r.output;
  EXPECT_EQ(
      std::distance(std::filesystem::directory_iterator(t_.path() / "share"), std::filesystem::directory_iterator()),
      1);
  // The re-run is signed with the key the command line named and verifies on its own.
  EXPECT_EQ(run_anchor({"verify", t_.str("again/report.intoto.json"), "--key", t_.str("keys/anchor.pub")}).status, 0);
  // -q: the notes go, the verdict stays.
  auto q = run_anchor({"-q", "reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"),
                       "--run-dir", t_.str("again-quiet"), "--signing-key", "none"});
  ASSERT_EQ(q.status, 0) << q.output;
  EXPECT_EQ(q.output.find("reproduce: no drift"), std::string::npos) << q.output;
  EXPECT_EQ(q.output.find("reproduce: comparing"), std::string::npos) << q.output;
  EXPECT_NE(q.output.find("reproduce: the re-run is unsigned"), std::string::npos) << "a warning stays: " << q.output;
  EXPECT_NE(q.output.find("  reproduced: the re-run matches "), std::string::npos) << q.output;
}

TEST_F(Reproduce, AChangedDataShardIsNamedAndRefusedWithoutAllowDrift) {
  {
    std::ofstream f(t_.str("train.txt"), std::ios::app);
    f << "one more sentence changes the shard.";
  }
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("train.txt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--allow-drift"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t_.str("again/report.json")));

  auto d = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("drifted"), "--allow-drift"});
  auto rep = read_json(t_.str("drifted/report.json"));
  EXPECT_TRUE(rep["reproduces"]["allow_drift"].get<bool>());
  ASSERT_FALSE(rep["reproduces"]["drift"].empty());
  EXPECT_EQ(rep["reproduction"]["mode"], "tolerance");
  // Changed data means other batches: the re-run differs, and says so (exit 3).
  EXPECT_EQ(d.status, 3) << d.output;
  EXPECT_EQ(rep["reproduction"]["verdict"], "differs");
  // One voice: the stage that compared is failed, and the last line says not reproduced and what differs.
  nlohmann::json stage;
  for (const auto& s : rep["stages"])
    if (s["stage"] == "reproduce_compare") stage = s;
  EXPECT_EQ(stage.value("status", ""), "failed") << stage.dump(2);
  std::string last = d.output.substr(0, d.output.find_last_not_of('\n') + 1);
  last = last.substr(last.rfind('\n') + 1);
  EXPECT_EQ(last.rfind("  not reproduced: ", 0), 0u) << d.output;
  EXPECT_NE(last.find(" differ"), std::string::npos) << last;
  EXPECT_EQ(d.output.find("  reproduced: "), std::string::npos) << d.output;
}

// A run whose tree moved: its relative inputs follow --root, its absolute
// ones --map, and what is found there is trusted only by digest. Controls: the
// moved tree without either fails naming --root, and a shard changed at the
// new place is drift (exit 3).
TEST(ReproduceElsewhere, RootAndMapFindTheInputsAndOnlyDigestsDecide) {
  TempDir t("repro-moved");
  const std::string old_tree = t.str("tree"), new_tree = t.str("moved");
  std::filesystem::create_directories(old_tree + "/configs");
  std::filesystem::create_directories(old_tree + "/data");
  std::filesystem::copy_file(source_path("configs/pilot.yaml"), old_tree + "/configs/pilot.yaml");
  std::filesystem::copy_file(source_path("data/tiny/train.txt"),
                             old_tree + "/data/train.txt");                                  // relative in the config
  std::filesystem::copy_file(source_path("data/tiny/val.txt"), old_tree + "/data/val.txt");  // absolute
  ASSERT_EQ(run_anchor({"keygen", "-o", t.str("keys")}).status, 0);
  auto p = run_anchor({"pilot", old_tree + "/configs/pilot.yaml", "--run-dir", t.str("orig"), "--set",
                       "data.train=[../data/train.txt]", "--set", "data.val=[" + old_tree + "/data/val.txt]", "--set",
                       "report.signing_key=" + t.str("keys/anchor.key")});
  ASSERT_EQ(p.status, 0) << p.output;
  std::filesystem::rename(old_tree, new_tree);
  auto reproduce = [&](const std::string& run, std::vector<std::string> extra) {
    std::vector<std::string> a = {"reproduce",     t.str("orig/report.intoto.json"),
                                  "--key",         t.str("keys/anchor.pub"),
                                  "--run-dir",     t.str(run),
                                  "--signing-key", "none"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_anchor(a);
  };
  auto lost = reproduce("lost", {});
  EXPECT_EQ(lost.status, 1) << lost.output;
  EXPECT_NE(lost.output.find("pass --root DIR"), std::string::npos) << lost.output;
  EXPECT_NE(lost.output.find(old_tree + "/configs (as recorded)"), std::string::npos) << lost.output;

  auto root_only = reproduce("root-only", {"--root", new_tree + "/configs"});
  EXPECT_EQ(root_only.status, 1) << "the absolute input needs --map: " << root_only.output;
  EXPECT_NE(root_only.output.find(old_tree + "/data/val.txt"), std::string::npos) << root_only.output;

  auto found = reproduce("found", {"--root", new_tree + "/configs", "--map", old_tree + "=" + new_tree});
  ASSERT_EQ(found.status, 0) << found.output;
  EXPECT_NE(found.output.find("no drift"), std::string::npos) << found.output;
  EXPECT_NE(found.output.find("  reproduced: the re-run matches "), std::string::npos) << found.output;
  const json at = read_json(t.str("found/report.json"))["reproduces"]["inputs_at"];
  EXPECT_EQ(at["root"], new_tree + "/configs") << at.dump();
  EXPECT_EQ(at["map"][0]["from"], old_tree) << at.dump();
  EXPECT_EQ(at["map"][0]["to"], new_tree) << at.dump();

  // --map alone moves the config directory too (it is under OLD).
  auto mapped = reproduce("mapped", {"--map", old_tree + "=" + new_tree});
  EXPECT_EQ(mapped.status, 0) << mapped.output;

  // NEW under OLD: each path is mapped once (twice would read OLD/archive/archive).
  std::filesystem::create_directories(old_tree);
  std::filesystem::rename(new_tree, old_tree + "/archive");
  auto nested = reproduce("nested", {"--map", old_tree + "=" + old_tree + "/archive"});
  EXPECT_EQ(nested.status, 0) << nested.output;
  std::filesystem::rename(old_tree + "/archive", new_tree);
  std::filesystem::remove(old_tree);

  {
    std::ofstream f(new_tree + "/data/val.txt", std::ios::app);
    f << "a changed shard at the new place.";
  }
  auto changed = reproduce("changed", {"--map", old_tree + "=" + new_tree});
  EXPECT_EQ(changed.status, 3) << changed.output;
  EXPECT_NE(changed.output.find("val.txt"), std::string::npos) << changed.output;
  EXPECT_NE(changed.output.find("pins drifted"), std::string::npos) << changed.output;

  auto bad = reproduce("bad", {"--map", "relative=/x"});
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("OLD must be an absolute path"), std::string::npos) << bad.output;
}

TEST_F(Reproduce, AnUnsignedReportIsRefusedUnlessAllowed) {
  auto r = run_anchor({"reproduce", t_.str("orig/report.json"), "--run-dir", t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("unsigned"), std::string::npos) << r.output;
  auto ok = run_anchor({"reproduce", t_.str("orig/report.json"), "--allow-unsigned", "--run-dir", t_.str("again")});
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_FALSE(read_json(t_.str("again/report.json"))["reproduces"]["verified"].get<bool>());
}

// A file that is not JSON is not a report at all: a usage error (exit 2), as `anchor plan` says of it,
// not the code for a report that does not verify (3).
TEST_F(Reproduce, AFileThatIsNotJsonIsAUsageError) {
  anchor::fs::atomic_write_file(t_.str("notjson.json"), "not json at all");
  auto r = run_anchor({"reproduce", t_.str("notjson.json"), "--run-dir", t_.str("again")});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is not JSON: not a report"), std::string::npos) << r.output;
  EXPECT_EQ(run_anchor({"plan", t_.str("notjson.json")}).status, 2);
}

TEST_F(Reproduce, ATamperedReportIsNotReproduced) {
  auto env = read_json(t_.str("orig/report.intoto.json"));
  env["payloadType"] = "application/json";
  anchor::fs::atomic_write_file(t_.str("orig/report.intoto.json"), env.dump());
  auto r = run_anchor({"reproduce", t_.str("orig/report.intoto.json"), "--key", t_.str("keys/anchor.pub"), "--run-dir",
                       t_.str("again")});
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("does not verify"), std::string::npos) << r.output;
}

// Issue 14: the refusal of a started-from-checkpoint report asked only the
// report's `start`; a config that says pilot.start_from: latest is refused too
// (the re-run would restore whatever its checkpoint directory holds).
TEST_F(Reproduce, AConfigThatStartsFromLatestIsRefusedEvenWhenStartSaysInit) {
  auto rep = read_json(t_.str("orig/report.json"));
  ASSERT_EQ(rep["start"]["from"], "init");
  rep["manifest"]["config"]["effective"]["pilot"]["start_from"] = "latest";
  anchor::fs::atomic_write_file(t_.str("edited.json"), rep.dump());
  // --allow-drift: the edit changes the config digest the re-pin compares.
  auto r = run_anchor(
      {"reproduce", t_.str("edited.json"), "--allow-unsigned", "--allow-drift", "--run-dir", t_.str("again")});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("reproducing it is not supported"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t_.str("again")));
}

// Issue 14: a report's config named the checkpoint.dir and run.output_dir
// that `reproduce` cleaned and wrote into, and without --key the report.pub
// shipped beside the report was trusted silently. Here the report is a real
// signed run whose checkpoint.dir lies outside it; another pilot's torn save
// and an unrelated file sit there when it is reproduced.
TEST(ReproduceOutputs, WritesOnlyUnderItsOwnRunDirectoryAndSaysWhichKeyItTrusted) {
  TempDir t{"repro-outputs"};
  std::filesystem::copy_file(source_path("data/tiny/train.txt"), t.str("train.txt"));
  std::filesystem::copy_file(source_path("data/tiny/val.txt"), t.str("val.txt"));
  ASSERT_EQ(run_anchor({"keygen", "-o", t.str("keys")}).status, 0);
  auto pilot = run_anchor({"pilot", source_path("configs/pilot.yaml"), "--run-dir", t.str("orig"), "--set",
                           "data.train=[" + t.str("train.txt") + "]", "--set", "data.val=[" + t.str("val.txt") + "]",
                           "--set", "report.signing_key=" + t.str("keys/anchor.key"), "--set",
                           "checkpoint.dir=" + t.str("elsewhere"), "--set", "run.output_dir=" + t.str("outputs")});
  ASSERT_EQ(pilot.status, 0) << pilot.output;

  // What the reproduction must leave alone in the checkpoint.dir the report names.
  const std::filesystem::path elsewhere = t.str("elsewhere");
  std::filesystem::create_directories(elsewhere / "step-00000001.tmp-x");
  anchor::fs::atomic_write_file((elsewhere / "step-00000001.tmp-x/model.safetensors").string(), "half written");
  anchor::fs::atomic_write_file((elsewhere / "marker.txt").string(), "not yours");
  auto listing = [](const std::filesystem::path& dir) {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      names.insert(std::filesystem::relative(e.path(), dir).string());
    return names;
  };
  const auto before = listing(elsewhere);
  ASSERT_TRUE(before.count("step-00000001.tmp-x/model.safetensors"));

  // 1. Without --key: the report.pub beside the report, with the warning `anchor verify` prints.
  auto r = run_anchor({"reproduce", t.str("orig/report.intoto.json"), "--run-dir", t.str("again"), "--signing-key",
                       t.str("keys/anchor.key")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(listing(elsewhere), before);
  EXPECT_EQ(anchor::fs::read_file((elsewhere / "marker.txt").string()), "not yours");
  EXPECT_EQ(anchor::fs::read_file((elsewhere / "step-00000001.tmp-x/model.safetensors").string()), "half written");
  auto rep = read_json(t.str("again/report.json"));
  ASSERT_FALSE(rep["checkpoints"].empty()) << rep.dump(2);
  for (const auto& c : rep["checkpoints"]) {
    EXPECT_EQ(c["dir"].get<std::string>().rfind("checkpoints/step-", 0), 0u) << c.dump();
    EXPECT_TRUE(std::filesystem::exists(t.str("again") + "/" + c["dir"].get<std::string>() + "/COMMITTED"));
  }
  EXPECT_EQ(rep["reproduces"]["checkpoint_dir"], t.str("again/checkpoints"));
  EXPECT_EQ(rep["config"]["checkpoint"]["dir"], t.str("elsewhere"));  // the recorded config is not rewritten
  EXPECT_EQ(rep["reproduction"]["verdict"], "reproduced");
  const std::string signer = read_json(t.str("orig/report.json"))["signer_key_id"];
  EXPECT_TRUE(rep["reproduces"]["verified"].get<bool>());
  EXPECT_EQ(rep["reproduces"]["key"]["source"], "report.pub beside the report (not independently trusted)");
  EXPECT_EQ(rep["reproduces"]["key"]["path"], t.str("orig/report.pub"));
  EXPECT_EQ(rep["reproduces"]["key"]["key_id"], signer);
  EXPECT_NE(r.output.find("no --key given"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not WHO signed it"), std::string::npos) << r.output;
  // The reproduction verifies on its own, its checkpoints signed as subjects.
  auto v = run_anchor({"verify", t.str("again/report.intoto.json"), "--key", t.str("keys/anchor.pub")});
  EXPECT_EQ(v.status, 0) << v.output;

  // 2. With --key, and without --run-dir: the run goes under ./runs of the
  //    current directory, not the run.output_dir the report names.
  std::filesystem::create_directories(t.str("cwd"));
  const std::string cmd = "cd '" + t.str("cwd") + "' && exec '" + std::string(ANCHOR_BINARY) + "' reproduce '" +
                          t.str("orig/report.intoto.json") + "' --key '" + t.str("keys/anchor.pub") + "' 2>&1";
  auto k = anchor::proc::run_capture({"/bin/sh", "-c", cmd});
  ASSERT_EQ(k.status, 0) << k.out;
  EXPECT_EQ(k.out.find("no --key given"), std::string::npos) << k.out;
  EXPECT_FALSE(std::filesystem::exists(t.str("outputs")));
  EXPECT_EQ(listing(elsewhere), before);
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(t.str("cwd/runs"))) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  auto krep = read_json(runs[0] / "report.json");
  EXPECT_EQ(krep["reproduces"]["key"]["source"], "--key");
  EXPECT_EQ(krep["reproduces"]["key"]["path"], t.str("keys/anchor.pub"));
  EXPECT_EQ(krep["reproduces"]["key"]["key_id"], signer);
  EXPECT_TRUE(std::filesystem::exists(runs[0] / "checkpoints"));
  // 3. Without --signing-key the report's report.signing_key is not read (a
  //    report must not pick the file anchor signs with): the re-run is
  //    signed with the per-user key instead, and says so.
  EXPECT_NE(k.out.find("the re-run is signed with your per-user key (the report's report.signing_key " +
                       t.str("keys/anchor.key") + " is not used)"),
            std::string::npos)
      << k.out;
  EXPECT_TRUE(std::filesystem::exists(runs[0] / "report.intoto.json"));
  EXPECT_TRUE(krep.value("signed", false)) << krep.dump(2);
  EXPECT_NE(krep.value("signer_key_id", ""), signer) << "the report's key signed the re-run";
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const std::string user_pub =
      (xdg && xdg[0] == '/' ? std::string(xdg) : std::string(std::getenv("HOME")) + "/.config") + "/anchor/anchor.pub";
  auto uv = run_anchor({"verify", (runs[0] / "report.intoto.json").string(), "--key", user_pub});
  EXPECT_EQ(uv.status, 0) << uv.output;
  EXPECT_TRUE(std::filesystem::exists(t.str("again/report.intoto.json")));
}

}  // namespace

namespace {

// `anchor diff CONFIG REPORT`: the config about to run against a real past run.
TEST_F(Reproduce, DiffNamesWhatAConfigChangesAgainstThePastRun) {
  const std::vector<std::string> same = {
      "--set", "data.train=[" + t_.str("train.txt") + "]",        "--set", "data.val=[" + t_.str("val.txt") + "]",
      "--set", "report.signing_key=" + t_.str("keys/anchor.key"), "--set", "export.copy_to=" + t_.str("share")};
  auto args = [&](std::vector<std::string> extra, const std::string& report) {
    std::vector<std::string> a = {"diff", source_path("configs/pilot.yaml"), report};
    a.insert(a.end(), same.begin(), same.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // The run's own config: nothing differs (the negative control), from the report or its envelope.
  for (const std::string& report : {t_.str("orig/report.json"), t_.str("orig/report.intoto.json"), t_.str("orig")}) {
    auto r = run_anchor(args({}, report));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("no differences"), std::string::npos) << r.output;
  }
  // A training key decides the result (exit 3); a planning key is listed and does not.
  auto r = run_anchor(args({"--set", "train.optimizer.lr=0.01", "--set", "budget.nodes=4"}, t_.str("orig")));
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("train.optimizer.lr  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("budget.nodes  1  4  (does not change the result)"), std::string::npos) << r.output;
  // pilot.* changes the pilot's steps and evals: it decides the result.
  r = run_anchor(args({"--set", "pilot.eval_batches=4"}, t_.str("orig")));
  EXPECT_EQ(r.status, 3) << r.output;
  r = run_anchor(args({"--set", "budget.nodes=4"}, t_.str("orig")));
  EXPECT_EQ(r.status, 0) << r.output;
  // --json: the same differences as one object.
  auto j = anchor::proc::run_capture([&] {
    auto a = args({"--set", "data.seq_len=32", "--json"}, t_.str("orig/report.json"));
    a.insert(a.begin(), ANCHOR_BINARY);
    return a;
  }());
  EXPECT_EQ(j.status, 3) << j.out;
  const auto doc = json::parse(j.out);
  ASSERT_EQ(doc["differences"].size(), 1u) << doc.dump(2);
  EXPECT_EQ(doc["differences"][0]["key"], "data.seq_len");
  EXPECT_EQ(doc["differences"][0]["past"], 64);
  EXPECT_EQ(doc["differences"][0]["now"], 32);
  EXPECT_TRUE(doc["differences"][0]["decides_result"].get<bool>());
  EXPECT_EQ(doc["run_id"], read_json(t_.str("orig/report.json"))["run_id"]);
}

// anchor diff RUN RUN: two runs side by side. The same config run again agrees (exit 0: the
// negative control); another learning rate differs in config, pins and every step after the
// first (exit 3), the measurements come with B/A ratios, and --json holds the same rows.
TEST_F(Reproduce, DiffOfTwoRunsShowsConfigPinsMeasurementsAndStepsSideBySide) {
  auto pilot = [&](const std::string& dir, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"pilot",     source_path("configs/pilot.yaml"),
                                  "--run-dir", t_.str(dir),
                                  "--set",     "data.train=[" + t_.str("train.txt") + "]",
                                  "--set",     "data.val=[" + t_.str("val.txt") + "]",
                                  "--set",     "report.signing_key=" + t_.str("keys/anchor.key"),
                                  "--set",     "export.copy_to=" + t_.str("share")};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_anchor(a);
  };
  ASSERT_EQ(pilot("again", {}).status, 0);
  ASSERT_EQ(pilot("lr", {"--set", "train.optimizer.lr=0.002"}).status, 0);

  auto same = run_anchor({"diff", t_.str("orig"), t_.str("again/report.intoto.json")});
  EXPECT_EQ(same.status, 0) << same.output;
  for (const char* line : {"Config: the same effective config", "Pins: the same inputs and dependencies",
                           "figures compared (every step's loss", "), bitwise equal", "peak allocated",
                           "resume     match (bitwise)  match (bitwise)", "agree on what decides the result"})
    EXPECT_NE(same.output.find(line), std::string::npos) << line << "\n" << same.output;

  auto lr = run_anchor({"diff", t_.str("orig/report.json"), t_.str("lr")});
  EXPECT_EQ(lr.status, 3) << lr.output;
  for (const char* line : {"Config: 1 key(s) differ, 1 decide the result", "train.optimizer.lr  0.001  0.002",
                           "config train.optimizer.lr", "train step 1: learning rate: A 5e-05, B 0.0001",
                           "train step 2: loss: A ", "differ in what decides the result"})
    EXPECT_NE(lr.output.find(line), std::string::npos) << line << "\n" << lr.output;
  EXPECT_EQ(lr.output.find("step 0"), std::string::npos) << "steps count from 1\n" << lr.output;

  auto j = anchor::proc::run_capture({ANCHOR_BINARY, "diff", t_.str("orig"), t_.str("lr"), "--json"});
  EXPECT_EQ(j.status, 3) << j.out;
  const auto doc = json::parse(j.out);
  EXPECT_TRUE(doc["differs"].get<bool>());
  EXPECT_EQ(doc["a"]["run_id"], read_json(t_.str("orig/report.json"))["run_id"]);
  ASSERT_EQ(doc["config"].size(), 1u) << doc.dump(2);
  EXPECT_EQ(doc["config"][0]["key"], "train.optimizer.lr");
  bool tokens = false;
  for (const auto& m : doc["measurements"])
    if (m["name"] == "tokens/s (one rank)") tokens = m["ratio"].get<double>() > 0;
  EXPECT_TRUE(tokens) << doc["measurements"].dump(2);
  EXPECT_GT(doc["training"]["differences"].size(), 10u);

  // A config written as JSON is a config, compared with the run, not taken for a run.
  auto dumped =
      anchor::proc::run_capture({ANCHOR_BINARY, "config", "dump", source_path("configs/pilot.yaml"), "--json"});
  ASSERT_EQ(dumped.status, 0) << dumped.out;
  anchor::fs::atomic_write_file(t_.str("config.json"), dumped.out);
  auto as_config = run_anchor({"diff", t_.str("config.json"), t_.str("orig")});
  EXPECT_NE(as_config.output.find("key(s) differ from run"), std::string::npos) << as_config.output;
  EXPECT_EQ(as_config.output.find("run A:"), std::string::npos) << as_config.output;

  // --set changes a config, not a past run; a report whose config is not an object is refused.
  auto set = run_anchor({"diff", t_.str("orig"), t_.str("lr"), "--set", "train.optimizer.lr=1"});
  EXPECT_EQ(set.status, 2) << set.output;
  EXPECT_NE(set.output.find("--set changes a config"), std::string::npos) << set.output;
  auto hostile = read_json(t_.str("lr/report.json"));
  hostile["config"] = "yes";
  anchor::fs::atomic_write_file(t_.str("hostile.json"), hostile.dump());
  auto bad = run_anchor({"diff", t_.str("orig"), t_.str("hostile.json")});
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("run B: its report holds no config object"), std::string::npos) << bad.output;
}

}  // namespace
