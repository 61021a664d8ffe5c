// printable / printable_json / dump_json (anchor/common/utf8.hpp): bytes from
// files and paths made valid UTF-8 for JSON and messages.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace {

using anchor::dump_json;
using anchor::is_valid_utf8;
using anchor::printable;
using nlohmann::json;

TEST(Utf8, ValidTextPassesUnchanged) {
  for (const std::string& s :
       std::vector<std::string>{"", "plain/path/step-00000002", "caf\xc3\xa9", "\xe2\x82\xac 1", "\xf0\x9f\x98\x80",
                                std::string("nul\0inside", 10), "tab\tand\nnewline"}) {
    EXPECT_TRUE(is_valid_utf8(s)) << s;
    EXPECT_EQ(printable(s), s);
  }
}

TEST(Utf8, InvalidBytesBecomeHexEscapes) {
  EXPECT_EQ(printable("ck\xff/step"), "ck\\xff/step");
  EXPECT_EQ(printable("\x80"), "\\x80");                             // a lone continuation byte
  EXPECT_EQ(printable("a\xc3"), "a\\xc3");                           // cut short at the end
  EXPECT_EQ(printable("\xc3\x28"), "\\xc3(");                        // bad continuation: only the lead byte escaped
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable("caf\xc3\xa9\xff"), "caf\xc3\xa9\\xff");       // valid sequences kept around it
  for (const char* bad : {"\xff", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"})
    EXPECT_FALSE(is_valid_utf8(bad)) << printable(bad);
}

// What nlohmann's dump accepts is exactly what is_valid_utf8 accepts, and
// printable() always yields a string dump() accepts: random byte strings.
TEST(Utf8, AgreesWithNlohmannOnRandomBytes) {
  std::mt19937 rng(14);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 8, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 128 : 0x80 + rng() % 128);
    bool dumps = true;
    try {
      (void)json(s).dump();
    } catch (const json::type_error&) {
      dumps = false;
    }
    EXPECT_EQ(is_valid_utf8(s), dumps) << printable(s);
    EXPECT_NO_THROW((void)json(printable(s)).dump()) << printable(s);
  }
}

TEST(Utf8, DumpJsonNeverThrowsOnBadBytes) {
  json j = {{"dir", "/runs/r\xff/ckpt"}, {"ok", true}, {"list", {"a", "b\xfe"}}, {"k\xff", 1}};
  EXPECT_THROW((void)j.dump(), json::type_error);  // the failure dump_json avoids
  const std::string out = dump_json(j);
  const json back = json::parse(out);
  EXPECT_EQ(back["dir"], "/runs/r\\xff/ckpt");
  EXPECT_EQ(back["list"][1], "b\\xfe");
  EXPECT_EQ(back["k\\xff"], 1);
  EXPECT_EQ(back["ok"], true);
  // Valid documents are dumped exactly as dump() does.
  json good = {{"a", "caf\xc3\xa9"}, {"n", 2}};
  EXPECT_EQ(dump_json(good, 2), good.dump(2));
}

// Paths read back from JSON (config.json's base_dir, the manifest's config
// directory) keep their exact bytes through a _hex sibling.
TEST(Utf8, PathFieldsRoundTripAnyBytes) {
  json j = json::object();
  anchor::set_path_field(j, "base_dir", "/work/w\xff/configs");
  EXPECT_EQ(j["base_dir"], "/work/w\\xff/configs");
  EXPECT_EQ(j["base_dir_hex"], "2f776f726b2f77ff2f636f6e66696773");
  const json back = json::parse(j.dump());
  EXPECT_EQ(anchor::path_field(back, "base_dir"), "/work/w\xff/configs");
  // A valid path is written as it is, with no _hex (what older readers expect).
  json k = json::object();
  anchor::set_path_field(k, "base_dir", "/work/configs");
  EXPECT_EQ(k, (json{{"base_dir", "/work/configs"}}));
  EXPECT_EQ(anchor::path_field(k, "base_dir"), "/work/configs");
  EXPECT_EQ(anchor::path_field(k, "missing", "dflt"), "dflt");
  EXPECT_THROW(anchor::path_field(json{{"base_dir_hex", "zz"}}, "base_dir"), anchor::Error);
}

// Issue 14 (review): nlohmann's dump, copy and comparison recurse, so JSON
// nested a million levels deep (a 2 MB manifest.json) overflowed the stack of
// `checkpoint verify`, a restore's fallback and `anchor verify`. parse_json
// refuses it before the parse, as a parse_error like any malformed text.
TEST(Json, DepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(anchor::json_depth("3", 64), 0u);
  EXPECT_EQ(anchor::json_depth(R"({"a": [1, {"b": []}]})", 64), 4u);
  EXPECT_EQ(anchor::json_depth(R"({"a": "[[[[{{{{", "b": "\"[["})", 64), 1u);  // inside strings, escapes honoured
  EXPECT_EQ(anchor::json_depth(std::string(1000, '['), 64), 65u);              // stops past the limit
}

TEST(Json, ParseRefusesDeepNestingAndAcceptsTheLimit) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  try {
    (void)anchor::parse_json(deep);
    FAIL() << "parsed a million levels";
  } catch (const json::parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than 64 levels"), std::string::npos) << e.what();
  }
  // Negative control: 64 levels parse, and the value can be dumped.
  const std::string ok = std::string(anchor::kMaxJsonDepth, '[') + std::string(anchor::kMaxJsonDepth, ']');
  EXPECT_EQ(anchor::parse_json(ok).dump(), ok);
  EXPECT_THROW((void)anchor::parse_json(ok + "x"), json::parse_error);  // other errors as before
}

TEST(Utf8, SetPathFieldDropsAStaleHexField) {
  json j;
  anchor::set_path_field(j, "dir", "ck\xff");
  ASSERT_TRUE(j.contains("dir_hex"));
  anchor::set_path_field(j, "dir", "plain");
  EXPECT_FALSE(j.contains("dir_hex"));
  EXPECT_EQ(anchor::path_field(j, "dir"), "plain");
}

// Messages quote values whole: a 10 MB --set value became a 10 MB error (issue 43, item 7).
TEST(Capped, ALongWordIsCutAroundItsMiddleAndTheWholeToItsLimit) {
  EXPECT_EQ(anchor::capped("short words stay as they are"), "short words stay as they are");
  const std::string value(100000, 'x');
  const std::string m = anchor::capped("run.name '" + value + "' is not a usable run name");
  EXPECT_LT(m.size(), 600u) << m.size();
  EXPECT_NE(m.find("\u2026(99602 bytes)\u2026"), std::string::npos) << m.substr(0, 300);
  EXPECT_EQ(m.substr(0, 10), "run.name '");
  EXPECT_NE(m.find("' is not a usable run name"), std::string::npos);
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "word ";
  const std::string w = anchor::capped(many, 400, 1000);
  EXPECT_NE(w.find("\u2026 (24000 more bytes)"), std::string::npos) << w.substr(990);
  // A cut never splits a UTF-8 sequence.
  std::string accents;
  for (int i = 0; i < 1000; ++i) accents += "\u00e9";
  EXPECT_TRUE(anchor::is_valid_utf8(anchor::capped(accents, 401)));
  EXPECT_TRUE(anchor::is_valid_utf8(anchor::capped(accents, 4000, 1001)));
}

// For a terminal: every control character but newline and tab shown, C0,
// DEL and C1 alike; printable text, bytes that are not UTF-8 as printable() shows them.
TEST(ForTerminal, ShowsControlsInsteadOfSendingThem) {
  EXPECT_EQ(anchor::for_terminal("plain text, ünïcode ✓"), "plain text, ünïcode ✓");
  EXPECT_EQ(anchor::for_terminal("a\nb\tc"), "a\nb\tc");
  EXPECT_EQ(anchor::for_terminal("\x1b]0;owned\x07\x1b[2J"), "\\x1b]0;owned\\x07\\x1b[2J");
  EXPECT_EQ(anchor::for_terminal("del\x7f cr\r"), "del\\x7f cr\\x0d");
  EXPECT_EQ(anchor::for_terminal("csi \xc2\x9b"
                                 "31m"),
            "csi \\u009b31m");                                          // U+009B, C1 CSI
  EXPECT_EQ(anchor::for_terminal("nbsp \xc2\xa0."), "nbsp \xc2\xa0.");  // U+00A0 is text
  EXPECT_EQ(anchor::for_terminal("bad \xff\x1b"), "bad \\xff\\x1b");
}

}  // namespace
