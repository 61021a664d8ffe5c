#include "anchor/common/utf8.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "anchor/error.hpp"

namespace anchor {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], 0 when the byte
// there does not start one (RFC 3629, table 3-7 of the Unicode standard).
std::size_t sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t c = b(i);
  const std::size_t left = s.size() - i;
  if (c < 0x80) return 1;
  auto cont = [&](std::size_t k, std::uint8_t lo = 0x80, std::uint8_t hi = 0xBF) {
    return k < left && b(i + k) >= lo && b(i + k) <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;        // no overlong
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;  // no surrogates
  if (c >= 0xE1 && c <= 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;  // no overlong
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;  // <= U+10FFFF
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    // ASCII fast path: most strings are plain paths and messages.
    if (static_cast<std::uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 16);
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_length(s, i);
    if (n == 0) {
      const auto c = static_cast<std::uint8_t>(s[i]);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string for_terminal(std::string_view s) {
  const std::string text = printable(s);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<std::uint8_t>(text[i + 1]) < 0xa0) {
      const auto c1 = static_cast<std::uint8_t>(text[++i]);  // U+0080..U+009F: valid UTF-8 after printable()
      out += "\\u00";
      out += kHex[c1 >> 4];
      out += kHex[c1 & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

nlohmann::json printable_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      return is_valid_utf8(s) ? j : nlohmann::json(printable(s));
    }
    case nlohmann::json::value_t::object: {
      nlohmann::json out = nlohmann::json::object();
      for (auto it = j.begin(); it != j.end(); ++it) out[printable(it.key())] = printable_json(it.value());
      return out;
    }
    case nlohmann::json::value_t::array: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& v : j) out.push_back(printable_json(v));
      return out;
    }
    default: return j;
  }
}

std::size_t json_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json(std::string_view text) {
  if (json_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw nlohmann::json::parse_error::create(
        101, 0, "syntax error: arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels",
        nullptr);
  return nlohmann::json::parse(text);
}

std::string dump_json(const nlohmann::json& j, int indent) {
  try {
    return j.dump(indent);
  } catch (const nlohmann::json::type_error& e) {
    if (e.id != 316) throw;  // 316: invalid UTF-8 byte
    return printable_json(j).dump(indent);
  }
}

void set_path_field(nlohmann::json& obj, const std::string& key, const std::string& path) {
  obj[key] = printable(path);
  obj.erase(key + "_hex");  // a stale one would win in path_field()
  if (is_valid_utf8(path)) return;
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * path.size());
  for (unsigned char c : path) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  obj[key + "_hex"] = hex;
}

std::string path_field(const nlohmann::json& obj, const std::string& key, const std::string& fallback) {
  if (!obj.is_object()) return fallback;
  auto hex = obj.find(key + "_hex");
  if (hex != obj.end()) {
    const std::string h = hex->is_string() ? hex->get<std::string>() : std::string("?");
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    std::string out;
    bool ok = h.size() % 2 == 0;
    for (std::size_t i = 0; ok && i < h.size(); i += 2) {
      const int hi = nibble(h[i]), lo = nibble(h[i + 1]);
      ok = hi >= 0 && lo >= 0;
      out += static_cast<char>(hi * 16 + lo);
    }
    if (!ok)
      throw Error(ErrorKind::kConfig, "\"" + key + "_hex\" is not lowercase hex",
                  "the file was edited by hand; write it again with anchor");
    return out;
  }
  auto v = obj.find(key);
  return v != obj.end() && v->is_string() ? v->get<std::string>() : fallback;
}

namespace {

// `at` moved back to the start of the UTF-8 sequence it falls in (a continuation byte is 10xxxxxx).
std::size_t char_start(std::string_view s, std::size_t at) {
  while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

}  // namespace

std::string capped(std::string_view text, std::size_t word_max, std::size_t total_max) {
  std::string out;
  out.reserve(std::min(text.size(), total_max + 64));
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t space = text.find(' ', i);
    const std::size_t end = space == std::string_view::npos ? text.size() : space;
    const std::string_view word = text.substr(i, end - i);
    if (word.size() > word_max) {
      const std::size_t keep = word_max / 2;
      const std::size_t head = char_start(word, keep), tail = char_start(word, word.size() - keep);
      out.append(word.substr(0, head));
      out += "\u2026(" + std::to_string(tail - head) + " bytes)\u2026";
      out.append(word.substr(tail));
    } else {
      out.append(word);
    }
    if (end < text.size()) out += ' ';
    i = end + 1;
  }
  if (out.size() > total_max) {
    const std::size_t cut = char_start(out, total_max);
    const std::size_t more = out.size() - cut;
    out.resize(cut);
    out += "\u2026 (" + std::to_string(more) + " more bytes)";
  }
  return out;
}

}  // namespace anchor
