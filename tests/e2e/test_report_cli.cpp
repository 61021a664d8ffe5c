// `anchor keygen` and `anchor verify` driven as a user would: the real binary,
// its exit codes and what it prints. The run directory is signed with the
// library (the pilot's sign_run), then tampered with.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "anchor/report/dsse.hpp"
#include "anchor/report/statement.hpp"
#include "../unit/report/run_fixture.hpp"

namespace anchor::report {
namespace {

namespace stdfs = std::filesystem;

using nlohmann::json;
using testing::file_mode;
using testing::sh;
using testing::sh_quote;
using testing::slurp;
using testing::spit;

std::string anchor_cmd(const std::string& args) { return sh_quote(ANCHOR_BINARY) + " " + args; }

class ReportCliTest : public testing::RunDirTest {
 protected:
  void SetUp() override {
    RunDirTest::SetUp();
    sign_run(run_, priv_);
  }
  proc::RunResult verify(const std::string& extra = {}) {
    return sh(anchor_cmd("verify " + sh_quote(envelope()) + " --key " + sh_quote(pub_) + " " + extra));
  }
  void expect_fails_with(const std::string& name, const std::string& what = {}) {
    auto r = verify();
    EXPECT_EQ(r.status, 3) << r.out;
    EXPECT_NE(r.out.find("FAIL  " + name + ":"), std::string::npos) << r.out;
    if (!what.empty()) {
      EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("verification FAILED"), std::string::npos) << r.out;
  }
};

TEST_F(ReportCliTest, ValidReportVerifies) {
  auto r = verify();
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("verified (key " + key_id_ + ")"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  // The run directory works too, and without --key report.pub is used with a warning.
  auto d = sh(anchor_cmd("verify " + sh_quote(run_)));
  EXPECT_EQ(d.status, 0) << d.out;
  EXPECT_NE(d.out.find("warn  no --key given"), std::string::npos) << d.out;
  // --json: one object on stdout, the same verdict and exit code.
  auto j = proc::run_capture({ANCHOR_BINARY, "verify", envelope(), "--key", pub_, "--json"});
  EXPECT_EQ(j.status, 0) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["verified"].get<bool>());
  EXPECT_EQ(doc["key_id"], key_id_);
  EXPECT_FALSE(doc["checks"].empty());
  EXPECT_TRUE(doc["failures"].empty());
}

TEST_F(ReportCliTest, BadSignatureExits3) {
  json env = envelope_json();
  std::string sig = *base64_decode(env["signatures"][0]["sig"].get<std::string>());
  sig[sig.size() / 2] ^= 0x40;
  env["signatures"][0]["sig"] = base64_encode(sig);
  write_envelope(env);
  expect_fails_with("bad-signature");
}

TEST_F(ReportCliTest, WrongKeyExits3) {
  auto [other_priv, other_pub] = other_keypair();
  auto r = sh(anchor_cmd("verify " + sh_quote(envelope()) + " --key " + sh_quote(other_pub)));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("FAIL  wrong-key:"), std::string::npos) << r.out;
}

TEST_F(ReportCliTest, TamperedPayloadExits3) {
  json env = envelope_json();
  json st = json::parse(*base64_decode(env["payload"].get<std::string>()));
  st["predicate"]["report"]["losses"][0] = 1.0;
  env["payload"] = base64_encode(st.dump());
  write_envelope(env);
  expect_fails_with("payload-tampered", "/losses/0");
  auto j = proc::run_capture({ANCHOR_BINARY, "verify", envelope(), "--key", pub_, "--json"});
  EXPECT_EQ(j.status, 3) << j.out;
  const auto doc = json::parse(j.out);
  EXPECT_FALSE(doc["verified"].get<bool>());
  ASSERT_FALSE(doc["failures"].empty());
  EXPECT_NE(doc["failures"].dump().find("payload-tampered"), std::string::npos) << doc.dump(2);
}

TEST_F(ReportCliTest, SwappedPayloadTypeExits3) {
  json env = envelope_json();
  env["payloadType"] = "application/vnd.dsse+json";
  write_envelope(env);
  expect_fails_with("payload-type", "application/vnd.dsse+json");
}

TEST_F(ReportCliTest, MissingSubjectExits3) {
  stdfs::remove(manifest());
  expect_fails_with("subject-missing", "checkpoints/step-00000002/manifest.json");
}

TEST_F(ReportCliTest, ChangedSubjectExits3) {
  spit(manifest(), slurp(manifest()) + " ");
  expect_fails_with("subject-changed", "checkpoints/step-00000002/manifest.json");
}

TEST_F(ReportCliTest, MalformedJsonExits3) {
  spit(envelope(), "{\"payloadType\": \"application/vnd.in-toto+json\", ");
  expect_fails_with("malformed-json");
}

TEST_F(ReportCliTest, UnsignedRunExits3) {
  stdfs::remove(envelope());
  auto r = sh(anchor_cmd("verify " + sh_quote(run_)));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("FAIL  unsigned:"), std::string::npos) << r.out;
}

TEST_F(ReportCliTest, UsageErrorsExit2) {
  EXPECT_EQ(sh(anchor_cmd("verify")).status, 2);
  EXPECT_EQ(sh(anchor_cmd("verify " + sh_quote(envelope()) + " --bogus")).status, 2);
  EXPECT_EQ(sh(anchor_cmd("keygen")).status, 2);
}

TEST_F(ReportCliTest, KeygenPrintsTheKeyIdAndRefusesToOverwrite) {
  std::string dir = (root_ / "newkeys").string();
  auto r = proc::run_capture({ANCHOR_BINARY, "keygen", "-o", dir});
  ASSERT_EQ(r.status, 0);
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_TRUE(is_sha256_hex(id)) << r.out;
  EXPECT_EQ(file_mode(dir), 0700u);
  EXPECT_EQ(file_mode(dir + "/anchor.key"), 0600u);
  EXPECT_EQ(file_mode(dir + "/anchor.pub") & ~0644u, 0u);
  // The id securesystemslib gives the key (docs/report.md, "Key id", whose shell line this is).
  auto sslib =
      sh("printf '{\"keytype\":\"ecdsa\",\"keyval\":{\"public\":\"%s\\n\"},\"scheme\":\"ecdsa-sha2-nistp256\"}' "
         "\"$(cat " +
         sh_quote(dir + "/anchor.pub") + ")\" | /usr/bin/sha256sum");
  ASSERT_EQ(sslib.status, 0) << sslib.out;
  EXPECT_EQ(sslib.out.substr(0, 64), id);

  std::string before = slurp(dir + "/anchor.key");
  auto again = sh(anchor_cmd("keygen -o " + sh_quote(dir)));
  EXPECT_EQ(again.status, 2) << again.out;
  EXPECT_NE(again.out.find("already exists"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
  EXPECT_EQ(slurp(dir + "/anchor.key"), before);
  auto forced = proc::run_capture({ANCHOR_BINARY, "keygen", "-o", dir, "--force"});
  EXPECT_EQ(forced.status, 0);
  EXPECT_NE(forced.out.substr(0, 64), id);
  // --json: the key id and where the keys are, as one object.
  auto j = proc::run_capture({ANCHOR_BINARY, "keygen", "-o", dir, "--force", "--json"});
  ASSERT_EQ(j.status, 0) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(is_sha256_hex(doc["key_id"].get<std::string>())) << j.out;
  EXPECT_EQ(doc["private_key"], std::filesystem::absolute(dir + "/anchor.key").string());
  EXPECT_EQ(doc["public_key"], std::filesystem::absolute(dir + "/anchor.pub").string());
  EXPECT_FALSE(doc["encrypted"].get<bool>());
}

TEST_F(ReportCliTest, KeygenWithPassphraseFileEncryptsAndSignsAfterwards) {
  std::string pass = (root_ / "pass.txt").string();
  spit(pass, "s3cret passphrase\n");
  std::string key = (root_ / "enc.key").string();
  auto r = proc::run_capture({ANCHOR_BINARY, "keygen", "--private", key, "--passphrase-file", pass});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(slurp(key).rfind("-----BEGIN ENCRYPTED PRIVATE KEY-----", 0), 0u);
  EXPECT_TRUE(stdfs::exists((root_ / "enc.pub").string()));
  // The pilot's signing path with the passphrase file, then verify with the CLI.
  SignOptions so;
  so.passphrase_file = pass;
  sign_run(run_, key, so);
  auto v = sh(anchor_cmd("verify " + sh_quote(envelope()) + " --key " + sh_quote((root_ / "enc.pub").string())));
  EXPECT_EQ(v.status, 0) << v.out;
  // Negative control: the old key no longer matches the re-signed report.
  EXPECT_EQ(verify().status, 3);
}

}  // namespace
}  // namespace anchor::report
