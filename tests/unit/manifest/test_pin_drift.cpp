// manifest::pin contents, and drift detection for each kind of pin. Each
// drift test starts from a pinned manifest, changes one thing, re-pins (or
// edits the JSON for facts a test cannot change, such as the libtorch
// version), and checks that compare() names it; the unchanged re-pin is the
// negative control.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "anchor/common/sha256.hpp"
#include "anchor/config/config.hpp"
#include "anchor/error.hpp"
#include "anchor/manifest/hasher.hpp"
#include "anchor/manifest/manifest.hpp"
#include "manifest_test_util.hpp"

namespace anchor::manifest {
namespace {

using nlohmann::json;
using testing::backdate;
using testing::bytes;
using testing::sha256sum_of;
using testing::TempDir;
using testing::write_file;

class PinTest : public ::testing::Test {
 protected:
  // One cache for the suite: the ~300 loaded libraries are hashed by the first
  // test only. Data files live in each test's own directory, so their first
  // pin is always a miss.
  static TempDir* suite_dir;
  static void SetUpTestSuite() { suite_dir = new TempDir("pin-cache"); }
  static void TearDownTestSuite() {
    delete suite_dir;
    suite_dir = nullptr;
  }

  TempDir dir{"pin"};
  config::Config cfg;
  PinOptions opts;

  void SetUp() override {
    ::unsetenv("ANCHOR_CONTAINER_DIGEST");
    for (int i = 0; i < 3; ++i) {
      write_file(dir.str("data/train-" + std::to_string(i) + ".bin"), bytes(20000 + i, unsigned(i)));
      backdate(dir.str("data/train-" + std::to_string(i) + ".bin"));
    }
    write_file(dir.str("data/val.bin"), bytes(5000, 77));
    backdate(dir.str("data/val.bin"));
    cfg.base_dir = dir.path().string();
    cfg.source_path = dir.str("pilot.yaml");
    cfg.data.train = {"data/train-*.bin"};
    cfg.data.val = {"data/val.bin"};
    opts.cache_file = suite_dir->str("hash-cache.json");
    opts.threads = 2;
    opts.progress = false;
  }

  json pin_now() { return pin(cfg, opts); }

  static bool has(const std::vector<Drift>& d, const std::string& what) {
    return std::any_of(d.begin(), d.end(), [&](const Drift& x) { return x.what == what; });
  }
  static std::string table(const std::vector<Drift>& d) { return format_drift_table(d); }
};

TempDir* PinTest::suite_dir = nullptr;

TEST_F(PinTest, ManifestCarriesEveryPin) {
  json m = pin_now();
  EXPECT_EQ(m["format"], kFormat);
  EXPECT_TRUE(m["created_at"].get<std::string>().back() == 'Z');
  // Data: path as written, resolved path, digest equal to sha256sum's, set digest.
  const auto& files = m["data"]["train"]["files"];
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0]["path"], "data/train-0.bin");
  EXPECT_EQ(files[0]["resolved"], std::filesystem::canonical(dir.str("data/train-0.bin")).string());
  EXPECT_EQ(files[1]["sha256"], sha256sum_of(dir.str("data/train-1.bin")));
  EXPECT_EQ(files[2]["size"], 20002);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& f : files) pairs.emplace_back(f["sha256"], f["path"]);
  EXPECT_EQ(m["data"]["train"]["digest"], set_digest(pairs));
  EXPECT_EQ(m["data"]["val"]["files"][0]["path"], "data/val.bin");
  EXPECT_NE(m["data"]["val"]["digest"], m["data"]["train"]["digest"]);
  // Config and seeds.
  EXPECT_EQ(m["config"]["digest"], config::digest(cfg));
  EXPECT_EQ(m["config"]["effective"], config::to_json(cfg));
  EXPECT_EQ(m["seeds"]["root"], cfg.run.seed);
  EXPECT_EQ(m["seeds"]["dropout"], config::derive_seed(cfg.run.seed, "dropout"));
  EXPECT_NE(m["seeds"]["init"], m["seeds"]["data"]);
  // Dependencies, container, host, device.
  const auto& deps = m["dependencies"];
  EXPECT_FALSE(deps["anchor"]["git_commit"].get<std::string>().empty());
  EXPECT_FALSE(deps["libtorch"].get<std::string>().empty());
  EXPECT_FALSE(deps["glibc"].get<std::string>().empty());
  bool crypto = false;  // a library this (torch-free) process loaded, pinned by its bytes
  for (const auto& l : deps["shared_libraries"]) {
    if (l["path"].get<std::string>().find("libcrypto.so") != std::string::npos) {
      crypto = true;
      EXPECT_EQ(l["sha256"], sha256sum_of(l["path"]));
    }
  }
  EXPECT_TRUE(crypto);
  EXPECT_TRUE(m["container"]["digest"].is_null());
  EXPECT_FALSE(m["host"]["cpu_model"].get<std::string>().empty());
  EXPECT_TRUE(m["device"]["devices"].is_array());
  EXPECT_TRUE(m["model"]["files"].empty());  // builtin model: no file
}

TEST_F(PinTest, UnchangedRepinHasNoDriftAndUsesTheCache) {
  json a = pin_now();
  EXPECT_FALSE(a["data"]["train"]["files"][0]["cached"].get<bool>());
  json b = pin_now();
  EXPECT_TRUE(b["data"]["train"]["files"][0]["cached"].get<bool>());
  EXPECT_TRUE(b["data"]["val"]["files"][0]["cached"].get<bool>());
  auto d = compare(a, b);
  EXPECT_TRUE(d.empty()) << table(d);
  EXPECT_EQ(format_drift_table(d), "no drift\n");
  // --no-cache: everything read again, flags false, still no drift.
  opts.use_cache = false;
  json c = pin_now();
  EXPECT_FALSE(c["data"]["train"]["files"][0]["cached"].get<bool>());
  EXPECT_EQ(c["hashing"]["files_cached"], 0);
  EXPECT_TRUE(compare(a, c).empty()) << table(compare(a, c));
}

TEST_F(PinTest, DataShardChangedAddedRemoved) {
  json a = pin_now();
  write_file(dir.str("data/train-1.bin"), bytes(20001, 999));  // same size, new bytes
  json b = pin_now();
  auto d = compare(a, b);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "data.train data/train-1.bin");
  EXPECT_NE(d[0].old_value, d[0].new_value);

  write_file(dir.str("data/train-3.bin"), "new shard");
  std::filesystem::remove(dir.str("data/train-0.bin"));
  json c = pin_now();
  d = compare(b, c);
  EXPECT_TRUE(has(d, "data.train data/train-3.bin")) << table(d);
  EXPECT_TRUE(has(d, "data.train data/train-0.bin")) << table(d);
  EXPECT_EQ(d.size(), 2u) << table(d);
  for (const auto& x : d) {
    if (x.what.find("train-3") != std::string::npos) {
      EXPECT_EQ(x.old_value, "(added)");
    }
    if (x.what.find("train-0") != std::string::npos) {
      EXPECT_EQ(x.new_value, "(removed)");
    }
  }

  write_file(dir.str("data/val.bin"), "different validation data");
  json e = pin_now();
  d = compare(c, e);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "data.val data/val.bin");
}

TEST_F(PinTest, ModelWeightsChanged) {
  write_file(dir.str("model.safetensors"), bytes(4096, 1));
  cfg.model.source = "safetensors";
  cfg.model.weights = "model.safetensors";
  json a = pin_now();
  ASSERT_EQ(a["model"]["files"].size(), 1u);
  EXPECT_EQ(a["model"]["files"][0]["role"], "weights");
  EXPECT_EQ(a["model"]["files"][0]["sha256"], sha256sum_of(dir.str("model.safetensors")));
  EXPECT_TRUE(compare(a, pin_now()).empty());
  write_file(dir.str("model.safetensors"), bytes(4096, 2));
  auto d = compare(a, pin_now());
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "model weights");
}

TEST_F(PinTest, ConfigChangeNamesTheKey) {
  json a = pin_now();
  cfg.data.seq_len = 32;
  auto d = compare(a, pin_now());
  EXPECT_TRUE(has(d, "config digest")) << table(d);
  EXPECT_TRUE(has(d, "config data.seq_len")) << table(d);
  EXPECT_EQ(d.size(), 2u) << table(d);
}

TEST_F(PinTest, SeedChange) {
  json a = pin_now();
  cfg.run.seed = 99;
  auto d = compare(a, pin_now());
  for (const char* s : {"seeds.root", "seeds.init", "seeds.data", "seeds.dropout", "seeds.eval"})
    EXPECT_TRUE(has(d, s)) << s << "\n" << table(d);
  // The stored manifest's seeds are compared even when its config digest is not.
  json b = a;
  b["seeds"]["eval"] = 7;
  d = compare(a, b);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "seeds.eval");
}

TEST_F(PinTest, ContainerDigestChange) {
  json a = pin_now();
  std::string digest = "sha256:" + std::string(64, 'c');
  ::setenv("ANCHOR_CONTAINER_DIGEST", digest.c_str(), 1);
  json b = pin_now();
  ::unsetenv("ANCHOR_CONTAINER_DIGEST");
  EXPECT_EQ(b["container"]["digest"], digest);
  EXPECT_EQ(b["container"]["source"], "env");
  auto d = compare(a, b);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "container.digest");
  EXPECT_EQ(d[0].old_value, "(none)");
  EXPECT_EQ(d[0].new_value, digest);
}

TEST_F(PinTest, DependencyVersionsEachDrift) {
  json a = pin_now();
  for (auto ptr : {"/dependencies/libtorch", "/dependencies/cuda_runtime", "/dependencies/nccl", "/dependencies/glibc",
                   "/dependencies/compiler", "/dependencies/anchor/version", "/dependencies/anchor/git_commit",
                   "/dependencies/os/pretty_name", "/dependencies/os/release"}) {
    json b = a;
    b[json::json_pointer(ptr)] = "changed";
    auto d = compare(a, b);
    ASSERT_EQ(d.size(), 1u) << ptr << "\n" << table(d);
    EXPECT_EQ(d[0].new_value, "changed");
  }
}

TEST_F(PinTest, SharedLibrariesSignalAndNoise) {
  json a = pin_now();
  auto& libs = a["dependencies"]["shared_libraries"];
  ASSERT_FALSE(libs.empty());
  std::string path = libs[0]["path"];

  json changed = a;
  changed["dependencies"]["shared_libraries"][0]["sha256"] = sha256_hex("swapped");
  auto d = compare(a, changed);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "library " + path);

  json removed = a;
  removed["dependencies"]["shared_libraries"].erase(0);
  d = compare(a, removed);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].new_value, "(not loaded)");

  json added = a;
  added["dependencies"]["shared_libraries"].push_back(
      {{"path", "/opt/evil/libinject.so"}, {"size", 1}, {"sha256", sha256_hex("x")}});
  d = compare(a, added);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].old_value, "(not loaded)");

  // Noise: a library glibc loads on demand, only on one side; the executable.
  json noise = a;
  noise["dependencies"]["shared_libraries"].push_back(
      {{"path", "/usr/lib/x86_64-linux-gnu/libnss_files.so.2"}, {"size", 1}, {"sha256", sha256_hex("y")}});
  noise["dependencies"]["executable"]["sha256"] = sha256_hex("rebuilt");
  d = compare(a, noise);
  EXPECT_TRUE(d.empty()) << table(d);
}

TEST_F(PinTest, DeviceFactsDriftButVolatileFieldsDoNot) {
  json a = pin_now();
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  json b = pin_now();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  auto d = compare(a, b);
  ASSERT_EQ(d.size(), 1u) << table(d);
  EXPECT_EQ(d[0].what, "device.visible_devices.CUDA_VISIBLE_DEVICES");

  for (auto [ptr, value] : std::vector<std::pair<const char*, json>>{
           {"/host/cpu_model", "Other CPU"},
           {"/host/cpu_count", 64},
           {"/host/memory_total_bytes", 1},
           {"/device/accelerator", "cuda"},
           {"/device/devices", json::array({{{"index", 0}, {"name", "NVIDIA H100"}}})}}) {
    json c = a;
    c[json::json_pointer(ptr)] = value;
    EXPECT_FALSE(compare(a, c).empty()) << ptr;
  }

  json v = a;
  v["created_at"] = "1999-01-01T00:00:00Z";
  v["host"]["hostname"] = "elsewhere";
  v["hashing"]["seconds"] = 123.0;
  v["data"]["train"]["files"][0]["resolved"] = "/moved/data/train-0.bin";
  v["data"]["train"]["files"][0]["cached"] = true;
  d = compare(a, v);
  EXPECT_TRUE(d.empty()) << table(d);
}

TEST_F(PinTest, BadInputsAreClearErrors) {
  cfg.data.train = {"data/nothing-*.bin"};
  try {
    pin_now();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("nothing-*.bin"), std::string::npos) << e.what();
  }
  cfg.data.train = {"data/missing.bin"};
  try {
    pin_now();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("data.train[0] 'data/missing.bin'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ENOENT"), std::string::npos) << e.what();
  }
  cfg.data.train = {"data"};
  try {
    pin_now();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  cfg.data.train = {"data/train-0.bin"};
  cfg.container.required = true;
  try {
    pin_now();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
}

TEST_F(PinTest, ConfigFromManifestRoundTrips) {
  json a = pin_now();
  config::Config back = config_from_manifest(a);
  EXPECT_EQ(config::digest(back), a["config"]["digest"]);
  EXPECT_EQ(back.base_dir, cfg.base_dir);
  json b = pin(back, opts);
  EXPECT_TRUE(compare(a, b).empty()) << table(compare(a, b));
  json bad = a;
  bad["format"] = "anchor.manifest/v999";
  EXPECT_THROW(config_from_manifest(bad), Error);
}

TEST(DriftTable, IsAligned) {
  std::string t = format_drift_table({{"a", "old", "new"}, {"longer what", "o", "n"}});
  EXPECT_EQ(t,
            "WHAT         OLD  NEW\n"
            "-----------  ---  ---\n"
            "a            old  new\n"
            "longer what  o    n\n");
  // Two runs' headers, and a byte that is not UTF-8 shown, not written raw.
  EXPECT_EQ(format_drift_table({{"data", std::string("x\xff"), "y"}}, "A", "B"),
            "WHAT  A      B\n"
            "----  -----  -\n"
            "data  x\\xff  y\n");
  // A hostile manifest's ESC (clear the screen) is shown, not sent to the terminal.
  EXPECT_EQ(format_drift_table({{"data", "\x1b[2J", "y"}}, "A", "B"),
            "WHAT  A        B\n"
            "----  -------  -\n"
            "data  \\x1b[2J  y\n");
}

}  // namespace
}  // namespace anchor::manifest
