// Where a past run's inputs are now (include/anchor/manifest/path_map.hpp).
#include <gtest/gtest.h>

#include "anchor/error.hpp"
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
