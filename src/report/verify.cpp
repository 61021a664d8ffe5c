// verify_envelope: every check `anchor verify` makes, each failure named.
//
// The payload is untrusted until its signature verifies, but it is still
// parsed and compared with the run directory either way: when the signature
// fails, that comparison is what tells a tampered payload (it disagrees with
// the files) from a tampered signature (it agrees), and a wrong key (the
// payload names another signer) from both.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/keys.hpp"
#include "anchor/report/model_signing.hpp"
#include "anchor/report/provenance.hpp"
#include "anchor/report/statement.hpp"
#include "run_dir.hpp"

namespace anchor::report {

namespace stdfs = std::filesystem;
using nlohmann::json;

namespace {

std::string failure(const std::string& name, const std::string& detail) { return name + ": " + detail; }

// A subject name must stay inside the run directory: relative, no "..".
bool safe_relative(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return false;
  for (const auto& part : stdfs::path(name))
    if (part == "..") return false;
  return true;
}

struct Statement {
  bool parsed = false;  // payload is a JSON object
  json doc;
  std::vector<Subject> subjects;  // the well-formed ones
  std::string signer_key_id;      // predicate.signer.key_id, "" when absent
  const json* report = nullptr;   // predicate.report when it is an object
};

// The statement's subjects: each a safe relative name, listed once, with a
// sha256; the well-formed ones go to st.subjects, problems to `out`.
void parse_subjects(const json& d, Statement& st, std::vector<std::string>& out) {
  auto schema = [&](const std::string& why) { out.push_back(failure("statement-schema", why)); };
  if (!d.contains("subject") || !d["subject"].is_array() || d["subject"].empty()) {
    schema("subject must be a non-empty array");
    return;
  }
  std::set<std::string> seen;
  std::size_t i = 0;
  for (const auto& s : d["subject"]) {
    std::string where = "subject[" + std::to_string(i++) + "]";
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) {
      schema(where + ".name is missing or not a string");
      continue;
    }
    std::string name = s["name"].get<std::string>();
    if (!safe_relative(name)) {
      schema(where + ".name \"" + name + "\" is not a relative path inside the run directory");
      continue;
    }
    if (!seen.insert(name).second) {
      schema(where + ".name \"" + name + "\" is listed twice");
      continue;
    }
    if (!s.contains("digest") || !s["digest"].is_object() || !s["digest"].contains("sha256") ||
        !s["digest"]["sha256"].is_string() || !is_sha256_hex(s["digest"]["sha256"].get<std::string>())) {
      schema(where + " (" + name + "): digest.sha256 must be 64 lowercase hex characters");
      continue;
    }
    st.subjects.push_back({name, s["digest"]["sha256"].get<std::string>()});
  }
  if (!seen.count(kReportFile)) schema(std::string("no subject names ") + kReportFile + " (the report must be signed)");
}

// Parses the payload and checks the statement's schema; problems are appended
// to `out` as named failures.
Statement parse_statement(const std::string& payload, std::vector<std::string>& out) {
  Statement st;
  try {
    st.doc = parse_json(payload);
  } catch (const json::parse_error& e) {
    out.push_back(failure("payload-encoding", std::string("the payload is not JSON (") + e.what() + ")"));
    return st;
  }
  if (!st.doc.is_object()) {
    out.push_back(failure("payload-encoding", "the payload is not a JSON object"));
    return st;
  }
  st.parsed = true;
  auto schema = [&](const std::string& why) { out.push_back(failure("statement-schema", why)); };
  const json& d = st.doc;

  if (!d.contains("_type") || d["_type"] != kStatementType)
    schema(std::string("_type must be \"") + kStatementType + "\", found " +
           (d.contains("_type") ? d["_type"].dump() : "nothing"));

  parse_subjects(d, st, out);

  if (!d.contains("predicateType") || d["predicateType"] != kPredicateType)
    schema(std::string("predicateType must be \"") + kPredicateType + "\", found " +
           (d.contains("predicateType") ? d["predicateType"].dump() : "nothing"));

  if (!d.contains("predicate") || !d["predicate"].is_object()) {
    schema("predicate is missing or not an object");
    return st;
  }
  const json& p = d["predicate"];
  if (!p.contains("report") || !p["report"].is_object())
    schema("predicate.report is missing or not an object");
  else
    st.report = &p["report"];
  if (!p.contains("signer") || !p["signer"].is_object() || !p["signer"].contains("key_id") ||
      !p["signer"]["key_id"].is_string() || !is_sha256_hex(p["signer"]["key_id"].get<std::string>())) {
    schema("predicate.signer.key_id must be 64 lowercase hex characters");
  } else {
    st.signer_key_id = p["signer"]["key_id"].get<std::string>();
  }
  if (p.contains("signer") && p["signer"].is_object() &&
      (!p["signer"].contains("algorithm") || p["signer"]["algorithm"] != kSigningAlgorithm))
    schema(std::string("predicate.signer.algorithm must be \"") + kSigningAlgorithm + "\"");
  return st;
}

// Up to three JSON-pointer paths where two documents differ.
std::string diff_paths(const json& signed_doc, const json& disk_doc) {
  json patch = json::diff(signed_doc, disk_doc);
  std::string out;
  std::size_t n = 0;
  for (const auto& op : patch) {
    if (n == 3) {
      out += ", ...";
      break;
    }
    out += (n++ ? ", " : "") + op.value("path", std::string("/"));
  }
  return out.empty() ? "/" : out;
}

struct FileFindings {
  std::vector<std::string> failures;
  // The payload disagrees with the files: evidence for "payload-tampered"
  // when the signature also fails. First reason only.
  std::string payload_disagrees;

  void note_disagreement(const std::string& why) {
    if (payload_disagrees.empty()) payload_disagrees = why;
  }
};

// What the run-directory checks share, and what they find.
struct RunDirCheck {
  const std::string& run_dir;
  stdfs::path root;
  const Statement& st;
  VerifyResult& r;
  FileFindings f;
  std::set<std::string> subject_names;  // filled by check_subjects
};

bool is_checkpoint_manifest(const Subject& s) {
  return stdfs::path(s.name).filename() == "manifest.json" && s.name.rfind("checkpoints/", 0) == 0;
}

// A signed checkpoint whose whole step directory is gone: retired (retention, here or by a later
// pilot on the same checkpoint.dir, or a clean-up), its own state and a warning. A step directory
// that is there without its manifest, or with another one, is a failure: that is not a removal.
bool retire_if_gone(RunDirCheck& c, const stdfs::path& step_dir, const std::string& name) {
  std::error_code ec;
  if (stdfs::symlink_status(step_dir, ec).type() != stdfs::file_type::not_found) return false;
  if (std::find(c.r.retired.begin(), c.r.retired.end(), name) != c.r.retired.end()) return true;
  c.r.retired.push_back(name);
  c.r.warnings.push_back(name +
                         " is retired: the whole step directory is gone, as checkpoint retention "
                         "(checkpoint.keep_last, in this pilot or a later one on the same checkpoint.dir) or a "
                         "clean-up removes it. Its manifest's sha256 stays signed; its files can no longer be "
                         "checked against it (`anchor verify --strict` fails on this)");
  return true;
}

// 1. Every subject exists and has the signed digest.
void check_subjects(RunDirCheck& c) {
  std::size_t matched = 0;
  for (const auto& s : c.st.subjects) {
    c.subject_names.insert(s.name);
    std::string path = (c.root / s.name).string();
    std::error_code ec;
    if (stdfs::symlink_status(path, ec).type() == stdfs::file_type::not_found) {
      if (is_checkpoint_manifest(s) && retire_if_gone(c, c.root / stdfs::path(s.name).parent_path(),
                                                      stdfs::path(s.name).parent_path().generic_string())) {
        ++matched;  // nothing on disk contradicts its signed digest
        continue;
      }
      c.f.failures.push_back(failure("subject-missing", s.name + ": no such file in " + c.run_dir));
      continue;
    }
    try {
      std::string disk = sha256_file(path).sha256;
      if (disk != s.sha256) {
        c.f.failures.push_back(
            failure("subject-changed", s.name + ": sha256 on disk " + disk + ", signed " + s.sha256));
        c.f.note_disagreement("the digest it gives for " + s.name + " is not the file's");
      } else {
        ++matched;
      }
    } catch (const Error& e) {
      c.f.failures.push_back(failure("subject-unreadable", s.name + ": " + e.what()));
    }
  }
  const std::size_t retired = c.r.retired.size();
  if (!c.st.subjects.empty() && matched == c.st.subjects.size())
    c.r.checks.push_back("subjects: all " + std::to_string(matched - retired) + " files match their signed sha256" +
                         (retired ? " (" + std::to_string(retired) + " retired checkpoint manifest" +
                                        (retired > 1 ? "s" : "") + " gone with their step directories)"
                                  : ""));
}

// 2. report.json equals the report inside the statement.
void check_report_file(RunDirCheck& c) {
  std::string report_path = (c.root / kReportFile).string();
  std::error_code report_ec;
  if (!c.st.report || !c.subject_names.count(kReportFile) || !stdfs::exists(report_path, report_ec)) return;
  try {
    json disk = parse_json(fs::read_file(report_path));
    if (disk != *c.st.report) {
      c.f.failures.push_back(failure("report-mismatch", std::string(kReportFile) +
                                                            " on disk differs from predicate.report in the signed "
                                                            "statement at " +
                                                            diff_paths(*c.st.report, disk)));
      c.f.note_disagreement("its predicate.report differs from report.json at " + diff_paths(*c.st.report, disk));
    } else {
      c.r.checks.push_back("report: report.json equals predicate.report");
    }
  } catch (const json::parse_error& e) {
    c.f.failures.push_back(
        failure("report-mismatch", std::string(kReportFile) + " on disk is not JSON (" + e.what() + ")"));
  } catch (const Error& e) {
    c.f.failures.push_back(failure("subject-unreadable", e.what()));
  }
}

// 3. Checkpoint manifests that are subjects are committed, and COMMITTED
//    names the manifest's digest.
void check_committed(RunDirCheck& c) {
  std::size_t committed_ok = 0, manifests = 0;
  for (const auto& s : c.st.subjects) {
    if (!is_checkpoint_manifest(s)) continue;
    stdfs::path name(s.name);
    ++manifests;
    stdfs::path dir = c.root / name.parent_path();
    std::string rel_dir = name.parent_path().string();
    std::error_code ec;
    if (!stdfs::exists(c.root / name, ec)) continue;  // already reported as subject-missing
    if (!stdfs::exists(dir / "COMMITTED", ec)) {
      c.f.failures.push_back(
          failure("checkpoint-mismatch", rel_dir + ": signed as a checkpoint but has no COMMITTED file"));
      continue;
    }
    try {
      auto committed = detail::committed_sha256(fs::read_file((dir / "COMMITTED").string()));
      std::string disk = sha256_file((c.root / name).string()).sha256;
      if (committed && *committed != disk) {
        c.f.failures.push_back(failure("checkpoint-mismatch", rel_dir + "/COMMITTED names manifest sha256 " +
                                                                  *committed + " but manifest.json has " + disk));
        continue;
      }
      ++committed_ok;
    } catch (const Error& e) {
      c.f.failures.push_back(failure("subject-unreadable", e.what()));
    }
  }
  if (manifests && committed_ok == manifests)
    c.r.checks.push_back("checkpoints: " + std::to_string(manifests) +
                         " signed manifests, each committed (COMMITTED agrees where it names a digest)");
}

// 3b. The signed checkpoints' data: every file each signed manifest lists is
//     on disk with the size and SHA-256 it lists (the checkpoint store's own
//     verification, headers parsed strictly). The manifest's signature covers
//     the files only if the files are checked against it.
//     Each checkpoint directory is read once: those that claim to be
//     committed were verified by claimed_checkpoints(); a signed one whose
//     COMMITTED has since gone is verified here.
void check_checkpoint_data(RunDirCheck& c, const std::vector<detail::ClaimedCheckpoint>& claimed) {
  std::map<std::string, const detail::ClaimedCheckpoint*> claimed_by_dir;
  for (const auto& cl : claimed) claimed_by_dir[cl.dir] = &cl;
  std::size_t data_ok = 0, data_checked = 0;
  for (const auto& s : c.st.subjects) {
    if (!is_checkpoint_manifest(s)) continue;
    stdfs::path name(s.name);
    std::error_code ec;
    if (!stdfs::exists(c.root / name, ec)) continue;  // already reported as subject-missing
    ++data_checked;
    const std::string dir = name.parent_path().generic_string();
    std::vector<std::string> problems;
    if (auto it = claimed_by_dir.find(dir); it != claimed_by_dir.end()) {
      problems = it->second->problems;
    } else {
      problems = checkpoint::Store((c.root / "checkpoints").string()).verify((c.root / dir).string()).problems;
    }
    if (problems.empty()) {
      ++data_ok;
      continue;
    }
    for (const auto& problem : problems) c.f.failures.push_back(failure("checkpoint-data", dir + ": " + problem));
  }
  if (data_checked && data_ok == data_checked)
    c.r.checks.push_back("checkpoint data: every file of the " + std::to_string(data_checked) +
                         " signed checkpoints matches its manifest (size and sha256)");
}

// Files and committed checkpoints in the run directory that no subject covers.
void warn_unsigned(RunDirCheck& c, const std::vector<detail::ClaimedCheckpoint>& claimed) {
  for (const auto& name : detail::run_files(c.run_dir))
    if (!c.subject_names.count(name))
      c.r.warnings.push_back(name +
                             " is in the run directory but not signed: nothing vouches for it "
                             "(written after signing, or signed by an older anchor)");
  for (const auto& cl : claimed) {
    if (c.subject_names.count(cl.dir + "/manifest.json")) continue;
    if (cl.verified) {
      c.r.warnings.push_back(cl.dir +
                             " was committed but is not a subject: it is not covered by "
                             "the signature (written after signing?)");
    } else {
      std::string why;
      for (const auto& p : cl.problems) why += (why.empty() ? "" : "; ") + p;
      c.r.warnings.push_back(cl.dir + " holds COMMITTED but does not verify (" + why +
                             "): it is not a checkpoint, and not covered by the signature");
    }
  }
}

// The directory a report.json checkpoint entry lists, or "" when the entry is
// not one check 4 counts (malformed, or not committed).
std::string listed_checkpoint_dir(const json& entry) {
  if (!entry.is_object()) return "";
  std::string dir;
  if (entry.contains("dir") && entry["dir"].is_string())
    dir = entry["dir"].get<std::string>();
  else if (entry.contains("path") && entry["path"].is_string())
    dir = entry["path"].get<std::string>();
  if (dir.empty() || !entry.contains("manifest_sha256") || !entry["manifest_sha256"].is_string()) return "";
  if (entry.contains("committed") && entry["committed"] == false) return "";
  return dir;
}

// Whether the manifest of the checkpoint `dir` that report.json lists (entry)
// is on disk with the sha256 listed, and signed; failures are recorded.
bool listed_checkpoint_agrees(RunDirCheck& c, const json& entry, const std::string& dir) {
  stdfs::path d(dir);
  if (d.is_absolute()) {
    std::error_code ec;
    stdfs::path rel = stdfs::relative(d, c.root, ec);
    if (!ec && !rel.empty() && *rel.begin() != "..") d = rel;
  }
  stdfs::path manifest = (d.filename() == "manifest.json" ? d : d / "manifest.json").lexically_normal();
  // A checkpoint directory configured outside the run directory cannot be
  // a subject; report.json's manifest_sha256 (signed with report.json)
  // still ties its manifest to the signature.
  bool inside = !manifest.is_absolute() && *manifest.begin() != "..";
  stdfs::path on_disk = manifest.is_absolute() ? manifest : c.root / manifest;
  std::string want = detail::normalise_sha256(entry["manifest_sha256"].get<std::string>());
  std::error_code ec;
  if (!stdfs::exists(on_disk, ec)) {
    if (retire_if_gone(c, on_disk.parent_path(), inside ? manifest.parent_path().generic_string() : dir)) return true;
    c.f.failures.push_back(
        failure("checkpoint-mismatch", "report.json lists " + dir + ", but " + manifest.string() + " is missing"));
    return false;
  }
  try {
    std::string disk = sha256_file(on_disk.string()).sha256;
    if (disk != want) {
      c.f.failures.push_back(failure("checkpoint-mismatch", "report.json lists " + dir + " with manifest sha256 " +
                                                                want + ", but " + manifest.string() + " has " + disk));
      return false;
    }
  } catch (const Error& e) {
    c.f.failures.push_back(failure("subject-unreadable", e.what()));
    return false;
  }
  if (inside && !c.subject_names.count(manifest.generic_string())) {
    c.f.failures.push_back(failure("checkpoint-mismatch", "report.json lists " + dir + ", but " +
                                                              manifest.generic_string() + " is not a signed subject"));
    return false;
  }
  if (!inside) {
    // Its files are checked against that manifest here, as 3b does for
    // the signed checkpoints inside the run directory.
    const auto v =
        checkpoint::Store(on_disk.parent_path().parent_path().string()).verify(on_disk.parent_path().string());
    if (!v.ok) {
      for (const auto& problem : v.problems) c.f.failures.push_back(failure("checkpoint-data", dir + ": " + problem));
      return false;
    }
    c.r.warnings.push_back(dir +
                           " is outside the run directory: its manifest is covered by "
                           "report.json's manifest_sha256 (and its files by the manifest), not as a subject");
  }
  return true;
}

// 4. The checkpoints report.json lists ({dir, manifest_sha256}) are the
//    manifests on disk, and are signed.
void check_listed_checkpoints(RunDirCheck& c) {
  const json* report = c.st.report;
  if (!report || !report->contains("checkpoints") || !(*report)["checkpoints"].is_array()) return;
  std::size_t listed = 0, agree = 0;
  for (const auto& entry : (*report)["checkpoints"]) {
    const std::string dir = listed_checkpoint_dir(entry);
    if (dir.empty()) continue;
    ++listed;
    if (listed_checkpoint_agrees(c, entry, dir)) ++agree;
  }
  if (listed && agree == listed)
    c.r.checks.push_back("report/manifests: the " + std::to_string(listed) +
                         " checkpoints report.json lists match their manifests on disk");
}

// 5. The run's pinned manifest.json is the one report.json records
//    ("manifest_sha256" of the file, "manifest" its content). Not a subject:
//    it is signed through report.json.
void check_pinned_manifest(RunDirCheck& c) {
  const json* report = c.st.report;
  if (!report || !report->contains("manifest_sha256") || !(*report)["manifest_sha256"].is_string()) return;
  std::string want = detail::normalise_sha256((*report)["manifest_sha256"].get<std::string>());
  std::string path = (c.root / "manifest.json").string();
  std::error_code ec;
  if (!stdfs::exists(path, ec)) {
    c.f.failures.push_back(failure("manifest-mismatch", "report.json records manifest.json with sha256 " + want +
                                                            ", but manifest.json is missing"));
    return;
  }
  try {
    std::string text = fs::read_file(path);
    std::string disk = sha256_hex(text);
    bool ok = true;
    if (disk != want) {
      ok = false;
      c.f.failures.push_back(
          failure("manifest-mismatch", "manifest.json: sha256 on disk " + disk + ", report.json records " + want));
    } else if (report->contains("manifest") && (*report)["manifest"].is_object() &&
               parse_json(text) != (*report)["manifest"]) {
      ok = false;
      c.f.failures.push_back(failure("manifest-mismatch", "manifest.json differs from report.json's \"manifest\" at " +
                                                              diff_paths((*report)["manifest"], parse_json(text))));
    }
    if (ok) c.r.checks.push_back("manifest: manifest.json is the one report.json records");
  } catch (const json::parse_error& e) {
    c.f.failures.push_back(failure("manifest-mismatch", std::string("manifest.json is not JSON (") + e.what() + ")"));
  } catch (const Error& e) {
    c.f.failures.push_back(failure("subject-unreadable", e.what()));
  }
}

FileFindings check_run_dir(const std::string& run_dir, const Statement& st, VerifyResult& r) {
  RunDirCheck c{run_dir, stdfs::path(run_dir), st, r, {}, {}};
  check_subjects(c);
  check_report_file(c);
  check_committed(c);
  const auto claimed = detail::claimed_checkpoints(run_dir);
  check_checkpoint_data(c, claimed);
  warn_unsigned(c, claimed);
  check_listed_checkpoints(c);
  check_pinned_manifest(c);
  return std::move(c.f);
}

// provenance.intoto.json beside a report that verified: signed by the same
// key, and exactly the provenance this statement and envelope make
// (build_provenance), so it describes this run and no other. Absent: a run
// signed before anchor wrote one, or a copy without it; a warning.
void check_provenance(const std::string& run_dir, const Key& key, const json& statement,
                      const std::string& envelope_text, VerifyResult& r) {
  const std::string path = (stdfs::path(run_dir) / kProvenanceFile).string();
  std::error_code ec;
  if (stdfs::symlink_status(path, ec).type() == stdfs::file_type::not_found) {
    r.warnings.push_back(std::string("no ") + kProvenanceFile +
                         " beside the report: the run has no SLSA "
                         "provenance (signed by an anchor before it wrote one, or copied without it)");
    return;
  }
  auto fail = [&](const std::string& detail) { r.failures.push_back(failure("provenance", path + ": " + detail)); };
  if (stdfs::symlink_status(path, ec).type() != stdfs::file_type::regular) {
    fail("not a regular file");
    return;
  }
  Envelope env;
  try {
    env = envelope_from_json(fs::read_file(path));
  } catch (const Error& e) {
    fail(e.what());
    return;
  }
  if (env.payload_type != kInTotoPayloadType) {
    fail(std::string("payloadType is not \"") + kInTotoPayloadType + "\"");
    return;
  }
  if (!verify_envelope_signature(env, key)) {
    fail("the signature does not verify with key " + r.key_id + ", the report's signer");
    return;
  }
  json doc;
  try {
    doc = parse_json(env.payload);
  } catch (const json::parse_error& e) {
    fail(std::string("the payload is not JSON (") + e.what() + ")");
    return;
  }
  const json expected = json::parse(build_provenance(statement, sha256_hex(envelope_text)).dump());
  if (doc != expected) {
    fail("it is not the provenance of this report (it differs at " + diff_paths(expected, doc) +
         "): it was made for another run or envelope, or by another version of anchor");
    return;
  }
  r.checks.push_back(std::string(kProvenanceFile) + ": SLSA Provenance v1 of this report, signed by the same key");
}

// model.sig beside a report that verified: the OpenSSF Model Signing bundle
// of the export the statement signs, signed by the same key, and exactly the
// statement model_signing_statement makes of those files. Absent with an
// export: a warning (a run signed before anchor wrote one, or a copy without it).
void check_model_signature(const std::string& run_dir, const Key& key, const json& statement, VerifyResult& r) {
  const std::string path = (stdfs::path(run_dir) / kModelSignatureFile).string();
  const std::vector<ModelFile> files = model_files_of(statement.value("subject", json::array()));
  std::error_code ec;
  const auto type = stdfs::symlink_status(path, ec).type();
  auto fail = [&](const std::string& detail) {
    r.failures.push_back(failure("model-signature", path + ": " + detail));
  };
  if (type == stdfs::file_type::not_found) {
    if (!files.empty())
      r.warnings.push_back(std::string("no ") + kModelSignatureFile +
                           " beside the report: export/ is not signed for "
                           "OpenSSF Model Signing (signed by an anchor before it wrote one, or copied without it)");
    return;
  }
  if (files.empty()) {
    fail("the report signs no export/, so there is no model for this signature");
    return;
  }
  if (type != stdfs::file_type::regular) {
    fail("not a regular file");
    return;
  }
  SigstoreBundle bundle;
  try {
    bundle = sigstore_bundle_from_json(fs::read_file(path));
  } catch (const Error& e) {
    fail(e.what());
    return;
  }
  if (bundle.envelope.payload_type != kInTotoPayloadType) {
    fail(std::string("payloadType is not \"") + kInTotoPayloadType + "\"");
    return;
  }
  if (!bundle.key_hint.empty() && bundle.key_hint != sha256_hex(public_key_pem(key))) {
    fail("its public-key hint is not the report's signer's");
    return;
  }
  if (!verify_envelope_signature(bundle.envelope, key)) {
    fail("the signature does not verify with key " + r.key_id + ", the report's signer");
    return;
  }
  json doc;
  try {
    doc = parse_json(bundle.envelope.payload);
  } catch (const json::parse_error& e) {
    fail(std::string("the payload is not JSON (") + e.what() + ")");
    return;
  }
  const json expected = json::parse(model_signing_statement(kModelDir, files).dump());
  if (doc != expected) {
    fail("it does not sign the export/ this report signs (it differs at " + diff_paths(expected, doc) + ")");
    return;
  }
  r.checks.push_back(std::string(kModelSignatureFile) + ": OpenSSF Model Signing of export/ (" +
                     std::to_string(files.size()) + " files), signed by the same key");
}

// Reads and parses the envelope `path` names (a run directory means its
// report.intoto.json). False, with the failure in r, when it cannot.
bool read_envelope(const std::string& path, std::string& env_path, std::string& text, Envelope& env, VerifyResult& r) {
  env_path = path;
  std::error_code ec;
  if (stdfs::is_directory(path, ec)) {
    env_path = (stdfs::path(path) / kEnvelopeFile).string();
    if (!stdfs::exists(env_path, ec)) {
      r.failures.push_back(
          failure("unsigned", path + " has no " + kEnvelopeFile +
                                  ": the run was not signed (report.signing_key: none, or its signing failed: see "
                                  "its report.json)"));
      return false;
    }
  }
  try {
    text = fs::read_file(env_path);
  } catch (const Error& e) {
    r.failures.push_back(failure("envelope-missing", e.what()));
    return false;
  }
  r.envelope_text = text;
  try {
    env = envelope_from_json(text);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (stdfs::path(env_path).filename() == kReportFile)
      msg += " (" + env_path + " is the unsigned report; verify " + kEnvelopeFile + ")";
    r.failures.push_back(msg);
    return false;
  }
  return true;
}

// The key: --key, else report.pub beside the envelope. Returns its path, ""
// when there is none; `key` is set when it loads.
std::string load_key(const std::string& run_dir, const std::string& env_path, const VerifyOptions& opts, Key& key,
                     VerifyResult& r) {
  std::string key_path = opts.public_key_path;
  if (key_path.empty()) {
    std::string beside = (stdfs::path(run_dir) / kPublicKeyFile).string();
    std::error_code ec;
    if (stdfs::exists(beside, ec)) {
      key_path = beside;
      r.warnings.push_back("no --key given: checked against " + beside +
                           ", the key stored with the run. That shows the run is intact and was signed by the "
                           "key it carries, not WHO signed it; pass --key with the signer's public key (or "
                           "compare the key id below with the one you expect)");
    } else {
      r.failures.push_back(failure("no-key", "no --key given and no " + std::string(kPublicKeyFile) + " beside " +
                                                 env_path + "; pass --key PUB (the signer's SPKI PEM public key)"));
    }
  }
  if (!key_path.empty()) {
    try {
      key = load_public_key(key_path);
      r.key_id = key_id(key);
      r.public_key_path = key_path;
    } catch (const Error& e) {
      r.failures.push_back(failure("key", std::string(e.what()) + (e.hint().empty() ? "" : " (" + e.hint() + ")")));
    }
  }
  return key_path;
}

struct SignatureCheck {
  bool type_ok = true;
  std::string type_failure;  // when !type_ok
  bool failed = false;       // the signature does not verify: named later
  std::vector<std::string> failures;
};

// Whether predicate.signer.key_id names `key`: its id, or the one reports signed before 2026-12 recorded.
bool names_key(const Statement& st, const Key& key) {
  return st.signer_key_id == key_id(key) || st.signer_key_id == legacy_key_id(key);
}

// The signature, over PAE(payloadType, payload) exactly as the envelope has them.
SignatureCheck check_signature(const Envelope& env, const Key& key, const Statement& st, VerifyResult& r) {
  SignatureCheck sig;
  sig.type_ok = env.payload_type == kInTotoPayloadType;
  if (!sig.type_ok)
    sig.type_failure = std::string("expected \"") + kInTotoPayloadType + "\", found \"" + env.payload_type + "\"";
  if (env.signatures.empty()) {
    sig.failures.push_back(failure("unsigned", "the envelope carries no signature"));
  } else if (key) {
    if (verify_envelope_signature(env, key)) {
      r.checks.push_back("signature: valid ECDSA P-256/SHA-256 over the DSSE PAE, key " + r.key_id);
      if (!st.signer_key_id.empty() && !names_key(st, key))
        sig.failures.push_back(failure(
            "key-id-mismatch",
            "the signature verifies with key " + r.key_id + ", but predicate.signer.key_id names " + st.signer_key_id));
    } else if (!sig.type_ok) {
      Envelope as_signed = env;
      as_signed.payload_type = kInTotoPayloadType;
      if (verify_envelope_signature(as_signed, key))
        sig.type_failure +=
            " (the signature is over \"" + std::string(kInTotoPayloadType) + "\": the type was changed after signing)";
      else
        sig.failed = true;
    } else {
      sig.failed = true;
    }
  }
  return sig;
}

// Names a signature that does not verify: wrong key, tampered payload, or bad signature.
std::string name_signature_failure(const std::string& with, const Statement& st, const Key& key, bool statement_ok,
                                   const FileFindings& files, bool check_files) {
  if (!st.signer_key_id.empty() && !names_key(st, key))
    return failure("wrong-key", "the signature does not verify with " + with +
                                    "; the payload says it was signed by key " + st.signer_key_id +
                                    ": use that signer's public key, or the envelope was re-signed");
  if (!st.parsed || !statement_ok || !files.payload_disagrees.empty()) {
    std::string why = !st.parsed      ? "it is not a JSON statement"
                      : !statement_ok ? "it breaks the statement schema"
                                      : files.payload_disagrees;
    return failure("payload-tampered", "the signature does not verify over this payload with " + with + ", and " + why +
                                           ": the payload was changed after signing");
  }
  return failure("bad-signature", "the signature does not verify over the payload with " + with +
                                      (check_files ? "; the payload agrees with the run directory, so the "
                                                     "signature itself was altered (or made over other bytes)"
                                                   : "; the payload or the signature was altered"));
}

}  // namespace

VerifyResult verify_envelope(const std::string& envelope_path, const std::string& public_key_path) {
  VerifyOptions opts;
  opts.public_key_path = public_key_path;
  return verify_envelope(envelope_path, opts);
}

VerifyResult verify_envelope(const std::string& path, const VerifyOptions& opts) {
  VerifyResult r;
  std::string env_path;
  std::string text;
  Envelope env;
  if (!read_envelope(path, env_path, text, env, r)) return r;
  r.checks.push_back("envelope: DSSE JSON with " + std::to_string(env.signatures.size()) + " signature(s)");
  std::string run_dir =
      stdfs::path(env_path).has_parent_path() ? stdfs::path(env_path).parent_path().string() : std::string(".");

  Key key;
  const std::string key_path = load_key(run_dir, env_path, opts, key, r);

  // The statement (untrusted until the signature verifies).
  std::vector<std::string> statement_failures;
  Statement st = parse_statement(env.payload, statement_failures);

  SignatureCheck sig = check_signature(env, key, st, r);

  if (st.parsed && statement_failures.empty())
    r.checks.push_back(std::string("statement: in-toto Statement v1, predicateType ") + kPredicateType);

  // The run directory.
  FileFindings files;
  if (opts.check_files && st.parsed)
    files = check_run_dir(run_dir, st, r);
  else if (!opts.check_files)
    r.warnings.push_back(
        "run directory not checked (--envelope-only): subjects and the "
        "report/manifest agreement were not compared with files");

  if (sig.failed)
    sig.failures.push_back(name_signature_failure("key " + r.key_id + " (" + key_path + ")", st, key,
                                                  statement_failures.empty(), files, opts.check_files));

  if (!sig.type_ok) r.failures.push_back(failure("payload-type", sig.type_failure));
  for (auto& f : sig.failures) r.failures.push_back(std::move(f));
  for (auto& f : statement_failures) r.failures.push_back(std::move(f));
  for (auto& f : files.failures) r.failures.push_back(std::move(f));
  std::error_code ec;
  if (opts.check_files && r.failures.empty() && key) {
    check_provenance(run_dir, key, st.doc, text, r);
    check_model_signature(run_dir, key, st.doc, r);
  } else if (opts.check_files && stdfs::exists(stdfs::path(run_dir) / kProvenanceFile, ec))
    r.warnings.push_back(std::string(kProvenanceFile) + " not checked: the report itself did not verify");
  r.ok = r.failures.empty();
  return r;
}

}  // namespace anchor::report
