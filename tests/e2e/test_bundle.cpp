// End-to-end: `anchor bundle RUN` and `anchor reproduce BUNDLE` (issue 19;
// docs/report.md, "Reproduction bundles"). A signed run whose inputs are
// relative (above the config's directory) and absolute is bundled with its
// data; the original tree and run are moved away, the bundle is moved
// elsewhere, and the reproduction is bitwise from the bundle alone. Controls:
// a changed input byte, an added input, a changed, lost or unlisted catalog, a
// bundle.json edited to match a changed input, a symbolic link on the way to a
// listed file or among the inputs, a malformed bundle.json, --root against a
// bundle with data, an output that exists, a run whose data changed since it
// was signed, and a tampered run are each refused with the documented exit code.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "support/run_anchor.hpp"

namespace {

using anchor::testing::read_json;
using anchor::testing::run_anchor;
using anchor::testing::source_path;
using anchor::testing::TempDir;
using nlohmann::json;
namespace stdfs = std::filesystem;

void append(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::app | std::ios::binary);
  f << text;
}

// bundle.json with one file's digest set to what it holds now: an edit made to match a changed file.
void relist(const std::string& bundle, const std::string& name) {
  json j = read_json(bundle + "/bundle.json");
  for (auto& f : j["files"])
    if (f["name"] == name) {
      const auto d = anchor::sha256_file(bundle + "/" + name);
      f["size"] = d.size;
      f["sha256"] = d.sha256;
    }
  anchor::fs::atomic_write_file(bundle + "/bundle.json", j.dump(2));
}

class Bundle : public ::testing::Test {
 protected:
  void SetUp() override {
    stdfs::create_directories(old_tree_ + "/configs");
    stdfs::create_directories(old_tree_ + "/data");
    stdfs::copy_file(source_path("configs/pilot.yaml"), old_tree_ + "/configs/pilot.yaml");
    stdfs::copy_file(source_path("data/tiny/train.txt"), old_tree_ + "/data/train.txt");  // relative, above the config
    stdfs::copy_file(source_path("data/tiny/val.txt"), old_tree_ + "/data/val..txt");     // absolute; ".." in a name
    ASSERT_EQ(run_anchor({"keygen", "-o", t_.str("keys")}).status, 0);
    auto p = run_anchor({"pilot", old_tree_ + "/configs/pilot.yaml", "--run-dir", t_.str("orig"), "--set",
                         "data.train=[../data/train.txt]", "--set", "data.val=[" + old_tree_ + "/data/val..txt]",
                         "--set", "report.signing_key=" + t_.str("keys/anchor.key")});
    ASSERT_EQ(p.status, 0) << p.output;
  }
  anchor::testing::AnchorRun reproduce(const std::string& what, const std::string& run,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"reproduce", what,        "--key",         t_.str("keys/anchor.pub"),
                                  "--run-dir", t_.str(run), "--signing-key", "none"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_anchor(a);
  }
  TempDir t_{"bundle"};
  const std::string old_tree_ = t_.str("tree");
};

TEST_F(Bundle, WithItsDataItReproducesBitwiseFromTheBundleAlone) {
  // The run records the catalog it planned with, by digest.
  const json orig = read_json(t_.str("orig/report.json"));
  ASSERT_TRUE(orig["plan"].contains("catalog")) << orig["plan"].dump();
  const std::string catalog_path = orig["plan"]["catalog"]["path"];
  EXPECT_TRUE(stdfs::path(catalog_path).is_absolute()) << catalog_path;
  EXPECT_EQ(orig["plan"]["catalog"]["sha256"], anchor::sha256_file(catalog_path).sha256);

  auto b =
      run_anchor({"bundle", t_.str("orig"), "-o", t_.str("made"), "--with-data", "--key", t_.str("keys/anchor.pub")});
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("2 of them the run's inputs"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("anchor reproduce " + t_.str("made")), std::string::npos) << b.output;
  const json listed = read_json(t_.str("made/bundle.json"));
  EXPECT_EQ(listed["format"], "anchor.bundle/v1");
  EXPECT_EQ(listed["run_id"], orig["run_id"]);
  EXPECT_EQ(listed["inputs"]["root"], "inputs/tree/configs") << "one level above the config's directory, by its name";
  EXPECT_TRUE(stdfs::is_regular_file(t_.str("made/inputs/tree/data/train.txt")));
  EXPECT_TRUE(stdfs::is_regular_file(t_.str("made/inputs/abs") + old_tree_ + "/data/val..txt"));
  EXPECT_EQ(anchor::sha256_file(t_.str("made/catalog.yaml")).sha256, orig["plan"]["catalog"]["sha256"]);
  for (const char* f :
       {"report.intoto.json", "report.pub", "report.json", "manifest.json", "config.json", "provenance.intoto.json"})
    EXPECT_TRUE(stdfs::is_regular_file(t_.str("made/") + f)) << f;
  // No temporary is left beside it.
  for (const auto& e : stdfs::directory_iterator(t_.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // Its envelope verifies alone with standard anchor verify.
  EXPECT_EQ(
      run_anchor({"verify", t_.str("made/report.intoto.json"), "--envelope-only", "--key", t_.str("keys/anchor.pub")})
          .status,
      0);

  // Nothing of the original is where it was; the bundle itself moved.
  stdfs::rename(old_tree_, t_.str("gone-tree"));
  stdfs::rename(t_.str("orig"), t_.str("gone-run"));
  // Shipped as docs/report.md shows: tar, unpacked at another place.
  const std::string tar = "tar -C " + t_.str("") + " -cf " + t_.str("bundle.tar") + " made && mkdir " +
                          t_.str("node2") + " && tar -C " + t_.str("node2") + " -xf " + t_.str("bundle.tar");
  ASSERT_EQ(std::system(tar.c_str()), 0) << tar;
  stdfs::remove_all(t_.str("made"));
  const std::string b2 = t_.str("node2/made");
  auto r = reproduce(b2, "again");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("holds every file it lists"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no drift"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  reproduced: the re-run matches "), std::string::npos) << r.output;
  const json again = read_json(t_.str("again/report.json"));
  EXPECT_EQ(again["reproduction"]["mode"], "bitwise");
  EXPECT_EQ(again["reproduces"]["bundle"], b2);
  EXPECT_EQ(again["plan"]["catalog"]["path"], b2 + "/catalog.yaml");
  EXPECT_EQ(again["reproduces"]["inputs_at"]["root"], b2 + "/inputs/tree/configs");

  // --root/--map do not apply to a bundle that carries its inputs.
  auto root = reproduce(b2, "root", {"--root", t_.str("gone-tree/configs")});
  EXPECT_EQ(root.status, 2) << root.output;
  EXPECT_NE(root.output.find("--root and --map do not apply"), std::string::npos) << root.output;

  // One changed byte of an input: refused by the bundle's own digests before anything runs.
  const std::string train = b2 + "/inputs/tree/data/train.txt";
  append(train, "x");
  auto changed = reproduce(b2, "changed");
  EXPECT_EQ(changed.status, 3) << changed.output;
  EXPECT_NE(changed.output.find("inputs/tree/data/train.txt"), std::string::npos) << changed.output;
  EXPECT_FALSE(stdfs::exists(t_.str("changed")));
  // bundle.json edited to match is not trusted: the signed manifest's digest decides (drift, exit 3).
  relist(b2, "inputs/tree/data/train.txt");
  auto relisted = reproduce(b2, "relisted");
  EXPECT_EQ(relisted.status, 3) << relisted.output;
  EXPECT_NE(relisted.output.find("pins drifted"), std::string::npos) << relisted.output;
  EXPECT_NE(relisted.output.find("train.txt"), std::string::npos) << relisted.output;
}

TEST_F(Bundle, WhatABundleDoesNotHoldOrNoLongerMatchesIsRefused) {
  auto b = run_anchor({"bundle", t_.str("orig"), "-o", t_.str("made"), "--with-data"});
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("bundle: warn  no --key given"), std::string::npos) << "verify's warning: " << b.output;

  // The output exists: nothing is replaced.
  const auto before = anchor::sha256_file(t_.str("made/bundle.json")).sha256;
  auto again = run_anchor({"bundle", t_.str("orig"), "-o", t_.str("made")});
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  EXPECT_EQ(anchor::sha256_file(t_.str("made/bundle.json")).sha256, before);

  // A file added among the inputs (a glob would find it).
  const std::string extra = t_.str("made/inputs/tree/data/extra.txt");
  anchor::fs::atomic_write_file(extra, "more");
  auto added = reproduce(t_.str("made"), "added");
  EXPECT_EQ(added.status, 3) << added.output;
  EXPECT_NE(added.output.find("inputs/tree/data/extra.txt, which bundle.json does not list"), std::string::npos)
      << added.output;
  stdfs::remove(extra);

  // A catalog that is not the one the run planned with, even with bundle.json edited to match.
  append(t_.str("made/catalog.yaml"), "\n# edited\n");
  relist(t_.str("made"), "catalog.yaml");
  auto catalog = reproduce(t_.str("made"), "catalog");
  EXPECT_EQ(catalog.status, 3) << catalog.output;
  EXPECT_NE(catalog.output.find("is not the catalog the run planned with"), std::string::npos) << catalog.output;

  // The bundle's directory `in_bundle` replaced by a symbolic link to `target` (the original set
  // aside and put back after): the reproduction is refused with exit 2, saying `said`, and runs nothing.
  auto refused_through_link = [&](const std::string& in_bundle, const std::string& target, const std::string& said,
                                  const std::string& run) {
    const std::string at = t_.str("made/" + in_bundle), aside = t_.str(run + "-aside");
    stdfs::rename(at, aside);
    stdfs::create_directory_symlink(target.empty() ? aside : target, at);
    auto r = reproduce(t_.str("made"), run);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << r.output;
    EXPECT_FALSE(stdfs::exists(t_.str(run)));
    stdfs::remove(at);
    stdfs::rename(aside, at);
  };
  // A symbolic link on the way to a listed file (inputs/abs -> /: the host's files by their own path),
  // even with bundle.json untouched.
  refused_through_link("inputs/abs", "/", "inputs.absolute (inputs/abs) is not a plain directory", "linked");
  // A linked directory on the way to a listed file (the same bytes, through a link).
  refused_through_link("inputs/tree/data", "", "inputs/tree/data/train.txt is not a regular file in a plain directory",
                       "via-link");
  // An unlisted symbolic link among the inputs (a directory link is not followed, and not skipped).
  stdfs::create_directory_symlink("/etc", t_.str("made/inputs/tree/data/etc"));
  auto unlisted_link = reproduce(t_.str("made"), "unlisted-link");
  EXPECT_EQ(unlisted_link.status, 2) << unlisted_link.output;
  EXPECT_NE(unlisted_link.output.find("inputs/tree/data/etc is not a regular file or directory"), std::string::npos)
      << unlisted_link.output;
  stdfs::remove(t_.str("made/inputs/tree/data/etc"));
  EXPECT_FALSE(stdfs::exists(t_.str("unlisted-link")));

  // A listed file the bundle lost.
  const std::string saved = t_.str("catalog.saved");
  stdfs::copy_file(t_.str("made/catalog.yaml"), saved);
  stdfs::remove(t_.str("made/catalog.yaml"));
  auto lost = reproduce(t_.str("made"), "lost");
  EXPECT_EQ(lost.status, 3) << lost.output;
  EXPECT_NE(lost.output.find("the bundle lost catalog.yaml"), std::string::npos) << lost.output;
  // Unlisted too: the run recorded its catalog, so planning with this machine's is refused.
  json j = read_json(t_.str("made/bundle.json"));
  const json listed_before = j;
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it)
    if ((*it)["name"] == "catalog.yaml") {
      j["files"].erase(it);
      break;
    }
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  auto no_catalog = reproduce(t_.str("made"), "no-catalog");
  EXPECT_EQ(no_catalog.status, 3) << no_catalog.output;
  EXPECT_NE(no_catalog.output.find("holds no catalog.yaml"), std::string::npos) << no_catalog.output;
  // A with_data that is not a boolean is a malformed bundle.json (exit 2), not a crash, and that
  // is said before any byte is checked (a changed input beside it does not turn it into exit 3).
  j = listed_before;
  j["with_data"] = "yes";
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  stdfs::copy_file(saved, t_.str("made/catalog.yaml"));
  const std::string train_in = t_.str("made/inputs/tree/data/train.txt");
  stdfs::copy_file(train_in, t_.str("train.saved"));
  append(train_in, "x");
  auto typed = reproduce(t_.str("made"), "typed");
  EXPECT_EQ(typed.status, 2) << typed.output;
  EXPECT_NE(typed.output.find("with_data is not true or false"), std::string::npos) << typed.output;
  stdfs::remove(train_in);
  stdfs::copy_file(t_.str("train.saved"), train_in);
  // bundle.json is not signed: inputs placed elsewhere than the signed manifest puts them (here:
  // the absolute ones read from the host's own paths) is refused.
  j = listed_before;
  j["inputs"]["absolute"] = nullptr;
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  auto placed = reproduce(t_.str("made"), "placed");
  EXPECT_EQ(placed.status, 3) << placed.output;
  EXPECT_NE(placed.output.find("bundle.json places the inputs"), std::string::npos) << placed.output;
  EXPECT_FALSE(stdfs::exists(t_.str("placed")));
  j = listed_before;
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());

  // A name in bundle.json that leaves the bundle (and is not there: refused for its name, before it is looked for).
  j["files"].push_back({{"name", "../no-such-file"}, {"size", 1}, {"sha256", std::string(64, '0')}, {"role", "x"}});
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  auto escape = reproduce(t_.str("made"), "escape");
  EXPECT_EQ(escape.status, 2) << escape.output;
  EXPECT_NE(escape.output.find("not a relative path within the directory"), std::string::npos) << escape.output;

  // A name with a NUL in it is a malformed bundle.json (exit 2, the NUL shown), not a lost file (issue 43.7).
  j = listed_before;
  j["files"].push_back(
      {{"name", std::string("report.md\0x", 11)}, {"size", 1}, {"sha256", std::string(64, '0')}, {"role", "x"}});
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  auto nul = reproduce(t_.str("made"), "nul");
  EXPECT_EQ(nul.status, 2) << nul.output;
  EXPECT_NE(nul.output.find("lists 'report.md\\x00x', which is not a relative path within the directory"),
            std::string::npos)
      << nul.output;

  // A signed file of the run edited, and bundle.json made to agree: the envelope's digest decides
  // (issue 43.7: it reproduced before). The control: the file put back, the bundle reproduces
  // past this check (WithItsDataItReproducesBitwiseFromTheBundleAlone runs it to the end).
  j = listed_before;
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  if (listed_before.dump().find("\"report.md\"") != std::string::npos) {
    const std::string md = t_.str("made/report.md");
    stdfs::copy_file(md, t_.str("report.md.saved"));
    append(md, "\nAll good, trust me.\n");
    relist(t_.str("made"), "report.md");
    auto edited = reproduce(t_.str("made"), "edited");
    EXPECT_EQ(edited.status, 3) << edited.output;
    EXPECT_NE(edited.output.find("the bundle's report.md is not the file the run signed"), std::string::npos)
        << edited.output;
    EXPECT_FALSE(stdfs::exists(t_.str("edited")));
    stdfs::remove(md);
    stdfs::copy_file(t_.str("report.md.saved"), md);
    anchor::fs::atomic_write_file(t_.str("made/bundle.json"), listed_before.dump());
  } else {
    ADD_FAILURE() << "the bundle carries no report.md: " << listed_before.dump();
  }
  j = listed_before;

  // A bundle of another format.
  j["format"] = "anchor.bundle/v2";
  anchor::fs::atomic_write_file(t_.str("made/bundle.json"), j.dump());
  auto newer = reproduce(t_.str("made"), "newer");
  EXPECT_EQ(newer.status, 2) << newer.output;
  EXPECT_NE(newer.output.find("a newer bundle needs a newer anchor"), std::string::npos) << newer.output;

  // The run's data changed since it was signed: its bundle with data is refused, and nothing is left.
  append(old_tree_ + "/data/val..txt", "changed after the run");
  auto stale = run_anchor({"bundle", t_.str("orig"), "-o", t_.str("stale"), "--with-data"});
  EXPECT_EQ(stale.status, 3) << stale.output;
  EXPECT_NE(stale.output.find("val..txt"), std::string::npos) << stale.output;
  EXPECT_FALSE(stdfs::exists(t_.str("stale")));
  for (const auto& e : stdfs::directory_iterator(t_.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();

  // Without --with-data the bundle carries no input; a reproduction finds them with --root/--map.
  // (A trailing '/' names the same directory.)
  auto nodata = run_anchor({"bundle", t_.str("orig"), "-o", t_.str("nodata") + "/"});
  ASSERT_EQ(nodata.status, 0) << nodata.output;
  EXPECT_FALSE(stdfs::exists(t_.str("nodata/inputs")));
  auto drifted = reproduce(t_.str("nodata"), "nodata-run");
  EXPECT_EQ(drifted.status, 3) << "val..txt changed: " << drifted.output;
  EXPECT_NE(drifted.output.find("pins drifted"), std::string::npos) << drifted.output;

  // A run whose report was changed after signing is not bundled.
  append(t_.str("orig/report.json"), " ");
  auto tampered = run_anchor({"bundle", t_.str("orig"), "-o", t_.str("tampered")});
  EXPECT_EQ(tampered.status, 3) << tampered.output;
  EXPECT_NE(tampered.output.find("does not verify"), std::string::npos) << tampered.output;
  EXPECT_FALSE(stdfs::exists(t_.str("tampered")));
}

}  // namespace
