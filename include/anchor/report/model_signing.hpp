#pragma once
// The exported model signed in the OpenSSF Model Signing format (v1.0;
// https://github.com/sigstore/model-transparency), so that its own tool checks
// anchor's export as it stands:
//
//   model_signing verify key --signature RUN/model.sig --public_key RUN/report.pub RUN/export
//
// `<run dir>/model.sig` is a Sigstore bundle (v0.3, JSON) holding a DSSE
// envelope over an in-toto statement of predicateType
// https://model_signing/signature/v1.0: one subject named after the model's
// directory whose SHA-256 is taken over its files' digests, and every file of
// the directory with its SHA-256 as predicate.resources, under the "files"
// serialization (sha256, no symbolic links). Signed with the run's key, with
// no transparency-log entry; verificationMaterial.publicKey.hint is the
// SHA-256 of the key's SPKI PEM. docs/report.md, "The export, signed for
// model_signing".
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anchor/report/dsse.hpp"

namespace anchor::report {

inline constexpr const char* kModelSignatureFile = "model.sig";  // in the run directory, over export/
inline constexpr const char* kModelDir = "export";
inline constexpr const char* kModelSigningPredicateType = "https://model_signing/signature/v1.0";
inline constexpr const char* kSigstoreBundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json";

struct ModelFile {
  std::string name;    // relative to the model's directory, '/'-separated
  std::string sha256;  // lowercase hex
};

// The statement model_signing makes for these files: resources in its order
// (by path component), the subject's digest the SHA-256 of their raw digests
// concatenated in that order. Throws Error (kVerification) for a digest that
// is not 64 lowercase hex characters.
nlohmann::ordered_json model_signing_statement(const std::string& model_name, std::vector<ModelFile> files);

// The Sigstore bundle around `env`, the signer's SPKI PEM hinted by its SHA-256.
std::string sigstore_bundle_to_json(const Envelope& env, const std::string& public_key_pem);

struct SigstoreBundle {
  Envelope envelope;
  std::string key_hint;  // "" when the bundle has none
};
// Parses a bundle anchor writes. Throws Error (kVerification) saying what is
// wrong: not JSON, another media type, no DSSE envelope.
SigstoreBundle sigstore_bundle_from_json(const std::string& text);

// The files of the model directory among a statement's subjects (names under
// "export/"), named relative to it.
std::vector<ModelFile> model_files_of(const nlohmann::json& subjects);

}  // namespace anchor::report
