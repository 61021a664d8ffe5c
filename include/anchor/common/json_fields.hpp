#pragma once
// Typed reads of one JSON object's fields, for the files anchor writes and
// reads back (a worker's results): a missing or mistyped field throws
// std::invalid_argument naming where it is ("saved_state.model is missing",
// "train_steps[2].loss is \"x\", expected a number", "eval_loss is null");
// the caller turns that into its own Error with what to do.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anchor {

class JsonFields {
 public:
  // `where`: the object's path for messages ("" at the top).
  JsonFields(const nlohmann::json& object, std::string where);

  bool has(const char* key) const;  // present and not null
  const nlohmann::json& need(const char* key) const;
  std::string str(const char* key) const;
  std::int64_t integer(const char* key) const;
  double number(const char* key) const;  // finite
  bool boolean(const char* key) const;
  const nlohmann::json& object(const char* key) const;
  const nlohmann::json& array(const char* key) const;

  // Absent or null: the default.
  std::string str_or(const char* key, const std::string& dflt) const;
  std::int64_t integer_or(const char* key, std::int64_t dflt) const;
  double number_or(const char* key, double dflt) const;
  bool boolean_or(const char* key, bool dflt) const;

  // Absent or null: none; present: as integer() and number() read it.
  std::optional<std::int64_t> optional_integer(const char* key) const;
  std::optional<double> optional_number(const char* key) const;
  // A list of strings.
  std::vector<std::string> strings(const char* key) const;

  // The path of a field, and of an array element, for nested readers and messages.
  std::string path(const char* key) const;
  static std::string item(const std::string& array_path, std::size_t i);

 private:
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace anchor
