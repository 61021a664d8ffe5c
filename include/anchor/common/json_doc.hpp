#pragma once
// A JSON document as typed structs, read and written exactly: the machinery
// behind run_report::RunReport and plan::PlanDoc.
//
// A document type is a struct per object, each deriving from json_doc::Rest,
// with its fields as std::optional (a string, a double, an int64, a bool, a
// nested struct, a std::vector or std::map of them, or nlohmann::json for
// what stays untyped), and one list of its fields, found by argument-
// dependent lookup in the struct's namespace:
//
//     struct Eval : json_doc::Rest { std::optional<double> before_save; };
//     template <class V> void fields(V& v, Eval& s) { v("before_save", s.before_save); }
//
// json_doc::read<T>(j) walks that list with a Reader (JSON -> struct) and
// json_doc::write(t) with a Writer (struct -> JSON), so the two cannot
// disagree on a key. Both are exact: each struct keeps the keys it does not
// model in `keys`, as read; a modelled key whose value has another type than
// its field stays there too; a number read into the other number type (an
// integer into a double field, an integral float into an int64 field) is
// taken and also kept as written, so it is written back as it was. So
// write(read<T>(j)).dump() == j.dump() for every object j, and read never
// throws: what is not an object reads as an empty struct.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor::json_doc {

using Json = nlohmann::json;

// Every struct's base: the keys of its object it does not model, as read.
struct Rest {
  Json keys = Json::object();
};

namespace detail {

template <class T>
constexpr bool kIsSection = std::is_base_of_v<Rest, T>;

// JSON -> a field. A value of another type than the field's is not taken
// (false): the key stays in its object's `keys`, as read. Numbers are taken
// into either number type (below).
inline bool parse(const Json& j, std::string& out) {
  if (!j.is_string()) return false;
  out = j.get<std::string>();
  return true;
}
inline bool parse(const Json& j, double& out) {
  if (!j.is_number()) return false;
  out = j.get<double>();
  return true;
}
inline bool parse(const Json& j, std::int64_t& out) {
  if (j.is_number_unsigned()) {
    if (j.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(j.get<std::uint64_t>());
    return true;
  }
  if (j.is_number_integer()) {
    out = j.get<std::int64_t>();
    return true;
  }
  // A float with an integral value (a program's median token count, 512.0).
  if (!j.is_number_float()) return false;
  const double d = j.get<double>();
  if (!(d >= -9.2e18 && d <= 9.2e18) || d != static_cast<double>(static_cast<std::int64_t>(d))) return false;
  out = static_cast<std::int64_t>(d);
  return true;
}
// Whether a number was read as its own JSON type: an integer read into a
// double field (or a float into an integer field) also stays in `keys`, so it
// is written back as it was ("tokens": 512.0 stays 512.0).
inline bool same_type(const Json& j, const double& /*field*/) { return j.is_number_float(); }
inline bool same_type(const Json& j, const std::int64_t& /*field*/) { return j.is_number_integer(); }
template <class T>
bool same_type(const Json& /*j*/, const T& /*field*/) {
  return true;
}
inline bool parse(const Json& j, bool& out) {
  if (!j.is_boolean()) return false;
  out = j.get<bool>();
  return true;
}
inline bool parse(const Json& j, Json& out) {
  out = j;
  return true;
}
template <class T>
bool parse(const Json& j, T& out);
template <class T>
bool parse(const Json& j, std::vector<T>& out) {
  if (!j.is_array()) return false;
  out.clear();
  out.reserve(j.size());
  for (const auto& e : j)
    if (!parse(e, out.emplace_back())) return false;
  return true;
}
template <class T>
bool parse(const Json& j, std::map<std::string, T>& out) {
  if (!j.is_object()) return false;
  out.clear();
  for (const auto& [k, e] : j.items())
    if (!parse(e, out[k])) return false;
  return true;
}

class Reader {
 public:
  // `rest`: the object being read (a struct's `keys`); each key taken is removed from it.
  explicit Reader(Json& rest) : rest_(rest) {}
  template <class T>
  void operator()(const char* key, std::optional<T>& out) {
    const auto it = rest_.find(key);
    if (it == rest_.end()) return;
    T value{};
    if (!parse(*it, value)) return;
    const bool exact = same_type(*it, value);
    out = std::move(value);
    if (exact) rest_.erase(it);
  }

 private:
  Json& rest_;
};

template <class T>
bool parse(const Json& j, T& out) {
  static_assert(kIsSection<T>, "a document type derives from json_doc::Rest and has fields(V&, T&)");
  if (!j.is_object()) return false;
  out.keys = j;
  Reader r(out.keys);
  fields(r, out);  // the struct's own list, by argument-dependent lookup
  return true;
}

// A field -> JSON.
template <class T>
Json emit(const T& v);
template <class T>
Json emit(const std::vector<T>& v);
template <class T>
Json emit(const std::map<std::string, T>& v);

class Writer {
 public:
  explicit Writer(Json& out) : out_(out) {}
  template <class T>
  void operator()(const char* key, const std::optional<T>& v) {
    if (!v) return;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      // Kept in `keys` as read, in its own number type (Reader): written as it was.
      if (const auto it = out_.find(key);
          it != out_.end() && it->is_number() && it->template get<double>() == double(*v))
        return;
    }
    out_[key] = emit(*v);
  }

 private:
  Json& out_;
};

template <class T>
Json emit(const T& v) {
  if constexpr (kIsSection<T>) {
    Json out = v.keys;
    Writer w(out);
    fields(w, const_cast<T&>(v));  // NOLINT(cppcoreguidelines-pro-type-const-cast): the Writer only reads
    return out;
  } else {
    return Json(v);
  }
}
template <class T>
Json emit(const std::vector<T>& v) {
  Json out = Json::array();
  for (const auto& e : v) out.push_back(emit(e));
  return out;
}
template <class T>
Json emit(const std::map<std::string, T>& v) {
  Json out = Json::object();
  for (const auto& [k, e] : v) out[k] = emit(e);
  return out;
}

}  // namespace detail

// The document in `j` as a T; never throws.
template <class T>
T read(const Json& j) {
  T t;
  if (!detail::parse(j, t)) t.keys = Json::object();
  return t;
}

// A T as JSON: the keys it kept, and every field that holds a value.
template <class T>
Json write(const T& t) {
  return detail::emit(t);
}

// What a reader reads of a section the document may lack: the section, or an empty one.
template <class T>
const T& or_empty(const std::optional<T>& v) {
  static const T empty{};
  return v ? *v : empty;
}

}  // namespace anchor::json_doc
