#include "anchor/report/statement.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/report/dsse.hpp"
#include "anchor/report/keys.hpp"
#include "anchor/report/model_signing.hpp"
#include "anchor/report/provenance.hpp"
#include "run_dir.hpp"

namespace anchor::report {

namespace stdfs = std::filesystem;

namespace detail {

std::vector<ClaimedCheckpoint> claimed_checkpoints(const std::string& run_dir,
                                                   const std::vector<checkpoint::VerifiedDir>& seen) {
  std::vector<ClaimedCheckpoint> out;
  stdfs::path root = stdfs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!stdfs::is_directory(root, ec)) return out;
  const checkpoint::Store store(root.string());
  for (stdfs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_directory(e2)) continue;
    // "step-N" only (1 to 18 digits, as the store names and reads steps): a
    // "step-N.tmp-*" directory can hold COMMITTED when the save was killed
    // between writing it and the rename that publishes it; any other name
    // ("step-best") is not the store's and not a checkpoint.
    std::string name = it->path().filename().string();
    const std::size_t digits = name.size() - std::min<std::size_t>(name.size(), 5);
    if (name.rfind("step-", 0) != 0 || digits < 1 || digits > 18 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (stdfs::symlink_status(it->path() / "COMMITTED", e2).type() == stdfs::file_type::not_found) continue;
    const auto v = store.verify(it->path().string(), seen);
    out.push_back({"checkpoints/" + name, v.ok, v.problems});
  }
  if (ec) throw io_error("list", root.string(), ec.value());
  std::sort(out.begin(), out.end(),
            [](const ClaimedCheckpoint& a, const ClaimedCheckpoint& b) { return a.dir < b.dir; });
  return out;
}

std::vector<std::string> committed_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& c : claimed_checkpoints(run_dir))
    if (c.verified) out.push_back(c.dir);
  return out;
}

std::vector<std::string> run_files(const std::string& run_dir) {
  std::vector<std::string> out;
  const stdfs::path root(run_dir);
  // Regular files only, never through a symlink (a link planted in the run
  // directory would make signing and verify read elsewhere); in work/ only
  // the names anchor could have written (valid UTF-8, not hidden).
  auto regular = [](const stdfs::path& p) {
    std::error_code e;
    return stdfs::symlink_status(p, e).type() == stdfs::file_type::regular;
  };
  std::error_code ec;
  for (const char* name :
       {"report.md", "report.html", "manifest.json", "config.json", "events.jsonl", "trace.json", "profile.json"})
    if (regular(root / name)) out.push_back(name);
  // work/ (the workers' results) and export/ (the final weights, docs/models.md "Export"): the
  // names anchor could have written there (valid UTF-8, not hidden), one level deep.
  for (const char* sub : {"work", "export"}) {
    if (stdfs::symlink_status(root / sub, ec).type() != stdfs::file_type::directory) continue;
    std::vector<std::string> files;
    for (stdfs::directory_iterator it(root / sub, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.front() != '.' && is_valid_utf8(name) && regular(it->path()))
        files.push_back(std::string(sub) + "/" + name);
    }
    if (ec) throw io_error("list", (root / sub).string(), ec.value());
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

std::string normalise_sha256(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s.rfind("sha256:", 0) == 0) s.erase(0, 7);
  return s;
}

std::optional<std::string> committed_sha256(const std::string& content) {
  std::size_t b = content.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return std::nullopt;
  std::size_t e = content.find_last_not_of(" \t\r\n");
  std::string s = normalise_sha256(content.substr(b, e - b + 1));
  if (!is_sha256_hex(s)) return std::nullopt;
  return s;
}

}  // namespace detail

std::vector<Subject> collect_subjects(const std::string& run_dir, const std::vector<checkpoint::VerifiedDir>& seen) {
  std::vector<Subject> out;
  stdfs::path root(run_dir);
  out.push_back({kReportFile, sha256_file((root / kReportFile).string()).sha256});
  for (const auto& name : detail::run_files(run_dir)) out.push_back({name, sha256_file((root / name).string()).sha256});
  for (const auto& c : detail::claimed_checkpoints(run_dir, seen)) {
    // A directory that says it is committed but does not verify was changed
    // or damaged after its commit: never signed, and never silently left out.
    if (!c.verified) {
      std::string why;
      for (const auto& p : c.problems) why += (why.empty() ? "" : "; ") + p;
      throw Error(ErrorKind::kVerification,
                  "checkpoint " + printable((root / c.dir).string()) + " holds COMMITTED but does not verify: " + why,
                  "the checkpoint was changed or damaged after it was committed; it must not be signed. "
                  "`anchor checkpoint verify` on it shows every problem; move it out of the run directory "
                  "or put back a good copy, then sign again");
    }
    std::string name = c.dir + "/manifest.json";
    out.push_back({name, sha256_file((root / name).string()).sha256});
  }
  return out;
}

nlohmann::ordered_json build_statement(const std::string& run_dir, const std::string& key_id,
                                       const std::vector<checkpoint::VerifiedDir>& seen) {
  std::string report_path = (stdfs::path(run_dir) / kReportFile).string();
  // Subjects first: they hash report.json, and the predicate embeds the same bytes.
  std::vector<Subject> subjects = collect_subjects(run_dir, seen);
  std::string text = fs::read_file(report_path);
  if (sha256_hex(text) != subjects.front().sha256)
    throw Error(ErrorKind::kRuntime, report_path + ": changed while it was being signed",
                "sign the run once the pilot has finished writing it");
  nlohmann::ordered_json report;
  try {
    report = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::kRuntime, report_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!report.is_object()) throw Error(ErrorKind::kRuntime, report_path + ": not a JSON object");

  nlohmann::ordered_json st;
  st["_type"] = kStatementType;
  st["subject"] = nlohmann::ordered_json::array();
  for (const auto& s : subjects) st["subject"].push_back({{"name", s.name}, {"digest", {{"sha256", s.sha256}}}});
  st["predicateType"] = kPredicateType;
  st["predicate"]["report"] = std::move(report);
  st["predicate"]["signer"] = {{"key_id", key_id}, {"algorithm", kSigningAlgorithm}};
  return st;
}

SignResult sign_run(const std::string& run_dir, const std::string& private_key_path, const SignOptions& opts) {
  std::string passphrase = resolve_passphrase(opts.passphrase_file);
  Key key = load_private_key(private_key_path, passphrase);
  if (!passphrase.empty()) OPENSSL_cleanse(passphrase.data(), passphrase.size());
  SignResult r;
  r.key_id = key_id(key);
  nlohmann::ordered_json st = build_statement(run_dir, r.key_id, opts.seen_checkpoints);
  r.subjects = st["subject"].size();
  Envelope env = sign_envelope(key, kInTotoPayloadType, st.dump());

  stdfs::path root(run_dir);
  // An earlier signing's provenance names an envelope this one replaces:
  // gone before the new envelope lands, so a failure below leaves none.
  for (const char* earlier : {kProvenanceFile, kModelSignatureFile}) {
    std::error_code gone;
    if (!stdfs::remove(root / earlier, gone) && gone && gone != std::errc::no_such_file_or_directory)
      throw io_error("remove", (root / earlier).string(), gone.value());
  }
  r.envelope_path = (root / kEnvelopeFile).string();
  r.public_key_path = (root / kPublicKeyFile).string();
  fs::atomic_write_file(r.public_key_path, public_key_pem(key));
  const std::string envelope_text = envelope_to_json(env);
  fs::atomic_write_file(r.envelope_path, envelope_text);
  // SLSA Provenance v1 beside it, made from the statement just signed, naming
  // this envelope's digest so the two cannot be paired with another run's.
  const nlohmann::ordered_json provenance =
      build_provenance(nlohmann::json::parse(env.payload), sha256_hex(envelope_text));
  r.provenance_path = (root / kProvenanceFile).string();
  fs::atomic_write_file(r.provenance_path, envelope_to_json(sign_envelope(key, kInTotoPayloadType, provenance.dump())));
  // The export, signed for OpenSSF Model Signing's own verifier (report/model_signing.hpp).
  const std::vector<ModelFile> model = model_files_of(nlohmann::json::parse(st["subject"].dump()));
  if (!model.empty()) {
    const auto statement = model_signing_statement(kModelDir, model);
    r.model_signature_path = (root / kModelSignatureFile).string();
    fs::atomic_write_file(
        r.model_signature_path,
        sigstore_bundle_to_json(sign_envelope(key, kInTotoPayloadType, statement.dump()), public_key_pem(key)));
  }
  ANCHOR_LOG_INFO(
      "report", "signed {} ({} subjects), {} (SLSA Provenance v1){} with key {}", r.envelope_path, r.subjects,
      r.provenance_path,
      r.model_signature_path.empty() ? "" : " and " + r.model_signature_path + " (OpenSSF Model Signing of export/)",
      r.key_id);
  return r;
}

}  // namespace anchor::report
