#include "anchor/common/json_fields.hpp"

#include <cmath>
#include <stdexcept>

#include "anchor/common/utf8.hpp"

namespace anchor {
namespace {

[[noreturn]] void mistyped(const std::string& path, const nlohmann::json& v, const char* expected) {
  std::string shown = dump_json(v);
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  throw std::invalid_argument(path + " is " + shown + ", expected " + expected);
}

}  // namespace

JsonFields::JsonFields(const nlohmann::json& object, std::string where) : j_(object), where_(std::move(where)) {
  if (!j_.is_object()) mistyped(where_.empty() ? "the document" : where_, j_, "an object");
}

std::string JsonFields::path(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

std::string JsonFields::item(const std::string& array_path, std::size_t i) {
  return array_path + "[" + std::to_string(i) + "]";
}

bool JsonFields::has(const char* key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

const nlohmann::json& JsonFields::need(const char* key) const {
  auto it = j_.find(key);
  if (it == j_.end()) throw std::invalid_argument(path(key) + " is missing");
  if (it->is_null()) throw std::invalid_argument(path(key) + " is null (JSON writes a NaN or an infinity so)");
  return *it;
}

std::string JsonFields::str(const char* key) const {
  const auto& v = need(key);
  if (!v.is_string()) mistyped(path(key), v, "a string");
  return v.get<std::string>();
}

std::int64_t JsonFields::integer(const char* key) const {
  const auto& v = need(key);
  if (!v.is_number_integer()) mistyped(path(key), v, "an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    mistyped(path(key), v, "an integer below 2^63");
  return v.get<std::int64_t>();
}

double JsonFields::number(const char* key) const {
  const auto& v = need(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) mistyped(path(key), v, "a finite number");
  return v.get<double>();
}

bool JsonFields::boolean(const char* key) const {
  const auto& v = need(key);
  if (!v.is_boolean()) mistyped(path(key), v, "true or false");
  return v.get<bool>();
}

const nlohmann::json& JsonFields::object(const char* key) const {
  const auto& v = need(key);
  if (!v.is_object()) mistyped(path(key), v, "an object");
  return v;
}

const nlohmann::json& JsonFields::array(const char* key) const {
  const auto& v = need(key);
  if (!v.is_array()) mistyped(path(key), v, "an array");
  return v;
}

std::string JsonFields::str_or(const char* key, const std::string& dflt) const { return has(key) ? str(key) : dflt; }
std::int64_t JsonFields::integer_or(const char* key, std::int64_t dflt) const { return has(key) ? integer(key) : dflt; }
double JsonFields::number_or(const char* key, double dflt) const { return has(key) ? number(key) : dflt; }
bool JsonFields::boolean_or(const char* key, bool dflt) const { return has(key) ? boolean(key) : dflt; }

std::optional<std::int64_t> JsonFields::optional_integer(const char* key) const {
  if (!has(key)) return std::nullopt;
  return integer(key);
}

std::optional<double> JsonFields::optional_number(const char* key) const {
  if (!has(key)) return std::nullopt;
  return number(key);
}

std::vector<std::string> JsonFields::strings(const char* key) const {
  const auto& v = array(key);
  std::vector<std::string> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) mistyped(item(path(key), i), v[i], "a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

}  // namespace anchor
