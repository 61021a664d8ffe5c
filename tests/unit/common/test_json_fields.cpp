// JsonFields (anchor/common/json_fields.hpp): typed reads that name the field
// that is missing or mistyped.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "anchor/common/json_fields.hpp"

namespace {

using anchor::JsonFields;
using nlohmann::json;

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(JsonFields, OptionalReadsTellAbsentFromWrong) {
  const json j = {{"n", 3}, {"x", 0.5}, {"null", nullptr}, {"s", "three"}, {"f", 1.5}};
  const JsonFields f(j, "\"step\"");
  EXPECT_EQ(f.optional_integer("n"), 3);
  EXPECT_FALSE(f.optional_integer("absent").has_value());
  EXPECT_FALSE(f.optional_integer("null").has_value());
  EXPECT_EQ(refusal([&] { (void)f.optional_integer("s"); }), "\"step\".s is \"three\", expected an integer");
  EXPECT_EQ(refusal([&] { (void)f.optional_integer("f"); }), "\"step\".f is 1.5, expected an integer");
  EXPECT_EQ(f.optional_number("x"), 0.5);
  EXPECT_EQ(f.optional_number("n"), 3.0);
  EXPECT_FALSE(f.optional_number("null").has_value());
  EXPECT_EQ(refusal([&] { (void)f.optional_number("s"); }), "\"step\".s is \"three\", expected a finite number");
}

TEST(JsonFields, StringListsNameTheBadItem) {
  const json j = {{"ok", {"a", "b"}}, {"empty", json::array()}, {"mixed", {"a", 2}}, {"scalar", "a"}};
  const JsonFields f(j, "program");
  EXPECT_EQ(f.strings("ok"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f.strings("empty").empty());
  EXPECT_EQ(refusal([&] { (void)f.strings("mixed"); }), "program.mixed[1] is 2, expected a string");
  EXPECT_EQ(refusal([&] { (void)f.strings("scalar"); }), "program.scalar is \"a\", expected an array");
  EXPECT_EQ(refusal([&] { (void)f.strings("absent"); }), "program.absent is missing");
}

}  // namespace
