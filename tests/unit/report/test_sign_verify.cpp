// sign_run + verify_envelope on a synthetic run directory: the valid case (the
// negative control for every tamper test) and one test per named failure.
#include <sys/stat.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "anchor/checkpoint/store.hpp"
#include "anchor/error.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/provenance.hpp"
#include "anchor/report/statement.hpp"
#include "run_fixture.hpp"

namespace anchor::report {
namespace {

namespace stdfs = std::filesystem;

using nlohmann::json;
using testing::has_failure;
using testing::joined;
using testing::slurp;
using testing::spit;

class SignVerifyTest : public testing::RunDirTest {
 protected:
  void SetUp() override {
    RunDirTest::SetUp();
    SignResult s = sign_run(run_, priv_);
    EXPECT_EQ(s.envelope_path, envelope());
    EXPECT_EQ(s.key_id, key_id_);
    EXPECT_EQ(s.subjects, kSubjects);
  }

  VerifyResult verify_with(const std::string& pub) { return verify_envelope(envelope(), pub); }

  // Re-signs an arbitrary statement with the run's own key (an attacker who
  // holds the key, or a buggy producer): checks that do not rest on the
  // signature must still catch it.
  void resign(const json& statement) {
    Envelope env = sign_envelope(load_private_key(priv_), kInTotoPayloadType, statement.dump());
    spit(envelope(), envelope_to_json(env));
  }

  json statement() { return json::parse(*base64_decode(envelope_json()["payload"].get<std::string>())); }
};

TEST_F(SignVerifyTest, ValidRunVerifies) {
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_EQ(r.key_id, key_id_);
  EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
  // Every family of check reported as holding.
  std::string checks = joined(r.checks);
  for (const char* what :
       {"signature:", "statement:", "subjects: all 7", "report: report.json", "checkpoints: 1",
        "checkpoint data: every file of the 1", "report/manifests: the 1", "manifest: manifest.json"})
    EXPECT_NE(checks.find(what), std::string::npos) << what << "\n" << checks;
}

TEST_F(SignVerifyTest, StatementNamesTheCommittedOutputsOnly) {
  json st = statement();
  EXPECT_EQ(st["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(st["predicateType"], "https://anchor.dev/pilot-report/v1");
  ASSERT_EQ(st["subject"].size(), kSubjects) << st["subject"].dump();  // the torn .tmp- dir is left out
  EXPECT_EQ(st["subject"][0]["name"], "report.json");
  EXPECT_EQ(st["subject"][0]["digest"]["sha256"], sha256_file(run_ + "/report.json").sha256);
  const std::vector<std::string> rest = {"report.md",           "manifest.json",
                                         "config.json",         "events.jsonl",
                                         "work/reference.json", "checkpoints/step-00000002/manifest.json"};
  for (std::size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(st["subject"][i + 1]["name"], rest[i]);
    EXPECT_EQ(st["subject"][i + 1]["digest"]["sha256"], sha256_file(run_ + "/" + rest[i]).sha256) << rest[i];
  }
  EXPECT_EQ(st["predicate"]["report"], json::parse(slurp(run_ + "/report.json")));
  EXPECT_EQ(st["predicate"]["signer"]["key_id"], key_id_);
  EXPECT_EQ(st["predicate"]["signer"]["algorithm"], "ecdsa-p256-sha256");
  json env = envelope_json();
  EXPECT_EQ(env["payloadType"], "application/vnd.in-toto+json");
  EXPECT_EQ(env["signatures"][0]["keyid"], key_id_) << "one id for the key: the envelope's keyid is the predicate's";
  // report.pub beside it is the signer's public key.
  EXPECT_EQ(slurp(run_ + "/report.pub"), slurp(pub_));
}

TEST_F(SignVerifyTest, WithoutKeyUsesReportPubAndSaysItIsIntegrityOnly) {
  VerifyResult r = verify_with("");
  EXPECT_TRUE(r.ok) << joined(r.failures);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("not WHO signed"), std::string::npos) << r.warnings[0];
  stdfs::remove(run_ + "/report.pub");
  r = verify_with("");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "no-key", "--key")) << joined(r.failures);
}

TEST_F(SignVerifyTest, RunDirectoryPathMeansItsEnvelope) {
  EXPECT_TRUE(verify_envelope(run_, pub_).ok);
  stdfs::remove(envelope());
  VerifyResult r = verify_envelope(run_, pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "unsigned", "not signed")) << joined(r.failures);
  r = verify_envelope(run_ + "/report.json", pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "envelope-schema", "unsigned report")) << joined(r.failures);
}

TEST_F(SignVerifyTest, BadSignature) {
  json env = envelope_json();
  std::string sig = *base64_decode(env["signatures"][0]["sig"].get<std::string>());
  sig[sig.size() / 2] ^= 0x01;  // inside r or s: still DER, no longer valid
  env["signatures"][0]["sig"] = base64_encode(sig);
  write_envelope(env);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "bad-signature")) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "payload-tampered")) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "wrong-key")) << joined(r.failures);
}

TEST_F(SignVerifyTest, WrongKey) {
  auto [other_priv, other_pub] = other_keypair();
  VerifyResult r = verify_with(other_pub);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "wrong-key", key_id_)) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "bad-signature")) << joined(r.failures);
}

TEST_F(SignVerifyTest, TamperedPayload) {
  json env = envelope_json();
  json st = statement();
  st["predicate"]["report"]["verdict"] = "fail";
  env["payload"] = base64_encode(st.dump());
  write_envelope(env);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "payload-tampered", "/verdict")) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "bad-signature")) << joined(r.failures);
}

TEST_F(SignVerifyTest, TamperedPayloadDigest) {
  // The attacker edits a subject digest in the payload instead.
  json env = envelope_json();
  json st = statement();
  st["subject"][kSubjects - 1]["digest"]["sha256"] = std::string(64, 'a');  // the checkpoint's manifest
  env["payload"] = base64_encode(st.dump());
  write_envelope(env);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "payload-tampered", "manifest.json")) << joined(r.failures);
}

TEST_F(SignVerifyTest, SwappedPayloadType) {
  json env = envelope_json();
  env["payloadType"] = "application/json";
  write_envelope(env);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "payload-type", "application/json")) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "payload-type", "changed after signing")) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "bad-signature")) << joined(r.failures);
}

TEST_F(SignVerifyTest, MissingSubjectFile) {
  stdfs::remove(manifest());
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "subject-missing", "checkpoints/step-00000002/manifest.json"))
      << joined(r.failures);
}

// Issue 43.3: the whole step directory gone (retention, a clean-up) is a retired checkpoint: a
// warning of its own, not tampering. The negative control is MissingSubjectFile above: the directory
// there without its signed manifest fails.
TEST_F(SignVerifyTest, AStepDirectoryGoneWholeIsRetired) {
  stdfs::remove_all(stdfs::path(manifest()).parent_path());
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_EQ(r.retired, std::vector<std::string>{"checkpoints/step-00000002"});
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
    return w.rfind("checkpoints/step-00000002 is retired: the whole step directory is gone", 0) == 0;
  })) << joined(r.warnings);
}

TEST_F(SignVerifyTest, ChangedSubjectFile) {
  std::string text = slurp(run_ + "/report.json");
  text.replace(text.find("\"pass\""), 6, "\"PASS\"");
  spit(run_ + "/report.json", text);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "subject-changed", "report.json")) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "report-mismatch", "/verdict")) << joined(r.failures);
  EXPECT_FALSE(has_failure(r.failures, "bad-signature")) << joined(r.failures);
}

TEST_F(SignVerifyTest, ChangedManifestAlsoBreaksCommittedAndReport) {
  spit(manifest(), "{\"files\": []}\n");
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "subject-changed", "checkpoints/step-00000002/manifest.json"))
      << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "checkpoint-mismatch", "COMMITTED")) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "checkpoint-mismatch", "report.json lists")) << joined(r.failures);
}

TEST_F(SignVerifyTest, RunManifestMustBeTheOneTheReportRecords) {
  spit(run_ + "/manifest.json", slurp(run_ + "/manifest.json") + "\n");
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "manifest-mismatch", "manifest.json: sha256 on disk")) << joined(r.failures);
  stdfs::remove(run_ + "/manifest.json");
  r = verify_with(pub_);
  EXPECT_TRUE(has_failure(r.failures, "manifest-mismatch", "missing")) << joined(r.failures);
}

// What a later reader trusts is covered: a changed byte in a retained
// checkpoint's data, a deleted optimizer file or an edited state.json fails
// verify (exit 3 in the CLI) naming the file, through the signed manifest.
TEST_F(SignVerifyTest, CheckpointDataChangedAfterSigningIsNamedPerFile) {
  const std::string ck = run_ + "/checkpoints/step-00000002";
  std::string model = slurp(ck + "/model.safetensors");
  model[model.size() - 3] ^= 0x01;  // one bit of one weight
  spit(ck + "/model.safetensors", model);
  stdfs::remove(ck + "/optimizer.safetensors");
  spit(ck + "/state.json", slurp(ck + "/state.json") + " ");
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(has_failure(r.failures, "checkpoint-data", file)) << file << "\n" << joined(r.failures);
  // The signed manifest itself is untouched: only the data check could see it.
  EXPECT_FALSE(has_failure(r.failures, "subject-changed")) << joined(r.failures);
}

TEST_F(SignVerifyTest, EveryRunFileAReaderTrustsIsASubject) {
  for (const char* name : {"events.jsonl", "config.json", "report.md", "work/reference.json", "manifest.json"}) {
    const std::string path = run_ + "/" + name;
    const std::string before = slurp(path);
    spit(path, before + "\n");
    VerifyResult r = verify_with(pub_);
    EXPECT_FALSE(r.ok) << name;
    EXPECT_TRUE(has_failure(r.failures, "subject-changed", name)) << name << "\n" << joined(r.failures);
    spit(path, before);
    EXPECT_TRUE(verify_with(pub_).ok) << name << " restored";  // the control
  }
  stdfs::remove(run_ + "/events.jsonl");
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(has_failure(r.failures, "subject-missing", "events.jsonl")) << joined(r.failures);
}

TEST_F(SignVerifyTest, ARunFileWrittenAfterSigningIsAWarning) {
  spit(run_ + "/work/late.json", "{}\n");
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("work/late.json is in the run directory but not signed"), std::string::npos)
      << joined(r.warnings);
}

TEST_F(SignVerifyTest, MalformedJson) {
  std::string text = slurp(envelope());
  spit(envelope(), text.substr(0, text.size() / 2));
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.failures.size(), 1u) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "malformed-json")) << joined(r.failures);
}

TEST_F(SignVerifyTest, NoSignatures) {
  json env = envelope_json();
  env["signatures"] = json::array();
  write_envelope(env);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "unsigned")) << joined(r.failures);
}

TEST_F(SignVerifyTest, SignedButMaliciousSubjectPathIsRejected) {
  json st = statement();
  st["subject"].push_back({{"name", "../../etc/passwd"}, {"digest", {{"sha256", std::string(64, '0')}}}});
  resign(st);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "statement-schema", "../../etc/passwd")) << joined(r.failures);
}

TEST_F(SignVerifyTest, SignedButWrongSchemaIsRejected) {
  json st = statement();
  st["_type"] = "https://in-toto.io/Statement/v0.1";
  st["predicateType"] = "https://example.com/other/v1";
  st["predicate"].erase("report");
  resign(st);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "statement-schema", "_type")) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "statement-schema", "predicateType")) << joined(r.failures);
  EXPECT_TRUE(has_failure(r.failures, "statement-schema", "predicate.report")) << joined(r.failures);
}

TEST_F(SignVerifyTest, PredicateKeyIdMustBeTheSigningKey) {
  auto [other_priv, other_pub] = other_keypair();
  json st = statement();
  st["predicate"]["signer"]["key_id"] = key_id(load_public_key(other_pub));
  resign(st);
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "key-id-mismatch")) << joined(r.failures);
}

// Reports signed before 2026-12 name their signer by the older id (SHA-256 of the DER SPKI): they
// still verify; any other id is a mismatch (the test above).
TEST_F(SignVerifyTest, AReportThatNamesItsSignerByTheOlderKeyIdVerifies) {
  json st = statement();
  const std::string legacy = legacy_key_id(load_public_key(pub_));
  ASSERT_NE(legacy, key_id_);
  st["predicate"]["signer"]["key_id"] = legacy;
  resign(st);
  // The provenance names the envelope by digest: made again for this one, as sign_run would have.
  const Key key = load_private_key(priv_);
  spit(run_ + "/provenance.intoto.json",
       envelope_to_json(
           sign_envelope(key, kInTotoPayloadType, build_provenance(st, sha256_file(envelope()).sha256).dump())));
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
}

TEST_F(SignVerifyTest, ReportCheckpointListMustMatchTheManifests) {
  json report = json::parse(slurp(run_ + "/report.json"));
  report["checkpoints"][0]["manifest_sha256"] = std::string(64, 'b');
  spit(run_ + "/report.json", report.dump(2));
  sign_run(run_, priv_);  // a consistent signature over an inconsistent report
  VerifyResult r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "checkpoint-mismatch", "bbbb")) << joined(r.failures);
}

TEST_F(SignVerifyTest, CheckpointDirOutsideTheRunIsTiedByTheReportDigest) {
  // checkpoint.dir configured outside the run directory: a real checkpoint.
  static const std::uint8_t kBytes[16] = {3, 1, 4, 1, 5};
  checkpoint::SaveRequest req;
  req.step = 2;
  req.files.push_back({"model.safetensors", {{"w", checkpoint::DType::U8, {16}, kBytes, 16}}, {}});
  const std::string outside = checkpoint::Store((root_ / "ckpt-outside").string()).save(req).dir;
  json report = json::parse(slurp(run_ + "/report.json"));
  report["checkpoints"].push_back(
      {{"dir", "../ckpt-outside/step-00000002"}, {"manifest_sha256", sha256_file(outside + "/manifest.json").sha256}});
  spit(run_ + "/report.json", report.dump(2));
  sign_run(run_, priv_);
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("outside the run directory"), std::string::npos);
  // Its data changed after signing (the manifest untouched): the files are
  // checked against the manifest report.json ties to the signature.
  const std::string model = slurp(outside + "/model.safetensors");
  std::string flipped = model;
  flipped.back() ^= 0x01;
  spit(outside + "/model.safetensors", flipped);
  r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "checkpoint-data", "../ckpt-outside/step-00000002: model.safetensors"))
      << joined(r.failures);
  spit(outside + "/model.safetensors", model);
  ASSERT_TRUE(verify_with(pub_).ok);
  // Negative control: that manifest changed after signing.
  spit(outside + "/manifest.json", "{\"files\": [1]}\n");
  r = verify_with(pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "checkpoint-mismatch", "../ckpt-outside/step-00000002")) << joined(r.failures);
}

TEST_F(SignVerifyTest, CheckpointCommittedAfterSigningIsAWarningNotASubject) {
  std::string late = run_ + "/checkpoints/step-00000006";
  stdfs::create_directories(late);
  spit(late + "/manifest.json", "{}\n");
  spit(late + "/COMMITTED", sha256_file(late + "/manifest.json").sha256 + "\n");
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("step-00000006"), std::string::npos) << joined(r.warnings);
}

TEST_F(SignVerifyTest, EnvelopeOnlySkipsTheFiles) {
  stdfs::remove(manifest());
  VerifyOptions o;
  o.public_key_path = pub_;
  o.check_files = false;
  VerifyResult r = verify_envelope(envelope(), o);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("--envelope-only"), std::string::npos);
  // Negative control: the same envelope with the files checked fails.
  EXPECT_FALSE(verify_with(pub_).ok);
}

TEST_F(SignVerifyTest, SignRefusesACheckpointWhoseCommitRecordDisagrees) {
  spit(run_ + "/checkpoints/step-00000002/COMMITTED", std::string(64, 'c') + "\n");
  try {
    sign_run(run_, priv_);
    FAIL() << "signed a checkpoint whose COMMITTED disagrees with its manifest";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("COMMITTED"), std::string::npos);
  }
}

TEST_F(SignVerifyTest, SignRefusesAReadableKey) {
  ASSERT_EQ(::chmod(priv_.c_str(), 0644), 0);
  try {
    sign_run(run_, priv_);
    FAIL() << "signed with a 0644 key";
  } catch (const Error& e) {
    EXPECT_EQ(e.hint(), "chmod 600 " + priv_);
  }
}

// Issue 14: a COMMITTED file alone does not make a checkpoint. A step whose
// files no longer match its manifest (COMMITTED still agrees with the
// manifest), or one without manifest.json, is refused by sign_run with the
// store's verification problems, never signed as committed.
TEST_F(SignVerifyTest, SignRefusesACommittedStepThatDoesNotVerify) {
  checkpoint::SaveRequest req;
  static const std::uint8_t kBytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  req.step = 4;
  req.files.push_back({"model.safetensors", {{"w", checkpoint::DType::U8, {8}, kBytes, 8}}, {}});
  const std::string dir4 = checkpoint::Store(run_ + "/checkpoints").save(req).dir;
  {
    std::string bytes = slurp(dir4 + "/model.safetensors");
    bytes.back() ^= 0x01;  // a data byte: the header still parses, the SHA-256 differs
    spit(dir4 + "/model.safetensors", bytes);
  }
  try {
    sign_run(run_, priv_);
    FAIL() << "signed a checkpoint whose files do not match its manifest";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("step-00000004 holds COMMITTED but does not verify"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors: tensor 'w' SHA-256 is"), std::string::npos) << e.what();
  }
  // Only COMMITTED, no manifest.json: the same, not an I/O error about a missing file.
  stdfs::remove_all(dir4);
  stdfs::create_directories(dir4);
  spit(dir4 + "/COMMITTED", std::string(64, 'a') + "\n");
  try {
    sign_run(run_, priv_);
    FAIL() << "signed a step directory without manifest.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    EXPECT_NE(std::string(e.what()).find("manifest.json is missing"), std::string::npos) << e.what();
  }
  // Negative control: without it, the run signs with the one good checkpoint.
  stdfs::remove_all(dir4);
  EXPECT_EQ(sign_run(run_, priv_).subjects, kSubjects);
}

// Review of issue 14: a dangling symlink in work/ made signing (and verify)
// throw an I/O error about listing work/; a symlink to a file elsewhere was
// hashed through; a directory "step-best" holding COMMITTED (not a name the
// store reads) made signing refuse the whole run. None of them is a file
// anchor wrote: not signed, not followed, no refusal.
TEST_F(SignVerifyTest, SymlinksAndStrayNamesInTheRunDirectoryAreNotSigned) {
  stdfs::create_symlink("/nonexistent/anchor-test", run_ + "/work/dangling.json");
  stdfs::create_symlink("/etc/hostname", run_ + "/work/elsewhere.json");
  stdfs::create_directories(run_ + "/checkpoints/step-best");
  spit(run_ + "/checkpoints/step-best/COMMITTED", std::string(64, 'a') + "\n");
  const auto signed_run = sign_run(run_, priv_);
  EXPECT_EQ(signed_run.subjects, kSubjects);
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  // Negative control: a regular file there is signed.
  spit(run_ + "/work/extra.json", "{}");
  EXPECT_EQ(sign_run(run_, priv_).subjects, kSubjects + 1);
}

TEST_F(SignVerifyTest, VerifySaysACommittedStepThatDoesNotVerifyIsNoCheckpoint) {
  std::string late = run_ + "/checkpoints/step-00000006";
  stdfs::create_directories(late);
  spit(late + "/COMMITTED", std::string(64, 'a') + "\n");
  VerifyResult r = verify_with(pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings)
                .find("checkpoints/step-00000006 holds COMMITTED but does not verify "
                      "(manifest.json is missing)"),
            std::string::npos)
      << joined(r.warnings);
}

}  // namespace
}  // namespace anchor::report
