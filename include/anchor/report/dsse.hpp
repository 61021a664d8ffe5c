#pragma once
// DSSE (Dead Simple Signing Envelope) v1: pre-authentication encoding,
// ECDSA P-256/SHA-256 signatures, and the envelope's JSON form.
// Spec: https://github.com/secure-systems-lab/dsse/blob/master/protocol.md
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anchor/report/keys.hpp"

namespace anchor::report {

// The in-toto payload type. verify requires exactly this string.
inline constexpr const char* kInTotoPayloadType = "application/vnd.in-toto+json";

// PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body, with
// lengths as ASCII decimal byte counts. This is what is signed.
std::string pae(std::string_view type, std::string_view body);

// Standard base64 with padding (RFC 4648 section 4) via EVP_EncodeBlock.
std::string base64_encode(std::string_view data);
// Decodes standard or URL-safe base64, padded or not (DSSE verifiers accept
// both). nullopt on any character outside the alphabet or a bad length.
std::optional<std::string> base64_decode(std::string_view text);

// ECDSA over SHA-256(data) with EVP_DigestSign; returns the DER signature.
// Throws Error (kRuntime) on an OpenSSL failure.
std::string sign(const Key& private_key, std::string_view data);
// True when `der_sig` is a valid ECDSA/SHA-256 signature of `data` under the
// key. A malformed signature is false, never an exception.
bool verify(const Key& public_key, std::string_view data, std::string_view der_sig);

struct Signature {
  std::string keyid;  // DSSE keyid: the signing key's key_id (keys.hpp; docs/report.md, "Key id")
  std::string sig;    // DER bytes (decoded)
};

struct Envelope {
  std::string payload_type;
  std::string payload;  // decoded bytes
  std::vector<Signature> signatures;
};

// Signs PAE(payload_type, payload) and returns the envelope with one signature.
Envelope sign_envelope(const Key& private_key, const std::string& payload_type, const std::string& payload);

// {"payloadType":..., "payload":<base64>, "signatures":[{"keyid":<key id>,"sig":<base64>}]}
std::string envelope_to_json(const Envelope& env);

// Parses an envelope. Throws Error (kVerification) whose message starts with
// a failure name: "malformed-json: ..." when the text is not JSON,
// "envelope-schema: ..." when a field is missing, of the wrong type, or not
// base64. The payload type is NOT checked here (verify does, by name).
Envelope envelope_from_json(const std::string& text);

// True when one of the envelope's signatures verifies over
// PAE(payload_type, payload) with `public_key`.
bool verify_envelope_signature(const Envelope& env, const Key& public_key);

}  // namespace anchor::report
