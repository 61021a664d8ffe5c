// End-to-end: `anchor pin` and `anchor pin --check` as a user runs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "anchor/common/process.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace stdfs = std::filesystem;

class PinCli : public ::testing::Test {
 protected:
  anchor::testing::TempDir tmp{"e2e-pin"};
  const stdfs::path& dir = tmp.path();

  void SetUp() override {
    stdfs::create_directories(dir / "data");
    for (int i = 0; i < 3; ++i)
      write(dir / "data" / ("train-" + std::to_string(i) + ".bin"), std::string(1000 + i, char('a' + i)));
    write(dir / "data" / "val.bin", "validation bytes");
    write(dir / "pilot.yaml",
          "data:\n"
          "  train: [\"data/train-*.bin\"]\n"
          "  val: [data/val.bin]\n");
  }

  static void write(const stdfs::path& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << s;
  }

  // Runs the binary in `dir` with stderr folded into the captured output.
  anchor::proc::RunResult anchor(const std::string& args, const std::string& container_env = "") {
    anchor::proc::SpawnOptions o;
    o.capture_stdout = true;
    o.env["ANCHOR_CACHE_DIR"] = (dir / "cache").string();
    o.env["ANCHOR_CONTAINER_DIGEST"] = container_env;
    return anchor::proc::run_capture(
        {"/bin/sh", "-c", "cd '" + dir.string() + "' && exec '" ANCHOR_BINARY "' " + args + " 2>&1"}, o);
  }
};

TEST_F(PinCli, PinWritesManifestAndCheckFindsNoDrift) {
  auto r = anchor("pin pilot.yaml");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("wrote manifest.json"), std::string::npos) << r.out;
  std::ifstream f(dir / "manifest.json");
  nlohmann::json m = nlohmann::json::parse(f);
  EXPECT_EQ(m["format"], "anchor.manifest/v1");
  EXPECT_EQ(m["data"]["train"]["files"].size(), 3u);

  r = anchor("pin --check manifest.json");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("no drift"), std::string::npos) << r.out;

  // -o elsewhere, --no-cache, --threads.
  r = anchor("pin pilot.yaml -o out/m2.json --no-cache --threads 1");
  EXPECT_NE(r.status, 0) << "out/ does not exist: expected an I/O error\n" << r.out;
  stdfs::create_directories(dir / "out");
  r = anchor("pin pilot.yaml -o out/m2.json --no-cache --threads 1");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f2(dir / "out" / "m2.json");
  nlohmann::json m2 = nlohmann::json::parse(f2);
  EXPECT_FALSE(m2["data"]["train"]["files"][0]["cached"].get<bool>());
  EXPECT_EQ(m2["hashing"]["threads"], 1);
}

TEST_F(PinCli, ChangedDataFileIsDriftExit3AndNamed) {
  ASSERT_EQ(anchor("pin pilot.yaml").status, 0);
  write(dir / "data" / "train-1.bin", "tampered");
  auto r = anchor("pin --check manifest.json");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("data.train data/train-1.bin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WHAT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drifted"), std::string::npos) << r.out;
  // Control: the other shards are not named.
  EXPECT_EQ(r.out.find("train-0.bin"), std::string::npos) << r.out;

  // --json: the same drift as one object on stdout (the summary stays on stderr), same exit code.
  anchor::proc::SpawnOptions o;
  o.cwd = dir.string();
  o.env["ANCHOR_CACHE_DIR"] = (dir / "cache").string();
  o.env["ANCHOR_CONTAINER_DIGEST"] = "";
  auto j = anchor::proc::run_capture({ANCHOR_BINARY, "pin", "--check", "manifest.json", "--json"}, o);
  EXPECT_EQ(j.status, 3) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["manifest"], "manifest.json");
  ASSERT_EQ(doc["drifted"], 1) << doc.dump(2);
  EXPECT_NE(doc["drift"][0]["what"].get<std::string>().find("data/train-1.bin"), std::string::npos) << doc.dump(2);
  EXPECT_NE(doc["drift"][0]["old"], doc["drift"][0]["new"]);
  // Without --check there is no drift to print: a usage error.
  EXPECT_EQ(anchor("pin pilot.yaml --json").status, 2);
}

TEST_F(PinCli, OverridesAreRecordedAndChecked) {
  auto r = anchor("pin pilot.yaml --set data.seq_len=32");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(dir / "manifest.json");
  nlohmann::json m = nlohmann::json::parse(f);
  EXPECT_EQ(m["config"]["effective"]["data"]["seq_len"], 32);
  // --check re-pins with the stored effective config, override included.
  r = anchor("pin --check manifest.json");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST_F(PinCli, GlobMatchingNothingIsExit2) {
  auto r = anchor("pin pilot.yaml --set 'data.train=[\"data/none-*.bin\"]'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("data/none-*.bin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matches no file"), std::string::npos) << r.out;
  EXPECT_FALSE(stdfs::exists(dir / "manifest.json"));
}

TEST_F(PinCli, MissingFileIsExit1AndNamed) {
  auto r = anchor("pin pilot.yaml --set 'data.val=[data/gone.bin]'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("data/gone.bin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ENOENT"), std::string::npos) << r.out;
}

TEST_F(PinCli, ContainerDigestValidationAndPolicy) {
  // Malformed in the config: the config loader rejects it.
  auto r = anchor("pin pilot.yaml --set container.digest=sha256:1234");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("container.digest"), std::string::npos) << r.out;
  // Malformed in the environment: pin rejects it, naming the variable.
  r = anchor("pin pilot.yaml", "sha256:XYZ");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("ANCHOR_CONTAINER_DIGEST"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64 lowercase hex"), std::string::npos) << r.out;
  // Well-formed in the environment: recorded.
  std::string good = "sha256:" + std::string(64, 'd');
  r = anchor("pin pilot.yaml", good);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(dir / "manifest.json");
  EXPECT_EQ(nlohmann::json::parse(f)["container"]["digest"], good);
  r = anchor("pin pilot.yaml --set container.required=true");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("container.required"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
  r = anchor("pin pilot.yaml --set container.required=true --set container.digest=sha256:" + std::string(64, 'e'));
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST_F(PinCli, BadCheckArgumentsAndUsage) {
  auto r = anchor("pin --check nothere.json");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("nothere.json"), std::string::npos) << r.out;
  write(dir / "junk.json", "not json at all");
  r = anchor("pin --check junk.json");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("junk.json"), std::string::npos) << r.out;
  r = anchor("pin");
  EXPECT_EQ(r.status, 2) << r.out;
  r = anchor("pin pilot.yaml --check manifest.json");
  EXPECT_EQ(r.status, 2) << r.out;
}

}  // namespace
