#pragma once
// The fault seams: the environment variables a test sets to make anchor fail
// at a chosen point (docs/development.md, "Fault seams"). One table names
// every one, its grammar and its points; one reader parses the items of those
// whose points are fixed. A value that is malformed or names a point the
// variable does not have is a usage error (exit 2) that lists the points, so a
// typo never lets a fault test pass by never firing.
//
//   for (const auto& item : faults::read("ANCHOR_DIST_FAULT"))
//     if (item.point == "sigkill_save") { rank = item.args[0]; step = item.args[1]; }
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anchor::faults {

struct Point {
  const char* name;   // "sigkill_save"
  int args;           // the integers after it, each after a ':' ("sigkill_save:<rank>:<step>")
  const char* usage;  // "sigkill_save:<rank>:<step>"
  const char* does;   // what it makes happen, for the docs
};

struct Variable {
  const char* name;  // "ANCHOR_DIST_FAULT"
  bool list;         // several items, comma-separated
  // The fixed points; empty for a variable with a grammar of its own
  // (ANCHOR_FAULT: the points of each checkpoint save, read by the store).
  std::vector<Point> points;
  const char* reader;  // where it is read
  const char* does;    // one line for the docs
};

// Every fault variable anchor reads, in the order the docs list them.
const std::vector<Variable>& variables();
// The one named; throws std::logic_error for a name that is not in the table.
const Variable& variable(std::string_view name);

struct Item {
  std::string point;
  std::vector<std::int64_t> args;  // non-negative integers, as many as the point takes
};

// The items of `value` for variable `name`; none for an empty value. Throws
// Error (kUsage) naming the variable, the item and the points it has.
std::vector<Item> parse(std::string_view name, std::string_view value);
// The items of the variable in this process's environment; none when unset.
std::vector<Item> read(std::string_view name);

}  // namespace anchor::faults
