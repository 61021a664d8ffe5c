#include "anchor/report/model_signing.hpp"

#include <algorithm>

#include "anchor/common/sha256.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "anchor/report/statement.hpp"

namespace anchor::report {
namespace {

std::vector<std::string> parts(const std::string& name) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t slash; (slash = name.find('/', at)) != std::string::npos; at = slash + 1)
    out.push_back(name.substr(at, slash - at));
  out.push_back(name.substr(at));
  return out;
}

std::string raw_digest(const std::string& hex) {
  std::string raw;
  for (std::size_t i = 0; i < hex.size(); i += 2)
    raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return raw;
}

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::kVerification, "model-signature: " + what,
              "model.sig is written by signing a run with an export (docs/report.md)");
}

}  // namespace

nlohmann::ordered_json model_signing_statement(const std::string& model_name, std::vector<ModelFile> files) {
  // model_signing orders its manifest by path (component by component), not by string.
  std::sort(files.begin(), files.end(),
            [](const ModelFile& a, const ModelFile& b) { return parts(a.name) < parts(b.name); });
  std::string digests;
  nlohmann::ordered_json resources = nlohmann::ordered_json::array();
  for (const auto& f : files) {
    if (!is_sha256_hex(f.sha256)) bad("the digest of " + printable(f.name) + " is not SHA-256 hex");
    digests += raw_digest(f.sha256);
    resources.push_back({{"name", f.name}, {"algorithm", "sha256"}, {"digest", f.sha256}});
  }
  return {{"_type", kStatementType},
          {"subject", {{{"name", model_name}, {"digest", {{"sha256", sha256_hex(digests)}}}}}},
          {"predicateType", kModelSigningPredicateType},
          {"predicate",
           // The git paths model_signing's own signer leaves out by default (so its statement of
           // the same directory is this one); an export holds none of them.
           {{"serialization",
             {{"method", "files"},
              {"hash_type", "sha256"},
              {"allow_symlinks", false},
              {"ignore_paths", {".git", ".gitattributes", ".github", ".gitignore"}}}},
            {"resources", resources}}}};
}

std::string sigstore_bundle_to_json(const Envelope& env, const std::string& public_key_pem) {
  nlohmann::ordered_json b = {
      {"mediaType", kSigstoreBundleMediaType},
      {"verificationMaterial",
       {{"publicKey", {{"hint", sha256_hex(public_key_pem)}}}, {"tlogEntries", nlohmann::json::array()}}},
      {"dsseEnvelope", nlohmann::ordered_json::parse(envelope_to_json(env))}};
  return b.dump(2) + "\n";
}

SigstoreBundle sigstore_bundle_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object() || j.value("mediaType", nlohmann::json()) != kSigstoreBundleMediaType)
    bad(std::string("not a Sigstore bundle of media type ") + kSigstoreBundleMediaType);
  if (!j.contains("dsseEnvelope") || !j["dsseEnvelope"].is_object()) bad("the bundle holds no dsseEnvelope");
  SigstoreBundle out;
  out.envelope = envelope_from_json(j["dsseEnvelope"].dump());
  const nlohmann::json::json_pointer hint("/verificationMaterial/publicKey/hint");
  if (j.contains(hint) && j.at(hint).is_string()) out.key_hint = j.at(hint).get<std::string>();
  return out;
}

std::vector<ModelFile> model_files_of(const nlohmann::json& subjects) {
  std::vector<ModelFile> out;
  const std::string prefix = std::string(kModelDir) + "/";
  if (!subjects.is_array()) return out;
  for (const auto& s : subjects) {
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string()) continue;
    const std::string name = s["name"].get<std::string>();
    const nlohmann::json::json_pointer sha("/digest/sha256");
    if (name.rfind(prefix, 0) != 0 || !s.contains(sha) || !s.at(sha).is_string()) continue;
    out.push_back({name.substr(prefix.size()), s.at(sha).get<std::string>()});
  }
  return out;
}

}  // namespace anchor::report
