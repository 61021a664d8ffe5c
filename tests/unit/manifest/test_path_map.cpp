// Where a past run's inputs are now (include/anchor/manifest/path_map.hpp).
#include <gtest/gtest.h>

#include "anchor/error.hpp"
#include "anchor/config/config.hpp"
#include "anchor/manifest/manifest.hpp"
#include "anchor/manifest/path_map.hpp"

namespace m = anchor::manifest;

TEST(PathMap, TheLongestWholeComponentPrefixIsReplaced) {
  m::PathMap map;
  map.prefixes = {{"/data", "/mnt/data"}, {"/data/shards", "/fast/shards"}};
  EXPECT_EQ(m::map_path(map, "/data/a.txt"), "/mnt/data/a.txt");
  EXPECT_EQ(m::map_path(map, "/data/shards/0.bin"), "/fast/shards/0.bin") << "the longer prefix wins";
  EXPECT_EQ(m::map_path(map, "/data"), "/mnt/data");
  EXPECT_EQ(m::map_path(map, "/database/x"), "/database/x") << "whole components only";
  EXPECT_EQ(m::map_path(map, "data/a.txt"), "data/a.txt") << "a relative path follows --root, not --map";
  EXPECT_EQ(m::map_path(map, ""), "");
  m::PathMap all;
  all.prefixes = {{"/", "/chroot"}};
  EXPECT_EQ(m::map_path(all, "/etc/x"), "/chroot/etc/x");
}

TEST(PathMap, AMappingIsTwoPathsTheFirstAbsolute) {
  const auto p = m::parse_prefix_mapping("/old/dir/=/new/./dir");
  EXPECT_EQ(p.first, "/old/dir");
  EXPECT_EQ(p.second, "/new/dir");
  for (const char* bad : {"/old", "=/new", "/old=", "old=/new"})
    EXPECT_THROW(m::parse_prefix_mapping(bad), anchor::Error) << bad;
}

TEST(PathMap, TheConfigReadsItsInputsAtTheRootAndTheMappedPlaces) {
  anchor::config::Config cfg;
  cfg.base_dir = "/old/configs";
  cfg.source_path = "/old/configs/pilot.yaml";
  cfg.data.train = {"../data/train.txt", "/old/data/more.txt"};
  cfg.model.weights = "/elsewhere/w.safetensors";
  m::PathMap map;
  map.root = "/new/configs";
  map.prefixes = {{"/old", "/new"}};
  m::remap_config(cfg, map);
  EXPECT_EQ(cfg.base_dir, "/new/configs");
  EXPECT_EQ(cfg.source_path, "/new/configs/pilot.yaml");
  EXPECT_EQ(cfg.data.train, (std::vector<std::string>{"../data/train.txt", "/new/data/more.txt"}));
  EXPECT_EQ(cfg.model.weights, "/elsewhere/w.safetensors") << "not under a mapped prefix";
}

// A program pilot's pins: --root moves what was under the config's directory (the program's root, cwd and
// absolute sources), --map the interpreter, packages and libraries; sizes and digests stay for the drift check.
TEST(PathMap, AProgramsPinsMoveWithTheRootAndTheMap) {
  anchor::config::Config cfg = anchor::config::load_string("program:\n  command: [python3, train.py]\n", "p.yaml");
  nlohmann::json manifest = {
      {"format", m::kFormat},
      {"config", {{"base_dir", "/old/proj"}, {"effective", anchor::config::to_json(cfg)}}},
      {"program",
       {{"command", {"/usr/bin/python3", "train.py", "/old/proj/extra.yaml"}},
        {"cwd", "/old/proj"},
        {"root", "/old/proj"},
        {"source_dirs", {".", "/old/proj/lib"}},
        {"sources", {{{"path", "train.py"}, {"sha256", "aa"}}, {{"path", "/old/proj/lib/m.py"}, {"sha256", "bb"}}}},
        {"interpreter", {{"path", "/usr/bin/python3"}, {"sha256", "cc"}}},
        {"python",
         {{"sys_path", {"/old/proj", "/usr/lib/python3/dist-packages"}},
          {"distributions", {{{"name", "torch"}, {"dist_info", "/usr/lib/python3/dist-packages/torch.dist-info"}}}}}}}},
      {"dependencies",
       {{"executable", {{"path", "/usr/bin/python3"}}},
        {"shared_libraries", {{{"path", "/usr/lib/libtorch.so"}, {"sha256", "dd"}}}}}}};
  m::PathMap map;
  map.root = "/new/proj";
  map.prefixes = {{"/usr", "/opt/env"}};
  const auto out = m::remap_manifest(manifest, map);
  const auto& p = out["program"];
  EXPECT_EQ(p["command"], nlohmann::json({"/opt/env/bin/python3", "train.py", "/new/proj/extra.yaml"}));
  EXPECT_EQ(p["cwd"], "/new/proj");
  EXPECT_EQ(p["root"], "/new/proj");
  EXPECT_EQ(p["source_dirs"], nlohmann::json({".", "/new/proj/lib"}));
  EXPECT_EQ(p["sources"][0]["path"], "train.py") << "relative to root: unchanged";
  EXPECT_EQ(p["sources"][1]["path"], "/new/proj/lib/m.py");
  EXPECT_EQ(p["sources"][1]["sha256"], "bb") << "what was hashed stays";
  EXPECT_EQ(p["interpreter"]["path"], "/opt/env/bin/python3");
  EXPECT_EQ(p["python"]["sys_path"], nlohmann::json({"/new/proj", "/opt/env/lib/python3/dist-packages"}));
  EXPECT_EQ(p["python"]["distributions"][0]["dist_info"], "/opt/env/lib/python3/dist-packages/torch.dist-info");
  EXPECT_EQ(out["dependencies"]["executable"]["path"], "/opt/env/bin/python3");
  EXPECT_EQ(out["dependencies"]["shared_libraries"][0]["path"], "/opt/env/lib/libtorch.so");
  // The control: without a map the manifest is as recorded; a longer --map prefix wins over --root's.
  EXPECT_EQ(m::remap_manifest(manifest, m::PathMap{}), manifest);
  map.prefixes.emplace_back("/old/proj/lib", "/shared/lib");
  EXPECT_EQ(m::remap_manifest(manifest, map)["program"]["sources"][1]["path"], "/shared/lib/m.py");
}
