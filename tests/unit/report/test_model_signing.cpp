// The export signed in the OpenSSF Model Signing format (report/model_signing.hpp,
// docs/report.md "The export, signed for model_signing"): the statement as
// model_signing builds it, sign_run writing model.sig, anchor verify checking
// it (controls: another export's statement, another key, a run with no export),
// and model_signing's own command line accepting it and refusing a change
// (tests/interop/verify_model_signing.py, PyPI's model-signing pinned by hash).
#include <gtest/gtest.h>

#include "anchor/error.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/model_signing.hpp"
#include "anchor/report/statement.hpp"
#include "run_fixture.hpp"

namespace anchor::report {
namespace {

using nlohmann::json;
namespace stdfs = std::filesystem;
using testing::has_failure;
using testing::joined;
using testing::sh;
using testing::sh_quote;
using testing::slurp;
using testing::spit;

std::string raw(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(ModelSigning, TheStatementIsModelSigningsFilesSerialization) {
  const std::string b = sha256_hex("b"), slash = sha256_hex("a/c"), dash = sha256_hex("a-c");
  const json st = json::parse(model_signing_statement("export", {{"b", b}, {"a-c", dash}, {"a/c", slash}}).dump());
  EXPECT_EQ(st["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(st["predicateType"], "https://model_signing/signature/v1.0");
  EXPECT_EQ(st["predicate"]["serialization"],
            json({{"method", "files"},
                  {"hash_type", "sha256"},
                  {"allow_symlinks", false},
                  {"ignore_paths", {".git", ".gitattributes", ".github", ".gitignore"}}}));
  // By path component, as Python's PurePosixPath sorts: a/c before a-c (a string sort says otherwise).
  ASSERT_EQ(st["predicate"]["resources"].size(), 3u);
  EXPECT_EQ(st["predicate"]["resources"][0]["name"], "a/c");
  EXPECT_EQ(st["predicate"]["resources"][1]["name"], "a-c");
  EXPECT_EQ(st["predicate"]["resources"][2]["name"], "b");
  EXPECT_EQ(st["predicate"]["resources"][2]["algorithm"], "sha256");
  EXPECT_EQ(st["predicate"]["resources"][2]["digest"], b);
  ASSERT_EQ(st["subject"].size(), 1u);
  EXPECT_EQ(st["subject"][0]["name"], "export");
  EXPECT_EQ(st["subject"][0]["digest"]["sha256"], sha256_hex(raw(slash) + raw(dash) + raw(b)));
  EXPECT_THROW(model_signing_statement("export", {{"x", "not hex"}}), Error);
}

TEST(ModelSigning, TheSigstoreBundleCarriesTheEnvelopeAndTheKeyHint) {
  Envelope env{kInTotoPayloadType, "{\"a\":1}", {{"", "\x30\x01\x02"}}};
  const std::string text = sigstore_bundle_to_json(env, "PEM");
  const json j = json::parse(text);
  EXPECT_EQ(j["mediaType"], "application/vnd.dev.sigstore.bundle.v0.3+json");
  EXPECT_EQ(j["verificationMaterial"]["publicKey"]["hint"], sha256_hex("PEM"));
  EXPECT_EQ(j["verificationMaterial"]["tlogEntries"], json::array());
  const SigstoreBundle back = sigstore_bundle_from_json(text);
  EXPECT_EQ(back.envelope.payload, env.payload);
  EXPECT_EQ(back.envelope.signatures.at(0).sig, env.signatures.at(0).sig);
  EXPECT_EQ(back.key_hint, sha256_hex("PEM"));
  for (const std::string bad : {"not json", "{}", "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\"}"})
    EXPECT_THROW(sigstore_bundle_from_json(bad), Error) << bad;
}

class ModelSignatureTest : public testing::RunDirTest {
 protected:
  void SetUp() override {
    RunDirTest::SetUp();
    stdfs::create_directories(run_ + "/export");
    spit(run_ + "/export/model.safetensors", std::string(4096, '\x11') + "weights");
    spit(run_ + "/export/config.json", "{\"n_layer\": 2}\n");
    spit(run_ + "/export/generation_config.json", "{}\n");
    signed_ = sign_run(run_, priv_);
  }
  std::string sig() const { return run_ + "/model.sig"; }
  json statement() const { return json::parse(sigstore_bundle_from_json(slurp(sig())).envelope.payload); }
  void write_sig(const json& st, const std::string& key) const {
    const Key k = load_private_key(key);
    spit(sig(), sigstore_bundle_to_json(sign_envelope(k, kInTotoPayloadType, st.dump()), public_key_pem(k)));
  }
  SignResult signed_;
};

TEST_F(ModelSignatureTest, SignRunWritesItOverTheSignedExportAndVerifyChecksIt) {
  EXPECT_EQ(signed_.model_signature_path, sig());
  const json st = statement();
  EXPECT_EQ(st["subject"][0]["name"], "export");
  ASSERT_EQ(st["predicate"]["resources"].size(), 3u);
  EXPECT_EQ(st["predicate"]["resources"][2]["name"], "model.safetensors");
  EXPECT_EQ(st["predicate"]["resources"][2]["digest"], sha256_file(run_ + "/export/model.safetensors").sha256);
  EXPECT_EQ(json::parse(slurp(sig()))["verificationMaterial"]["publicKey"]["hint"],
            sha256_hex(slurp(run_ + "/report.pub")));
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.checks).find("model.sig: OpenSSF Model Signing of export/ (3 files)"), std::string::npos)
      << joined(r.checks);
}

TEST_F(ModelSignatureTest, AnotherExportsStatementOrAnotherKeyIsRefused) {
  json st = statement();
  st["predicate"]["resources"][2]["digest"] = std::string(64, 'e');
  write_sig(st, priv_);  // the right key: only the content gives it away
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "model-signature", "does not sign the export/ this report signs"))
      << joined(r.failures);
  write_sig(statement(), other_keypair().first);
  r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "model-signature", "public-key hint")) << joined(r.failures);
  // Missing: a warning. A run with no export and a model.sig: refused.
  stdfs::remove(sig());
  r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("no model.sig beside the report"), std::string::npos) << joined(r.warnings);
  sign_run(run_, priv_);
  const std::string kept = slurp(sig());
  stdfs::remove_all(run_ + "/export");
  sign_run(run_, priv_);
  EXPECT_FALSE(stdfs::exists(sig())) << "signing a run without an export leaves no model.sig";
  spit(sig(), kept);
  r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "model-signature", "the report signs no export/")) << joined(r.failures);
}

// OpenSSF Model Signing's own command line, pinned by hash in requirements/torch2.txt.
TEST_F(ModelSignatureTest, ModelSigningsOwnVerifierAcceptsItAndRefusesAChange) {
  const std::string script = sh_quote(std::string(ANCHOR_SOURCE_DIR) + "/tests/interop/verify_model_signing.py");
  const std::string python = sh_quote(std::string(ANCHOR_SOURCE_DIR) + "/scripts/torch2-python");
  auto ok = sh(python + " " + script + " " + sh_quote(run_) + " " + sh_quote(pub_) + " " + sh_quote(priv_));
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("OK   model_signing verify key accepts"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("OK   one changed byte of model.safetensors refused"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("OK   model_signing's own signature of the export signs the same statement"), std::string::npos)
      << ok.out;
  // The control: a model.sig over another export's statement, signed by the right key, is refused by model_signing too.
  json st = statement();
  st["predicate"]["resources"][2]["digest"] = std::string(64, 'e');
  write_sig(st, priv_);
  auto bad = sh(python + " " + script + " " + sh_quote(run_) + " " + sh_quote(pub_));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("FAIL model_signing verify key refused anchor's export"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace anchor::report
