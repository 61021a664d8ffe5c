#pragma once
// Bytes from files and paths made safe for JSON and for messages.
//
// JSON strings must be valid UTF-8 (nlohmann::json::dump throws type_error
// 316 otherwise), but a path, a file name or a corrupt file's header can hold
// any byte. Every string that reaches JSON (or an error message that may end
// up in JSON: a skip reason, a verification problem) from a file or a path
// goes through printable(): valid UTF-8 passes unchanged, every byte that is
// not part of a well-formed UTF-8 sequence is shown as \xNN.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anchor {

// True when `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF): what nlohmann::json::dump accepts.
bool is_valid_utf8(std::string_view s) noexcept;

// `s` with each byte that is not part of a well-formed UTF-8 sequence
// replaced by the four characters \xNN (lowercase hex). The result is always
// valid UTF-8; valid input is returned unchanged. Not reversible when the
// input already holds a literal "\x": it is for people and JSON, not a path
// to open.
std::string printable(std::string_view s);

// printable(s) for a terminal: also every control character but newline and
// tab (C0, DEL, and the C1 range U+0080..U+009F, which some terminals take as
// CSI) shown as \xNN (C1 as \u00NN). ESC in a hostile report's string would
// otherwise move the cursor, clear the screen or retitle the window when
// `anchor diff`, `verify` or `reproduce` prints it.
std::string for_terminal(std::string_view s);

// `text` as a message shows it: a run of more than `word_max` bytes without
// a space (a value quoted whole: a 10 MB --set, a path of a million bytes) is
// cut to its start and end around "…(N bytes)…", and the whole to `total_max`
// bytes and "… (N more bytes)"; a cut never splits a UTF-8 sequence.
std::string capped(std::string_view text, std::size_t word_max = 400, std::size_t total_max = 8192);

// A copy of `j` in which every string value and every object key went
// through printable(): safe to dump() whatever the strings held. O(size of j).
nlohmann::json printable_json(const nlohmann::json& j);

// j.dump(indent), except that a string that is not valid UTF-8 (anywhere in
// `j`) is written through printable() instead of making dump() throw
// (type_error 316). Costs nothing extra when every string is valid. For the
// files and lines anchor writes (report.json, events, the workers' results).
std::string dump_json(const nlohmann::json& j, int indent = -1);

// How deeply arrays and objects nest in JSON text (strings skipped, escapes
// honoured): 0 for a scalar. Stops counting past `limit` + 1. O(size), no
// allocation. The text need not be valid JSON.
std::size_t json_depth(std::string_view text, std::size_t limit);

// The deepest nesting parse_json() accepts. anchor's own files nest 6 levels
// at most; nlohmann::json's dump, copy and comparison recurse, so a value
// nested a million levels deep (a 2 MB file) would overflow the stack.
constexpr std::size_t kMaxJsonDepth = 64;

// nlohmann::json::parse(text) for JSON anchor did not write itself in this
// process (a checkpoint's manifest or state, a report, an envelope): text
// nested deeper than kMaxJsonDepth is refused first, with a
// nlohmann::json::parse_error (id 101) as any other malformed text.
nlohmann::json parse_json(std::string_view text);

// A path that anchor writes into JSON and reads back (config.json's base_dir,
// the manifest's config directory): obj[key] = printable(path), and when the
// path is not valid UTF-8 also obj[key + "_hex"] = its bytes in lowercase hex,
// so that path_field() gets the exact bytes back.
void set_path_field(nlohmann::json& obj, const std::string& key, const std::string& path);

// The path set_path_field() wrote: from key + "_hex" when present (throws
// Error(kConfig) when that is not hex), else obj[key] when it is a string,
// else `fallback`.
std::string path_field(const nlohmann::json& obj, const std::string& key, const std::string& fallback = {});

}  // namespace anchor
