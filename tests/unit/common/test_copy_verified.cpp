// fs::copy_verified (the pilot's copy_off stage, docs/models.md "Copy off the
// node"): every file arrives with its digest, the destination is published
// whole or not at all, and the read-back check fails on one changed byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../../support/run_anchor.hpp"
#include "anchor/common/copy_verified.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"

namespace {

using namespace anchor;
namespace stdfs = std::filesystem;

struct Source {
  std::vector<fs::KnownFile> files;
};

Source write_source(const std::string& dir) {
  stdfs::create_directories(dir);
  Source s;
  const std::vector<std::pair<std::string, std::string>> content = {
      {"model.safetensors", std::string(9u << 20, '\x5a') + "tail"},  // over two 4 MiB chunks
      {"config.json", "{\"n_layer\": 2}\n"},
      {"empty", ""}};
  for (const auto& [name, bytes] : content) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    s.files.push_back({name, bytes.size(), sha256_hex(bytes), ""});
  }
  return s;
}

std::vector<std::string> names_in(const stdfs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : stdfs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CopyVerified, EveryFileArrivesWithItsDigest) {
  anchor::testing::TempDir t("copy");
  const auto src = write_source(t.str("src"));
  stdfs::create_directories(t.path() / "share");
  const auto r = fs::copy_verified(t.str("src"), src.files, t.str("share/run-1"));
  EXPECT_EQ(r.bytes, (9u << 20) + 4 + 15);
  EXPECT_GT(r.copy_s, 0);
  for (const auto& f : src.files) EXPECT_EQ(sha256_file(t.str("share/run-1/" + f.name)).sha256, f.sha256) << f.name;
  EXPECT_EQ(names_in(t.path() / "share"), std::vector<std::string>{"run-1"});  // no temporary left
}

TEST(CopyVerified, ADestinationThatIsNotThereOrIsTakenIsRefused) {
  anchor::testing::TempDir t("copy");
  const auto src = write_source(t.str("src"));
  try {
    fs::copy_verified(t.str("src"), src.files, t.str("not-mounted/run-1"));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a directory"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("mount"), std::string::npos) << e.hint();
  }
  EXPECT_FALSE(stdfs::exists(t.path() / "not-mounted"));  // never created
  stdfs::create_directories(t.path() / "share/run-1");
  std::ofstream(t.str("share/run-1/theirs")) << "kept";
  EXPECT_THROW(fs::copy_verified(t.str("src"), src.files, t.str("share/run-1")), Error);
  EXPECT_EQ(names_in(t.path() / "share/run-1"), std::vector<std::string>{"theirs"});
  EXPECT_EQ(names_in(t.path() / "share"), std::vector<std::string>{"run-1"});
}

TEST(CopyVerified, AFailedWriteOrAChangedSourceLeavesNothing) {
  anchor::testing::TempDir t("copy");
  const auto src = write_source(t.str("src"));
  stdfs::create_directories(t.path() / "share");
  fs::FaultInjectingFs faulty;
  faulty.fail_on(fs::Op::kFsync, 2, EIO);
  EXPECT_THROW(fs::copy_verified(t.str("src"), src.files, t.str("share/run-1"), faulty), Error);
  EXPECT_TRUE(names_in(t.path() / "share").empty());
  // A source that is not the file recorded (changed after the export) is not copied.
  auto wrong = src.files;
  wrong[1].sha256 = std::string(64, '0');
  try {
    fs::copy_verified(t.str("src"), wrong, t.str("share/run-1"));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("config.json is not the file recorded"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(names_in(t.path() / "share").empty());
  // A name that is a path is refused before anything is written.
  wrong = src.files;
  wrong[0].name = "../escape";
  EXPECT_THROW(fs::copy_verified(t.str("src"), wrong, t.str("share/run-1")), Error);
  EXPECT_TRUE(names_in(t.path() / "share").empty());
}

TEST(CopyVerified, TheReadBackCheckFindsOneChangedByte) {
  anchor::testing::TempDir t("copy");
  const auto src = write_source(t.str("src"));
  stdfs::create_directories(t.path() / "share");
  fs::copy_verified(t.str("src"), src.files, t.str("share/run-1"));
  EXPECT_NO_THROW(fs::verify_files(t.str("share/run-1"), src.files));
  {
    std::fstream f(t.str("share/run-1/model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5u << 20);
    f.put('\x00');
  }
  try {
    fs::verify_files(t.str("share/run-1"), src.files);
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("model.safetensors does not match what was copied"), std::string::npos)
        << e.what();
  }
}

// Storage that loses a byte between the write and the read-back: a file
// system seam that overwrites the first byte of the named file when it is fsynced.
class CorruptingFs : public fs::FileSystem {
 public:
  explicit CorruptingFs(std::string victim) : victim_(std::move(victim)) {}
  void fsync(int fd, const std::string& path) override {
    if (stdfs::path(path).filename() == victim_) {
      const char c = 'X';  // config.json begins with '{' (opened write-only: no read here)
      ASSERT_EQ(::pwrite(fd, &c, 1, 0), 1);
    }
    fs::FileSystem::fsync(fd, path);
  }

 private:
  std::string victim_;
};

TEST(CopyVerified, ACopyThatDoesNotReadBackIsNeverPublished) {
  anchor::testing::TempDir t("copy");
  const auto src = write_source(t.str("src"));
  stdfs::create_directories(t.path() / "share");
  CorruptingFs corrupting("config.json");
  try {
    fs::copy_verified(t.str("src"), src.files, t.str("share/run-1"), corrupting);
    FAIL() << "expected the read-back to fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("config.json does not match what was copied"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("was not made"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(names_in(t.path() / "share").empty());  // neither run-1 nor a temporary
  // The control: the same copy through the real file system is published.
  EXPECT_NO_THROW(fs::copy_verified(t.str("src"), src.files, t.str("share/run-1")));
  EXPECT_EQ(names_in(t.path() / "share"), std::vector<std::string>{"run-1"});
}

}  // namespace

// Nested names (a bundle's inputs tree) get their directories made, each file
// may come from its own source, and a name that would leave the directory is
// refused before anything is written.
TEST(CopyVerified, NestedNamesAndOwnSourcesArriveAndEscapingNamesAreRefused) {
  anchor::testing::TempDir t("copy");
  stdfs::create_directories(t.path() / "elsewhere");
  std::ofstream(t.str("elsewhere/shard.bin"), std::ios::binary) << "tokens";
  std::vector<fs::KnownFile> files = {
      {"inputs/tree/data/shard.bin", 6, sha256_hex("tokens"), t.str("elsewhere/shard.bin")},
      {"inputs/abs/x/shard.bin", 6, sha256_hex("tokens"), t.str("elsewhere/shard.bin")}};
  fs::copy_verified(t.str("unused"), files, t.str("bundle"));
  EXPECT_EQ(sha256_file(t.str("bundle/inputs/tree/data/shard.bin")).sha256, sha256_hex("tokens"));
  EXPECT_EQ(sha256_file(t.str("bundle/inputs/abs/x/shard.bin")).sha256, sha256_hex("tokens"));
  for (const std::string bad : {"../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "a/", ""}) {
    std::vector<fs::KnownFile> one = {{bad, 6, sha256_hex("tokens"), t.str("elsewhere/shard.bin")}};
    try {
      fs::copy_verified(t.str("unused"), one, t.str("escape"));
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << bad;
      EXPECT_NE(std::string(e.what()).find("not a relative path"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(stdfs::exists(t.path() / "escape")) << bad;
  }
  EXPECT_EQ(names_in(t.path()), (std::vector<std::string>{"bundle", "elsewhere"}));
}
