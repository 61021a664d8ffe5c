#pragma once
// The config schema: one table row per key (schema.cpp). Everything that
// touches config keys goes through this table: the YAML parser, --set
// overrides, to_json/from_json/to_yaml, and the test that keeps
// docs/config.md in step with the code. Adding a key is one row here plus the
// struct member in include/anchor/config/config.hpp.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "anchor/config/config.hpp"

namespace anchor::config::schema {

// A reference to one member of Config, as a plain function pointer so the
// table is a constant and needs no member-pointer chains.
template <class T>
using Ref = T& (*)(Config&);

// The order of the alternatives is the order of Type.
using AnyRef = std::variant<Ref<bool>, Ref<int>, Ref<std::int64_t>, Ref<std::uint64_t>, Ref<double>, Ref<std::string>,
                            Ref<std::vector<std::string>>>;
enum class Type { kBool, kInt, kInt64, kUInt64, kDouble, kString, kStringList };

// How a path-valued key is resolved.
enum class PathKind {
  kNone,
  kConfigRelative,  // relative to the config file's directory (resolve_path)
  kCwdRelative,     // relative to the current directory (run.output_dir)
};

struct Bound {
  double value;
  bool inclusive;
};

// Extra validation of a string value: returns "" when fine, else the message.
using StringCheck = std::string (*)(const std::string&);

struct Field {
  template <class T>
  Field(const char* key, T& (*ref)(Config&), const char* doc, const char* used_by)
      : key(key), ref(ref), doc(doc), used_by(used_by) {}

  std::string key;  // dotted path, e.g. "train.optimizer.lr"
  AnyRef ref;
  std::string doc;      // meaning, for docs/config.md (no '|')
  std::string used_by;  // which feature/issue reads it
  std::optional<Bound> lo, hi;
  std::vector<std::string> allowed;  // enum values; empty = any
  StringCheck check = nullptr;
  std::string check_doc;  // what `check` accepts, for docs and messages
  std::string why;        // the reason behind a bound, appended to its message
  bool required = false;
  PathKind path = PathKind::kNone;

  Type type() const { return static_cast<Type>(ref.index()); }

  // Fluent setters used to build the table.
  Field& at_least(double v) {
    lo = Bound{v, true};
    return *this;
  }
  Field& above(double v) {
    lo = Bound{v, false};
    return *this;
  }
  Field& at_most(double v) {
    hi = Bound{v, true};
    return *this;
  }
  Field& below(double v) {
    hi = Bound{v, false};
    return *this;
  }
  Field& one_of(std::vector<std::string> v) {
    allowed = std::move(v);
    return *this;
  }
  Field& checked(StringCheck f, const char* d) {
    check = f;
    check_doc = d;
    return *this;
  }
  Field& because(const char* w) {
    why = w;
    return *this;
  }
  Field& is_required() {
    required = true;
    return *this;
  }
  Field& config_relative() {
    path = PathKind::kConfigRelative;
    return *this;
  }
  Field& cwd_relative() {
    path = PathKind::kCwdRelative;
    return *this;
  }
};

// Every key, grouped so that each section's keys are contiguous (to_yaml
// relies on it; a test checks it).
const std::vector<Field>& fields();
const Field* find(const std::string& key);
// True for "train", "train.optimizer", ...: a prefix of some key.
bool is_section(const std::string& dotted);
// Direct child names of a section ("" is the top level), in table order.
std::vector<std::string> children(const std::string& section);

std::string type_name(Type t);                // "integer", "list of strings", ...
std::string constraint_text(const Field& f);  // "≥ 1", "one of: a, b", "" when none
nlohmann::json get_json(const Field& f, const Config& c);
// The default as docs show it (JSON text: 64, "runs", [], true).
std::string default_text(const Field& f);

// Parses `value` into the field of `c`: type, range, allowed values and the
// string check. Returns "" on success; otherwise the message, `c` keeps its
// previous value, and `*where` is set to the offending list item's mark when
// the problem is inside a list (left alone otherwise).
std::string assign(const Field& f, Config& c, const YAML::Node& value, YAML::Mark* where);
// Sets a string or list field to empty (an empty --set value) after the same
// checks an explicit empty value ('' or []) gets: returns "" on success,
// otherwise the message, and `c` keeps its previous value.
std::string assign_empty(const Field& f, Config& c);

// Emits the field's value (scalar or flow sequence) into an open YAML map.
void emit_value(const Field& f, const Config& c, YAML::Emitter& out);

// One row of the key table in docs/config.md:
// | `key` | type | default | allowed | meaning | used by |
std::string markdown_row(const Field& f);

}  // namespace anchor::config::schema
