// The schema table against the things that must agree with it: the shipped
// configs, docs/config.md, and to_json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/config/config.hpp"
#include "config/schema.hpp"

namespace {

namespace cfg = anchor::config;
namespace schema = anchor::config::schema;
namespace stdfs = std::filesystem;

const stdfs::path kSource = ANCHOR_SOURCE_DIR;

std::string dump(const cfg::ConfigError& e) {
  std::string out = std::string(e.what()) + "\n";
  for (const auto& p : e.problems()) out += "  " + p.format() + "\n";
  return out;
}

TEST(ConfigFilesInRepo, EveryConfigValidates) {
  // catalog.yaml is the device catalog (a different schema, read by plan).
  // bench/configs: the benchmarks' real-sized pilots (bench/README.md).
  int n = 0;
  std::vector<stdfs::directory_entry> files;
  for (const char* dir : {"configs", "bench/configs"})
    for (const auto& entry : stdfs::recursive_directory_iterator(kSource / dir)) files.push_back(entry);
  for (const auto& entry : files) {
    if (!entry.is_regular_file() || entry.path().extension() != ".yaml") continue;
    if (entry.path().filename() == "catalog.yaml") continue;
    ++n;
    SCOPED_TRACE(entry.path().string());
    try {
      cfg::Config c = cfg::load(entry.path().string());
      EXPECT_EQ(c.base_dir, entry.path().parent_path().lexically_normal().string());
      // The effective config survives the trip through JSON (as workers get it).
      EXPECT_EQ(cfg::digest(cfg::from_json(cfg::to_json(c), c.base_dir)), cfg::digest(c));
    } catch (const cfg::ConfigError& e) {
      ADD_FAILURE() << dump(e);
    }
  }
  EXPECT_GE(n, 4) << "configs/pilot.yaml, configs/examples/*.yaml and bench/configs/*.yaml should be found";
}

TEST(ConfigFilesInRepo, PilotIsTheTinyCpuDefault) {
  cfg::Config c = cfg::load((kSource / "configs/pilot.yaml").string());
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.model.source, "builtin");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.model.block_size, 64);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.dropout, 0.1);
  EXPECT_EQ(c.data.format, "text");
  EXPECT_EQ(c.data.train, std::vector<std::string>{"../data/tiny/train.txt"});
  EXPECT_EQ(c.data.val, std::vector<std::string>{"../data/tiny/val.txt"});
  EXPECT_EQ(cfg::resolve_path(c, c.data.train[0]), (kSource / "data/tiny/train.txt").lexically_normal().string());
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.grad_accum, 2);
  EXPECT_EQ(c.train.total_steps, 2000);
  EXPECT_EQ(c.train.optimizer.lr, 1e-3);
  EXPECT_EQ(c.train.schedule.warmup_steps, 20);
  EXPECT_EQ(c.pilot.steps_before_save, 2);
  EXPECT_EQ(c.pilot.steps_after_resume, 2);
  EXPECT_EQ(c.pilot.eval_batches, 2);
  EXPECT_EQ(c.run.output_dir, "runs");
  EXPECT_EQ(c.checkpoint.keep_last, 2);
}

TEST(ConfigSchema, KeysAreUniqueAndSectionsContiguous) {
  const auto& fields = schema::fields();
  std::set<std::string> keys;
  std::map<std::string, std::pair<std::size_t, std::size_t>> span;  // section -> first, last
  for (std::size_t i = 0; i < fields.size(); ++i) {
    EXPECT_TRUE(keys.insert(fields[i].key).second) << "duplicate " << fields[i].key;
    EXPECT_FALSE(fields[i].doc.empty()) << fields[i].key;
    EXPECT_FALSE(fields[i].used_by.empty()) << fields[i].key;
    EXPECT_EQ(fields[i].doc.find('|'), std::string::npos) << fields[i].key;
    for (auto dot = fields[i].key.find('.'); dot != std::string::npos; dot = fields[i].key.find('.', dot + 1)) {
      std::string section = fields[i].key.substr(0, dot);
      auto [it, fresh] = span.emplace(section, std::make_pair(i, i));
      if (!fresh) {
        EXPECT_EQ(it->second.second + 1, i)
            << section << " is split: " << fields[i].key << " is not next to its section";
        it->second.second = i;
      }
    }
    EXPECT_FALSE(schema::is_section(fields[i].key)) << fields[i].key << " is a key and a section";
  }
}

TEST(ConfigSchema, ToJsonHasExactlyTheSchemaKeys) {
  nlohmann::json flat = cfg::to_json(cfg::Config{}).flatten();
  std::set<std::string> from_json;
  for (const auto& item : flat.items()) {
    std::string k = item.key().substr(1);
    std::replace(k.begin(), k.end(), '/', '.');
    from_json.insert(k);
  }
  std::set<std::string> from_schema;
  for (const auto& f : schema::fields()) from_schema.insert(f.key);
  EXPECT_EQ(from_json, from_schema);
}

TEST(ConfigSchema, DefaultConfigValidatesOnceDataIsGiven) {
  // The struct defaults themselves obey every rule.
  EXPECT_NO_THROW(cfg::load_string("data:\n  train: [a.txt]\n"));
}

// docs/config.md holds one table row per key, exactly as markdown_row() makes
// it, so a key, default, range or meaning that changes in the code shows up
// here until the docs say the same. On failure the expected row is printed:
// paste it into docs/config.md.
TEST(ConfigDocs, EveryKeyIsDocumentedWithItsCurrentRow) {
  const std::string doc = anchor::fs::read_file((kSource / "docs/config.md").string());
  // Reference rows start "| `key` |"; other tables (the rules) do not.
  static const std::regex kRow("^\\| `([a-z0-9_.]+)` \\|.*");
  std::map<std::string, std::string> rows;  // key -> line
  std::istringstream in(doc);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, kRow)) rows[m[1]] = line;
  }
  for (const auto& f : schema::fields()) {
    auto it = rows.find(f.key);
    if (it == rows.end()) {
      ADD_FAILURE() << f.key << " is not in docs/config.md; add:\n" << schema::markdown_row(f);
      continue;
    }
    EXPECT_EQ(it->second, schema::markdown_row(f)) << "docs/config.md row for " << f.key;
    rows.erase(it);
  }
  for (const auto& [key, line] : rows)
    ADD_FAILURE() << "docs/config.md documents `" << key << "`, which is not a key:\n" << line;
}

}  // namespace
