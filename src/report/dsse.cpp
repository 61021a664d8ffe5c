#include "anchor/report/dsse.hpp"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"
#include "openssl_util.hpp"

namespace anchor::report {

std::string pae(std::string_view type, std::string_view body) {
  std::string out = "DSSEv1 ";
  out += std::to_string(type.size());
  out += ' ';
  out += type;
  out += ' ';
  out += std::to_string(body.size());
  out += ' ';
  out += body;
  return out;
}

std::string base64_encode(std::string_view data) {
  if (data.empty()) return {};
  // EVP_EncodeBlock writes 4 characters per 3 bytes plus a terminating NUL.
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  // Normalise: URL-safe alphabet to standard, and restore missing padding.
  // EVP_DecodeBlock itself trims whitespace and does not reject everything we
  // want rejected, so the alphabet is checked here first.
  std::string in;
  in.reserve(text.size() + 2);
  std::size_t pad = 0;
  for (char c : text) {
    if (c == '=') {
      ++pad;
      in += c;
      continue;
    }
    if (pad) return std::nullopt;  // data after padding
    if (c == '-') c = '+';
    if (c == '_') c = '/';
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (!ok) return std::nullopt;
    in += c;
  }
  if (pad > 2) return std::nullopt;
  if (pad == 0) {
    if (in.size() % 4 == 1) return std::nullopt;
    while (in.size() % 4) {
      in += '=';
      ++pad;
    }
  }
  if (in.size() % 4) return std::nullopt;
  if (in.empty()) return std::string();
  std::string out(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0 || static_cast<std::size_t>(n) != out.size()) return std::nullopt;
  // EVP_DecodeBlock counts the zero bytes that padding stands for: drop them.
  out.resize(out.size() - pad);
  return out;
}

std::string sign(const Key& private_key, std::string_view data) {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx) throw openssl_error("allocate digest context");
  if (EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, private_key.get()) != 1)
    throw openssl_error("start ECDSA signature");
  std::size_t len = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  if (EVP_DigestSign(ctx.get(), nullptr, &len, p, data.size()) != 1) throw openssl_error("size ECDSA signature");
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, p, data.size()) != 1)
    throw openssl_error("ECDSA signature");
  sig.resize(len);  // DER length varies (70-72 bytes for P-256)
  return sig;
}

bool verify(const Key& public_key, std::string_view data, std::string_view der_sig) {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx) throw openssl_error("allocate digest context");
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, public_key.get()) != 1)
    throw openssl_error("start ECDSA verification");
  int rc = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(der_sig.data()), der_sig.size(),
                            reinterpret_cast<const unsigned char*>(data.data()), data.size());
  ERR_clear_error();  // a bad signature leaves a reason on the queue
  return rc == 1;
}

Envelope sign_envelope(const Key& private_key, const std::string& payload_type, const std::string& payload) {
  Envelope env;
  env.payload_type = payload_type;
  env.payload = payload;
  // keyid: the key's id as securesystemslib computes it, so its verifiers match the key as loaded.
  env.signatures.push_back({key_id(private_key), sign(private_key, pae(payload_type, payload))});
  return env;
}

std::string envelope_to_json(const Envelope& env) {
  nlohmann::ordered_json j;
  j["payloadType"] = env.payload_type;
  j["payload"] = base64_encode(env.payload);
  j["signatures"] = nlohmann::ordered_json::array();
  for (const auto& s : env.signatures) j["signatures"].push_back({{"keyid", s.keyid}, {"sig", base64_encode(s.sig)}});
  return j.dump(2) + "\n";
}

namespace {
Error schema_error(const std::string& why) {
  return Error(ErrorKind::kVerification, "envelope-schema: " + why,
               "the file is not a DSSE envelope written by `anchor pilot`");
}
}  // namespace

Envelope envelope_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::kVerification,
                std::string("malformed-json: the envelope is not valid JSON (") + e.what() + ")",
                "the file was truncated or edited; restore it from the run directory");
  }
  if (!j.is_object()) throw schema_error("top level is not a JSON object");
  if (!j.contains("payloadType") && !j.contains("payload") && !j.contains("signatures"))
    throw schema_error(
        "no payloadType, payload or signatures: this is not a signed envelope (an unsigned "
        "report.json?)");
  Envelope env;
  if (!j.contains("payloadType") || !j["payloadType"].is_string())
    throw schema_error("\"payloadType\" is missing or not a string");
  env.payload_type = j["payloadType"].get<std::string>();
  if (!j.contains("payload") || !j["payload"].is_string()) throw schema_error("\"payload\" is missing or not a string");
  auto payload = base64_decode(j["payload"].get<std::string>());
  if (!payload) throw schema_error("\"payload\" is not base64");
  env.payload = std::move(*payload);
  if (!j.contains("signatures") || !j["signatures"].is_array())
    throw schema_error("\"signatures\" is missing or not an array");
  std::size_t i = 0;
  for (const auto& s : j["signatures"]) {
    std::string where = "signatures[" + std::to_string(i++) + "]";
    if (!s.is_object() || !s.contains("sig") || !s["sig"].is_string())
      throw schema_error(where + ".sig is missing or not a string");
    Signature sig;
    if (s.contains("keyid")) {
      if (!s["keyid"].is_string()) throw schema_error(where + ".keyid is not a string");
      sig.keyid = s["keyid"].get<std::string>();
    }
    auto der = base64_decode(s["sig"].get<std::string>());
    if (!der) throw schema_error(where + ".sig is not base64");
    sig.sig = std::move(*der);
    env.signatures.push_back(std::move(sig));
  }
  return env;
}

bool verify_envelope_signature(const Envelope& env, const Key& public_key) {
  std::string message = pae(env.payload_type, env.payload);
  for (const auto& s : env.signatures)
    if (verify(public_key, message, s.sig)) return true;
  return false;
}

}  // namespace anchor::report
