#include "anchor/report/dsse.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "anchor/error.hpp"
#include "anchor/report/keys.hpp"

namespace anchor::report {
namespace {

TEST(Dsse, PaeMatchesTheSpecExample) {
  // The worked example from the DSSE protocol document.
  EXPECT_EQ(pae("http://example.com/HelloWorld", "hello world"),
            "DSSEv1 29 http://example.com/HelloWorld 11 hello world");
  EXPECT_EQ(pae("", ""), "DSSEv1 0  0 ");
}

TEST(Dsse, PaeCountsBytesNotCharacters) {
  // UTF-8 e-acute (2 bytes, 1 character), a newline and a NUL: 4 bytes.
  const std::string body("\xc3\xa9\n\0", 4);
  EXPECT_EQ(pae("t", body), std::string("DSSEv1 1 t 4 ") + body);
}

TEST(Dsse, Base64RoundTripsEveryLengthMod3) {
  std::string data;
  for (int n = 0; n < 40; ++n) {
    auto decoded = base64_decode(base64_encode(data));
    ASSERT_TRUE(decoded.has_value()) << n;
    EXPECT_EQ(*decoded, data) << "length " << n;  // padding fix-up: no trailing zero bytes
    data.push_back(static_cast<char>(n * 37 + 1));
  }
}

TEST(Dsse, Base64KnownVectors) {
  // RFC 4648 section 10.
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(*base64_decode("Zg=="), "f");
  EXPECT_EQ(*base64_decode("Zm8="), "fo");
  // Unpadded and URL-safe forms decode too (DSSE verifiers accept both).
  EXPECT_EQ(*base64_decode("Zg"), "f");
  EXPECT_EQ(*base64_decode("Zm8"), "fo");
  EXPECT_EQ(*base64_decode("-_8="), std::string("\xfb\xff"));
  EXPECT_EQ(*base64_decode("+/8="), std::string("\xfb\xff"));
}

TEST(Dsse, Base64RejectsGarbage) {
  EXPECT_FALSE(base64_decode("Zm9v!").has_value());
  EXPECT_FALSE(base64_decode("Zm 9v").has_value());
  EXPECT_FALSE(base64_decode("Z").has_value());         // impossible length
  EXPECT_FALSE(base64_decode("Zg==Zg==").has_value());  // data after padding
  EXPECT_FALSE(base64_decode("Z===").has_value());
  EXPECT_FALSE(base64_decode("Zm9v\n").has_value());
}

TEST(Dsse, SignVerifyAndNegativeControls) {
  Key k = generate_key();
  std::string msg = pae(kInTotoPayloadType, "{\"a\":1}");
  std::string sig = sign(k, msg);
  EXPECT_GE(sig.size(), 8u);
  EXPECT_EQ(static_cast<unsigned char>(sig[0]), 0x30) << "DER SEQUENCE";
  EXPECT_TRUE(verify(k, msg, sig));
  // Negative controls: other message, altered signature, other key.
  EXPECT_FALSE(verify(k, msg + " ", sig));
  std::string bad = sig;
  bad[bad.size() - 1] ^= 0x01;
  EXPECT_FALSE(verify(k, msg, bad));
  EXPECT_FALSE(verify(k, msg, "not DER at all"));
  Key other = generate_key();
  EXPECT_FALSE(verify(other, msg, sig));
}

TEST(Dsse, EnvelopeJsonRoundTrip) {
  Key k = generate_key();
  Envelope env = sign_envelope(k, kInTotoPayloadType, "{\"_type\":\"x\"}");
  std::string text = envelope_to_json(env);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["payloadType"], kInTotoPayloadType);
  ASSERT_EQ(j["signatures"].size(), 1u);
  EXPECT_EQ(j["signatures"][0]["keyid"], key_id(k));  // the key's id, as securesystemslib computes it
  Envelope back = envelope_from_json(text);
  EXPECT_EQ(back.payload, env.payload);
  EXPECT_EQ(back.signatures[0].sig, env.signatures[0].sig);
  EXPECT_TRUE(verify_envelope_signature(back, k));
  back.payload_type = "application/json";
  EXPECT_FALSE(verify_envelope_signature(back, k));
}

std::string parse_error(const std::string& text) {
  try {
    envelope_from_json(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kVerification);
    return e.what();
  }
  return "(no error)";
}

TEST(Dsse, EnvelopeParseErrorsAreNamed) {
  EXPECT_EQ(parse_error("{\"payloadType\": ").rfind("malformed-json:", 0), 0u);
  EXPECT_EQ(parse_error("[1,2]").rfind("envelope-schema:", 0), 0u);
  EXPECT_NE(parse_error("{\"run_id\":\"x\"}").find("unsigned report.json"), std::string::npos);
  EXPECT_NE(parse_error(R"({"payloadType":"t","payload":"%%%","signatures":[]})").find("\"payload\" is not base64"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"payloadType":"t","payload":"","signatures":[{"sig":7}]})").find("signatures[0].sig"),
            std::string::npos);
}

}  // namespace
}  // namespace anchor::report
