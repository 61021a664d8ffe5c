// SLSA Provenance v1 beside the report (report/provenance.hpp): what it says
// of a run, that sign_run writes it and verify checks it, and the ways a
// provenance that is not this run's is caught. The ecosystem's own verifiers
// check it too (tests/interop/verify_attestation.py, run below).
#include <gtest/gtest.h>

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
using testing::sh;
using testing::sh_quote;
using testing::slurp;
using testing::spit;

const std::string kHexA(64, 'a'), kHexB(64, 'b'), kHexC(64, 'c'), kHexE(64, 'e');

// A report statement as build_statement makes it, around a manifest with every
// part the provenance reads.
json rich_statement() {
  json manifest = {
      {"model",
       {{"files",
         {{{"role", "weights"},
           {"path", "model.safetensors"},
           {"resolved", "/m/model.safetensors"},
           {"size", 1024},
           {"sha256", kHexA}}}}}},
      {"data",
       {{"train",
         {{"files",
           {{{"path", "shards/a b.bin"}, {"resolved", "/d/shards/a b.bin"}, {"size", 8}, {"sha256", kHexB}}}}}},
        {"val", {{"files", json::array()}}}}},
      {"seeds", {{"root", 1234}, {"init", 5}, {"data", 16120225672212442586ULL}, {"per_rank", {9007199254740993ULL}}}},
      {"dependencies",
       {{"libtorch", "1.13.1"},
        {"cuda_runtime", "none"},
        {"executable", {{"path", "/opt/anchor/bin/anchor-torch"}, {"sha256", kHexC}}},
        {"shared_libraries",
         {{{"path", "/usr/lib/libtorch_cpu.so"}, {"sha256", kHexE}},
          {{"path", "/gone/lib\xff.so"}, {"sha256", nullptr}, {"deleted", true}}}}}},
      {"program",
       {{"sources", {{{"path", "train.py"}, {"sha256", kHexA}}}},
        {"interpreter", {{"path", "/usr/bin/python3.11"}, {"sha256", kHexB}}},
        {"python",
         {{"distributions",
           {{{"name", "Foo_Bar.baz"}, {"version", "1.0+cpu"}, {"record_sha256", kHexC}, {"pinned_by", "RECORD"}}}}}}}},
      {"container", {{"digest", "sha256:" + kHexE}, {"source", "env"}}},
  };
  json report = {{"run_id", "tiny-20261203-120000-abcd"},
                 {"created_at", "2026-12-03T12:00:00.123Z"},
                 {"finished_at", "2026-12-03T12:01:00.456Z"},
                 {"anchor", {{"version", "0.1.0"}, {"git_commit", "abc123"}}},
                 {"config", {{"run", {{"seed", 1234}}}, {"train", {{"total_steps", 9007199254740992LL}}}}},
                 {"config_digest", kHexB},
                 {"device", "cpu"},
                 {"manifest", manifest},
                 {"manifest_sha256", kHexA}};
  return {{"_type", kStatementType},
          {"subject", {{{"name", "report.json"}, {"digest", {{"sha256", kHexA}}}}}},
          {"predicateType", kPredicateType},
          {"predicate", {{"report", report}, {"signer", {{"key_id", kHexA}, {"algorithm", "ecdsa-p256-sha256"}}}}}};
}

// The resolved dependency whose name or uri is `id`, or null.
json dependency(const json& provenance, const std::string& id) {
  for (const auto& d : provenance["predicate"]["buildDefinition"]["resolvedDependencies"])
    if (d.value("name", "") == id || d.value("uri", "") == id) return d;
  return nullptr;
}

TEST(Provenance, DescribesTheRunFromItsReportStatement) {
  const json st = rich_statement();
  const json p = json::parse(build_provenance(st, kHexC).dump());
  EXPECT_EQ(p["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(p["predicateType"], "https://slsa.dev/provenance/v1");
  EXPECT_EQ(p["subject"], st["subject"]);
  const json& bd = p["predicate"]["buildDefinition"];
  EXPECT_EQ(bd["buildType"], "https://anchor.dev/pilot/v1");
  EXPECT_EQ(bd["externalParameters"]["command"], "anchor pilot");
  EXPECT_EQ(bd["externalParameters"]["config"]["run"], st["predicate"]["report"]["config"]["run"]);
  EXPECT_EQ(bd["externalParameters"]["config_digest"], kHexB);
  EXPECT_EQ(bd["internalParameters"]["seeds"]["root"], 1234);
  // Above 2^53 a double (protobuf's Struct) would round them: decimal strings, exact. 2^53 itself is exact.
  EXPECT_EQ(bd["internalParameters"]["seeds"]["data"], "16120225672212442586");
  EXPECT_EQ(bd["internalParameters"]["seeds"]["per_rank"][0], "9007199254740993");
  EXPECT_EQ(bd["externalParameters"]["config"]["train"]["total_steps"], 9007199254740992LL);
  EXPECT_EQ(bd["internalParameters"]["manifest_sha256"], kHexA);

  // Inputs by digest, named as the config wrote them; where the node found them is not in it.
  json model = dependency(p, "model.safetensors");
  ASSERT_FALSE(model.is_null()) << bd.dump(2);
  EXPECT_FALSE(model.contains("uri"));
  EXPECT_EQ(model["digest"]["sha256"], kHexA);
  EXPECT_EQ(model["annotations"]["input"], "model weights");
  EXPECT_EQ(model["annotations"]["size"], 1024);
  json shard = dependency(p, "shards/a b.bin");
  ASSERT_FALSE(shard.is_null());
  EXPECT_FALSE(shard.contains("uri"));
  EXPECT_EQ(shard["annotations"]["input"], "data train");
  EXPECT_EQ(dependency(p, "train.py")["annotations"]["input"], "program source");
  EXPECT_EQ(dependency(p, "python3.11")["digest"]["sha256"], kHexB);
  json dist = dependency(p, "pkg:pypi/foo-bar-baz@1.0%2Bcpu");
  ASSERT_FALSE(dist.is_null()) << bd.dump(2);
  EXPECT_EQ(dist["annotations"]["digest_of"], "RECORD");
  EXPECT_EQ(dependency(p, "container image")["digest"]["sha256"], kHexE);
  EXPECT_EQ(dependency(p, "libtorch_cpu.so")["digest"]["sha256"], kHexE);
  // A mapped library removed from disk: named, no digest invented; a byte that is not UTF-8 shown as \xff.
  json gone = dependency(p, "lib\\xff.so");
  ASSERT_FALSE(gone.is_null());
  EXPECT_FALSE(gone.contains("digest"));
  EXPECT_TRUE(gone["annotations"]["deleted"].get<bool>());
  EXPECT_FALSE(dependency(p, "pkg:generic/libtorch@1.13.1").is_null());
  EXPECT_TRUE(dependency(p, "pkg:generic/cuda_runtime@none").is_null()) << "a library not loaded is not a dependency";

  const json& rd = p["predicate"]["runDetails"];
  EXPECT_EQ(rd["builder"]["id"], "https://anchor.dev/builder/anchor");
  EXPECT_EQ(rd["builder"]["version"]["anchor_version"], "0.1.0");
  EXPECT_EQ(rd["builder"]["version"]["anchor_git_commit"], "abc123");
  EXPECT_EQ(rd["builder"]["builderDependencies"][0]["name"], "anchor-torch");
  // No host path anywhere in what the provenance says the run used (issue 43, item 10).
  for (const char* host : {"/m/", "/d/shards", "/usr/", "/opt/", "/gone/", "file://"})
    EXPECT_EQ(p["predicate"].dump().find(host), std::string::npos) << host;
  EXPECT_EQ(rd["metadata"]["invocationId"], "tiny-20261203-120000-abcd");
  EXPECT_EQ(rd["metadata"]["startedOn"], "2026-12-03T12:00:00.123Z");
  EXPECT_EQ(rd["metadata"]["finishedOn"], "2026-12-03T12:01:00.456Z");
  ASSERT_EQ(rd["byproducts"].size(), 1u);
  EXPECT_EQ(rd["byproducts"][0]["name"], "report.intoto.json");
  EXPECT_EQ(rd["byproducts"][0]["digest"]["sha256"], kHexC);
}

TEST(Provenance, AReproductionAndAnUnpinnedRunSayOnlyWhatTheyHold) {
  json st = rich_statement();
  st["predicate"]["report"]["reproduces"] = {{"report", "/old/report.intoto.json"}};
  EXPECT_EQ(build_provenance(st, kHexC)["predicate"]["buildDefinition"]["externalParameters"]["command"],
            "anchor reproduce");
  st["predicate"]["report"].erase("manifest");  // a pilot refused before its pin
  const json p = json::parse(build_provenance(st, kHexC).dump());
  EXPECT_TRUE(p["predicate"]["buildDefinition"]["resolvedDependencies"].empty());
  EXPECT_FALSE(p["predicate"]["buildDefinition"]["internalParameters"].contains("seeds"));
  EXPECT_FALSE(p["predicate"]["runDetails"]["builder"].contains("builderDependencies"));
  // Hostile shapes are skipped, never dereferenced.
  st["predicate"]["report"]["manifest"] = {{"model", 7}, {"data", {{"train", "x"}}}, {"dependencies", json::array()}};
  EXPECT_NO_THROW(build_provenance(st, kHexC));
  EXPECT_THROW(build_provenance(json::object(), kHexC), Error);
  EXPECT_THROW(build_provenance(json{{"subject", json::array()}, {"predicate", {{"report", 1}}}}, kHexC), Error);
}

class ProvenanceSignTest : public testing::RunDirTest {
 protected:
  void SetUp() override {
    RunDirTest::SetUp();
    signed_ = sign_run(run_, priv_);
  }
  std::string provenance() const { return run_ + "/provenance.intoto.json"; }
  json payload(const std::string& envelope_path) const {
    return json::parse(*base64_decode(json::parse(slurp(envelope_path))["payload"].get<std::string>()));
  }
  // A provenance envelope over `statement`, signed with `key`.
  void write_provenance(const json& statement, const std::string& key) const {
    spit(provenance(), envelope_to_json(sign_envelope(load_private_key(key), kInTotoPayloadType, statement.dump())));
  }
  SignResult signed_;
};

TEST_F(ProvenanceSignTest, SignRunWritesItAndVerifyChecksIt) {
  EXPECT_EQ(signed_.provenance_path, provenance());
  const json p = payload(provenance());
  EXPECT_EQ(p["predicateType"], "https://slsa.dev/provenance/v1");
  EXPECT_EQ(p["subject"], payload(envelope())["subject"]);
  EXPECT_EQ(p["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"], sha256_file(envelope()).sha256);
  const Envelope env = envelope_from_json(slurp(provenance()));
  EXPECT_TRUE(verify_envelope_signature(env, load_public_key(pub_)));
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.checks).find("provenance.intoto.json: SLSA Provenance v1 of this report"), std::string::npos)
      << joined(r.checks);
}

TEST_F(ProvenanceSignTest, OneChangedFieldIsNotThisRunsProvenance) {
  json p = payload(provenance());
  p["predicate"]["buildDefinition"]["externalParameters"]["config_digest"] = kHexE;
  write_provenance(p, priv_);  // signed by the right key: only the content gives it away
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_failure(r.failures, "provenance", "/predicate/buildDefinition/externalParameters"))
      << joined(r.failures);
}

TEST_F(ProvenanceSignTest, AnotherKeysOrAnotherEnvelopesProvenanceIsRefused) {
  const json p = payload(provenance());
  write_provenance(p, other_keypair().first);
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "provenance", "does not verify with key " + key_id_)) << joined(r.failures);
  // The report signed again (a new envelope, the same statement): the old provenance names the old envelope.
  write_provenance(p, priv_);
  ASSERT_TRUE(verify_envelope(envelope(), pub_).ok);
  spit(envelope(),
       envelope_to_json(sign_envelope(load_private_key(priv_), kInTotoPayloadType, payload(envelope()).dump())));
  r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "provenance", "/predicate/runDetails/byproducts/0/digest/sha256"))
      << joined(r.failures);
}

TEST_F(ProvenanceSignTest, MissingIsAWarningAndUncheckedWhenTheReportFails) {
  stdfs::remove(provenance());
  VerifyResult r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(r.ok) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("no provenance.intoto.json"), std::string::npos) << joined(r.warnings);
  // Signing again writes it again; then a changed report fails the report, and the provenance is not judged.
  sign_run(run_, priv_);
  spit(run_ + "/report.md", "changed\n");
  r = verify_envelope(envelope(), pub_);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(has_failure(r.failures, "provenance")) << joined(r.failures);
  EXPECT_NE(joined(r.warnings).find("provenance.intoto.json not checked"), std::string::npos) << joined(r.warnings);
  // Not a regular file: refused, never followed.
  stdfs::remove(provenance());
  stdfs::create_symlink(envelope(), provenance());
  sign_run(run_, priv_);  // the link is removed, a real file written
  EXPECT_EQ(stdfs::symlink_status(provenance()).type(), stdfs::file_type::regular);
  stdfs::remove(provenance());
  stdfs::create_symlink(envelope(), provenance());
  r = verify_envelope(envelope(), pub_);
  EXPECT_TRUE(has_failure(r.failures, "provenance", "not a regular file")) << joined(r.failures);
}

// The in-toto ecosystem's Python verifiers, pinned by hash in requirements/torch2.txt.
TEST_F(ProvenanceSignTest, TheEcosystemsVerifiersAcceptItAndRefuseAChange) {
  const std::string script = sh_quote(std::string(ANCHOR_SOURCE_DIR) + "/tests/interop/verify_attestation.py");
  const std::string python = sh_quote(std::string(ANCHOR_SOURCE_DIR) + "/scripts/torch2-python");
  auto ok = sh(python + " " + script + " " + sh_quote(run_) + " " + sh_quote(pub_));
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("OK report and provenance verify with securesystemslib"), std::string::npos) << ok.out;
  // Negative controls: another key; a provenance field SLSA does not define (re-signed, so only the schema catches it).
  auto other = sh(python + " " + script + " " + sh_quote(run_) + " " + sh_quote(other_keypair().second));
  EXPECT_EQ(other.status, 1) << other.out;
  EXPECT_NE(other.out.find("FAIL report.intoto.json: securesystemslib does not verify it"), std::string::npos)
      << other.out;
  json p = payload(provenance());
  p["predicate"]["buildDefinition"]["notAField"] = 1;
  write_provenance(p, priv_);
  auto schema = sh(python + " " + script + " " + sh_quote(run_) + " " + sh_quote(pub_));
  EXPECT_EQ(schema.status, 1) << schema.out;
  EXPECT_NE(schema.out.find("notAField"), std::string::npos) << schema.out;
}

}  // namespace
}  // namespace anchor::report
