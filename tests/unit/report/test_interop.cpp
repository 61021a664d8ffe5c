// Independent verification of what sign_run writes: the openssl command line
// and Debian's python3-cryptography, each computing the DSSE PAE itself (no
// anchor code on the verifying side, including base64).
#include <gtest/gtest.h>

#include "anchor/report/statement.hpp"
#include "run_fixture.hpp"

namespace anchor::report {
namespace {

namespace stdfs = std::filesystem;

using nlohmann::json;
using testing::sh;
using testing::sh_quote;
using testing::slurp;
using testing::spit;

constexpr const char* kOpenssl = "/usr/bin/openssl";
constexpr const char* kPython = "/usr/bin/python3";

class InteropTest : public testing::RunDirTest {
 protected:
  void SetUp() override {
    RunDirTest::SetUp();
    sign_run(run_, priv_);
    work_ = (root_ / "interop").string();
    stdfs::create_directories(work_);
  }

  // Decodes standard base64 with the openssl command line.
  std::string openssl_b64_decode(const std::string& b64, const std::string& name) {
    std::string in = work_ + "/" + name + ".b64", out = work_ + "/" + name + ".bin";
    spit(in, b64);
    auto r = sh(std::string(kOpenssl) + " base64 -d -A -in " + sh_quote(in) + " -out " + sh_quote(out));
    EXPECT_EQ(r.status, 0) << r.out;
    return slurp(out);
  }

  // PAE written out by hand from the DSSE protocol text.
  static std::string hand_pae(const std::string& type, const std::string& body) {
    return "DSSEv1 " + std::to_string(type.size()) + " " + type + " " + std::to_string(body.size()) + " " + body;
  }

  proc::RunResult openssl_verify(const std::string& pub, const std::string& message, const std::string& der_sig) {
    spit(work_ + "/pae.bin", message);
    spit(work_ + "/sig.der", der_sig);
    return sh(std::string(kOpenssl) + " dgst -sha256 -verify " + sh_quote(pub) + " -signature " +
              sh_quote(work_ + "/sig.der") + " " + sh_quote(work_ + "/pae.bin"));
  }

  proc::RunResult python_verify(const std::string& env, const std::string& pub) {
    return sh(std::string(kPython) + " " + sh_quote(std::string(ANCHOR_SOURCE_DIR) + "/tests/interop/verify_dsse.py") +
              " " + sh_quote(env) + " " + sh_quote(pub));
  }

  std::string work_;
};

TEST_F(InteropTest, OpensslCommandLineVerifiesTheSignatureOverPae) {
  json env = envelope_json();
  std::string payload = openssl_b64_decode(env["payload"].get<std::string>(), "payload");
  std::string sig = openssl_b64_decode(env["signatures"][0]["sig"].get<std::string>(), "sig");
  std::string message = hand_pae(env["payloadType"].get<std::string>(), payload);
  ASSERT_EQ(message.rfind("DSSEv1 28 application/vnd.in-toto+json ", 0), 0u);

  auto ok = openssl_verify(pub_, message, sig);
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("Verified OK"), std::string::npos) << ok.out;

  // Negative controls: one byte of the message changed; another key.
  std::string changed = message;
  changed[changed.size() - 2] ^= 0x01;
  auto bad = openssl_verify(pub_, changed, sig);
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("Verification failure"), std::string::npos) << bad.out;
  auto [other_priv, other_pub] = other_keypair();
  EXPECT_NE(openssl_verify(other_pub, message, sig).status, 0);
  // Signing the bare payload (no PAE) would be a different message: not what we signed.
  EXPECT_NE(openssl_verify(pub_, payload, sig).status, 0);
}

TEST_F(InteropTest, PythonCryptographyVerifiesTheEnvelope) {
  auto ok = python_verify(envelope(), pub_);
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("OK key " + key_id_ + ", " + std::to_string(kSubjects) + " subjects"), std::string::npos)
      << ok.out;
  EXPECT_NE(ok.out.find(sha256_file(run_ + "/report.json").sha256 + " report.json"), std::string::npos) << ok.out;

  // Negative controls: wrong key; tampered payload.
  auto [other_priv, other_pub] = other_keypair();
  auto wrong = python_verify(envelope(), other_pub);
  EXPECT_EQ(wrong.status, 1) << wrong.out;
  EXPECT_NE(wrong.out.find("FAIL signature"), std::string::npos) << wrong.out;

  json env = envelope_json();
  std::string payload = openssl_b64_decode(env["payload"].get<std::string>(), "payload");
  payload.replace(payload.find("\"pass\""), 6, "\"fail\"");
  spit(work_ + "/payload.bin", payload);
  auto enc = sh(std::string(kOpenssl) + " base64 -A -in " + sh_quote(work_ + "/payload.bin"));
  ASSERT_EQ(enc.status, 0);
  env["payload"] = enc.out.substr(0, enc.out.find_last_not_of("\n") + 1);
  spit(work_ + "/tampered.json", env.dump());
  auto tampered = python_verify(work_ + "/tampered.json", pub_);
  EXPECT_EQ(tampered.status, 1) << tampered.out;
}

}  // namespace
}  // namespace anchor::report
