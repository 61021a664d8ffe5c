#pragma once
// The signed run report: an in-toto Statement v1 in a DSSE envelope.
//
//   <run_dir>/report.json          the report (written by the pilot)
//   <run_dir>/report.intoto.json   DSSE envelope over the statement (sign_run)
//   <run_dir>/report.pub           the signer's SPKI PEM public key (sign_run)
//
// Statement: _type "https://in-toto.io/Statement/v1"; subject = report.json
// and every committed checkpoint's manifest.json, by SHA-256, named by their
// path relative to the run directory; predicateType
// "https://anchor.dev/pilot-report/v1"; predicate = {"report": <report.json>,
// "signer": {"key_id": <hex SHA-256 of DER SPKI>, "algorithm":
// "ecdsa-p256-sha256"}}. docs/report.md is the full description.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/checkpoint/verified_dir.hpp"

namespace anchor::report {

inline constexpr const char* kStatementType = "https://in-toto.io/Statement/v1";
// Ours, versioned: a change that breaks readers of v1 gets /v2.
inline constexpr const char* kPredicateType = "https://anchor.dev/pilot-report/v1";
inline constexpr const char* kReportFile = "report.json";
inline constexpr const char* kEnvelopeFile = "report.intoto.json";
inline constexpr const char* kPublicKeyFile = "report.pub";

struct Subject {
  std::string name;    // path relative to the run directory, '/'-separated
  std::string sha256;  // lowercase hex
};

// report.json, then checkpoints/step-N/manifest.json for every checkpoint
// directory "step-N" holding a COMMITTED file (sorted by name). In-progress
// "step-N.tmp-*" directories are left out even when a killed save left a
// COMMITTED inside one.
// Throws Error (kIo) when report.json is missing or a file cannot be read;
// Error (kVerification) when a COMMITTED file names a SHA-256 that is not
// its manifest.json's. Each checkpoint is verified completely, but one that
// `seen` still matches (checkpoint::VerifiedDir: this run's restore verified
// it, and nothing in it changed since) is not read again.
std::vector<Subject> collect_subjects(const std::string& run_dir,
                                      const std::vector<checkpoint::VerifiedDir>& seen = {});

// The statement for `run_dir`, signed by the key with `key_id`. Throws Error
// (kRuntime) when report.json is not a JSON object; as collect_subjects.
nlohmann::ordered_json build_statement(const std::string& run_dir, const std::string& key_id,
                                       const std::vector<checkpoint::VerifiedDir>& seen = {});

struct SignOptions {
  // Passphrase of an encrypted key: first line of this file, else
  // $ANCHOR_KEY_PASSPHRASE (never a prompt).
  std::string passphrase_file;
  // Checkpoint directories this run's restore verified completely
  // (checkpoint::Store::Loaded::verified): not read again while unchanged.
  std::vector<checkpoint::VerifiedDir> seen_checkpoints;
};

struct SignResult {
  std::string envelope_path;
  std::string provenance_path;       // provenance.intoto.json (report/provenance.hpp)
  std::string model_signature_path;  // model.sig over export/ (report/model_signing.hpp); "" without an export
  std::string public_key_path;
  std::string key_id;
  std::size_t subjects = 0;
};

// Writes <run_dir>/report.intoto.json signed with the private key, then
// <run_dir>/provenance.intoto.json (SLSA Provenance v1 made from that
// statement, report/provenance.hpp) signed with the same key, <run_dir>/model.sig
// when the run has an export/ (OpenSSF Model Signing, report/model_signing.hpp), and the
// matching public key as <run_dir>/report.pub, each atomically (mode 0644).
// Subjects: report.json + checkpoints/*/manifest.json of committed checkpoints.
// Throws Error: kUsage for a key that is refused (group/other-readable,
// encrypted without a passphrase, not P-256), kIo for file system failures,
// kVerification as collect_subjects. Logs paths and the key id only.
SignResult sign_run(const std::string& run_dir, const std::string& private_key_path, const SignOptions& opts = {});

struct VerifyOptions {
  // SPKI PEM public key. Empty: use report.pub beside the envelope, with a
  // warning that this proves integrity, not who signed.
  std::string public_key_path;
  // Check the subjects and the report/manifest agreement against the files in
  // the envelope's directory. False for an envelope copied away from its run.
  bool check_files = true;
};

struct VerifyResult {
  bool ok = false;
  // Each "<name>: <detail>", name one of: malformed-json, envelope-schema,
  // envelope-missing, unsigned, payload-type, no-key, key, bad-signature,
  // wrong-key, payload-tampered, key-id-mismatch, payload-encoding,
  // statement-schema, subject-missing, subject-changed, subject-unreadable,
  // report-mismatch, checkpoint-mismatch, manifest-mismatch. See docs/report.md.
  std::vector<std::string> failures;
  std::string key_id;                 // id of the key verified against ("" if none)
  std::string public_key_path;        // the key file used
  std::vector<std::string> checks;    // what held, one line each
  std::vector<std::string> warnings;  // what was not checked, or holds only weakly
  // Signed checkpoints whose whole step directory is gone (retention, a
  // clean-up): "checkpoints/step-00000003". Each is a warning, not a failure.
  std::vector<std::string> retired;
  // The envelope's bytes as read once and checked: a caller that acts on the
  // payload (reproduce) takes it from here, never from a second read of a
  // file that may have changed in between.
  std::string envelope_text;
};

// Verifies an envelope (or a run directory holding report.intoto.json). Never
// throws for a bad envelope, key or run directory: every problem found becomes
// a named entry in `failures`, and ok is true only when there is none.
VerifyResult verify_envelope(const std::string& envelope_path, const VerifyOptions& opts);
VerifyResult verify_envelope(const std::string& envelope_path, const std::string& public_key_path /* may be empty */);

}  // namespace anchor::report
