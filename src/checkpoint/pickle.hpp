#pragma once
// A pickle read as data, never run: the opcodes build a tree of values, and
// a class or function a pickle names (GLOBAL, REDUCE, NEWOBJ) stays a name
// with its arguments and state. anchor reads torch.distributed.checkpoint's
// `.metadata` this way (checkpoint/dcp.cpp): a hostile file can make the
// reader fail, never make it import or call anything. Protocols 2 to 5;
// protocol 0/1 text opcodes other than GLOBAL/GET/PUT, persistent IDs,
// extension codes and out-of-band buffers are refused. No torch.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anchor::checkpoint::pickle {

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kSet, kGlobal, kObject };
  Kind kind = Kind::kNone;
  std::int64_t i = 0;                        // kBool (0/1), kInt
  double f = 0;                              // kFloat
  std::string s;                             // kStr, kBytes; kGlobal: the module
  std::string name;                          // kGlobal: the qualified name in its module
  std::vector<Ref> items;                    // kTuple, kList, kSet; kObject: the constructor's arguments
  std::vector<std::pair<Ref, Ref>> entries;  // kDict, in the order the pickle set them
  Ref cls;                                   // kObject: what NEWOBJ or REDUCE was given (a kGlobal, usually)
  Ref state;                                 // kObject: what BUILD gave it, or null

  bool is(Kind k) const { return kind == k; }
  // kObject made from module.name (NEWOBJ or REDUCE of that global).
  bool instance_of(std::string_view module, std::string_view qualname) const;
  // kDict: the value under the string key `key`, or null. kObject: the same in its state (a dict, or the
  // dict pair (dict, slots) a class with __slots__ pickles).
  Ref field(std::string_view key) const;
};

// Why a pickle could not be read: the opcode's offset and what was wrong.
class Invalid : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads one pickle that spans all of `data` (trailing bytes after STOP are
// refused). At most `max_values` values are made, so a small file cannot
// claim gigabytes. Throws Invalid.
Ref load(std::string_view data, std::size_t max_values = 50'000'000);

}  // namespace anchor::checkpoint::pickle
