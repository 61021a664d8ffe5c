#include "pickle.hpp"

#include <cstring>
#include <unordered_map>

namespace anchor::checkpoint::pickle {

using Kind = Value::Kind;

bool Value::instance_of(std::string_view module, std::string_view qualname) const {
  return kind == Kind::kObject && cls && cls->kind == Kind::kGlobal && cls->s == module && cls->name == qualname;
}

Ref Value::field(std::string_view key) const {
  if (kind == Kind::kObject) {
    if (!state) return nullptr;
    if (state->kind == Kind::kTuple && state->items.size() == 2) {  // (dict or None, slots dict)
      for (const auto& part : state->items)
        if (part && part->kind == Kind::kDict)
          if (auto v = part->field(key)) return v;
      return nullptr;
    }
    return state->field(key);
  }
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k && k->kind == Kind::kStr && k->s == key) return v;
  return nullptr;
}

namespace {

class Reader {
 public:
  Reader(std::string_view data, std::size_t max_values) : d_(data), budget_(max_values) {}

  Ref run() {
    while (true) {
      if (pos_ >= d_.size()) fail("the pickle ends without STOP");
      op_at_ = pos_;
      const auto op = static_cast<unsigned char>(d_[pos_++]);
      if (op == '.') break;  // STOP
      step(op);
    }
    if (pos_ != d_.size()) fail(std::to_string(d_.size() - pos_) + " bytes after STOP");
    if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values left");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Invalid("at byte " + std::to_string(op_at_) + ": " + why);
  }

  Ref make(Kind k) {
    if (budget_ == 0) fail("more values than anchor reads in a checkpoint's metadata");
    --budget_;
    auto v = std::make_shared<Value>();
    v->kind = k;
    return v;
  }

  std::string_view take(std::uint64_t n) {
    if (n > d_.size() - pos_) fail("a length of " + std::to_string(n) + " runs past the end");
    auto s = d_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::uint64_t uint(int bytes) {  // little-endian
    const auto s = take(bytes);
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
    return v;
  }
  std::string_view line() {
    const auto end = d_.find('\n', pos_);
    if (end == std::string_view::npos) fail("a text argument without its newline");
    auto s = d_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::uint64_t decimal(std::string_view s) {
    if (s.empty() || s.size() > 18) fail("a memo index that is not a number");
    std::uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') fail("a memo index that is not a number");
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return v;
  }

  Ref pop() {
    if (stack_.size() <= floor()) fail("an opcode takes a value the stack does not hold");
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ref& top() {
    if (stack_.size() <= floor()) fail("an opcode takes a value the stack does not hold");
    return stack_.back();
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK the stack does not hold");
    const auto at = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(at)),
                         std::make_move_iterator(stack_.end()));
    stack_.resize(at);
    return out;
  }
  void push(Ref v) { stack_.push_back(std::move(v)); }

  Ref scalar_int(std::int64_t i) {
    auto v = make(Kind::kInt);
    v->i = i;
    return v;
  }
  Ref text(Kind k, std::string_view s) {
    auto v = make(k);
    v->s.assign(s.data(), s.size());
    return v;
  }
  Ref tuple(std::vector<Ref> items) {
    auto v = make(Kind::kTuple);
    v->items = std::move(items);
    return v;
  }
  Ref global(std::string_view module, std::string_view name) {
    auto v = make(Kind::kGlobal);
    v->s.assign(module.data(), module.size());
    v->name.assign(name.data(), name.size());
    return v;
  }
  Ref object(Ref cls, const Ref& args) {
    if (!args || args->kind != Kind::kTuple) fail("a constructor's arguments are not a tuple");
    auto v = make(Kind::kObject);
    v->cls = std::move(cls);
    v->items = args->items;
    return v;
  }
  Ref signed_int(std::string_view bytes) {  // LONG1/LONG4: two's complement, little-endian
    if (bytes.empty()) return scalar_int(0);
    if (bytes.size() > 8) fail("an integer wider than 64 bits");
    std::uint64_t u = 0;
    for (std::size_t i = bytes.size(); i-- > 0;) u = (u << 8) | static_cast<unsigned char>(bytes[i]);
    if (bytes.size() < 8 && (static_cast<unsigned char>(bytes.back()) & 0x80)) u |= ~0ULL << (8 * bytes.size());
    std::int64_t i;
    std::memcpy(&i, &u, sizeof i);
    return scalar_int(i);
  }

  void memo_put(std::uint64_t i) { memo_[i] = top(); }
  void memo_get(std::uint64_t i) {
    const auto it = memo_.find(i);
    if (it == memo_.end()) fail("memo entry " + std::to_string(i) + " was never stored");
    push(it->second);
  }

  void add_items(const Ref& to, std::vector<Ref> items) {
    if (to->kind != Kind::kList && to->kind != Kind::kSet) fail("APPEND or ADDITEMS to a value that is no list");
    for (auto& x : items) to->items.push_back(std::move(x));
  }
  void set_items(const Ref& to, std::vector<Ref> kv) {
    if (to->kind != Kind::kDict) fail("SETITEM to a value that is no dict");
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    for (std::size_t i = 0; i < kv.size(); i += 2) to->entries.emplace_back(std::move(kv[i]), std::move(kv[i + 1]));
  }

  void step(unsigned char op);
  bool scalar(unsigned char op);
  bool container(unsigned char op);
  bool reference(unsigned char op);

  std::string_view d_;
  std::size_t pos_ = 0, op_at_ = 0, budget_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Ref> memo_;
};

// Framing, the stack, and the values that hold no others.
bool Reader::scalar(unsigned char op) {
  switch (op) {
    case 0x80: take(1); return true;  // PROTO
    case 0x95: take(8); return true;  // FRAME: a read-ahead hint
    case '(': marks_.push_back(stack_.size()); return true;
    case '0': pop(); return true;
    case '1': pop_mark(); return true;
    case '2': push(top()); return true;
    case 'N': push(make(Kind::kNone)); return true;
    case 0x88:
    case 0x89: {
      auto v = make(Kind::kBool);
      v->i = op == 0x88;
      push(v);
      return true;
    }
    case 'J': push(scalar_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(uint(4))))); return true;
    case 'K': push(scalar_int(static_cast<std::int64_t>(uint(1)))); return true;
    case 'M': push(scalar_int(static_cast<std::int64_t>(uint(2)))); return true;
    case 0x8a: push(signed_int(take(uint(1)))); return true;
    case 0x8b: push(signed_int(take(uint(4)))); return true;
    case 'G': {
      const auto s = take(8);
      std::uint64_t u = 0;
      for (unsigned char c : s) u = (u << 8) | c;  // big-endian
      auto v = make(Kind::kFloat);
      std::memcpy(&v->f, &u, sizeof v->f);
      push(v);
      return true;
    }
    case 0x8c: push(text(Kind::kStr, take(uint(1)))); return true;
    case 'X': push(text(Kind::kStr, take(uint(4)))); return true;
    case 0x8d: push(text(Kind::kStr, take(uint(8)))); return true;
    case 'U': push(text(Kind::kStr, take(uint(1)))); return true;  // SHORT_BINSTRING (protocol 2's str)
    case 'T': push(text(Kind::kStr, take(uint(4)))); return true;  // BINSTRING
    case 'C': push(text(Kind::kBytes, take(uint(1)))); return true;
    case 'B': push(text(Kind::kBytes, take(uint(4)))); return true;
    case 0x8e:
    case 0x96: push(text(Kind::kBytes, take(uint(8)))); return true;
    default: return false;
  }
}
// Tuples, lists, dicts and sets.
bool Reader::container(unsigned char op) {
  switch (op) {
    case ')': push(tuple({})); return true;
    case 0x85:
    case 0x86:
    case 0x87: {
      std::vector<Ref> items(op - 0x84);
      for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
      push(tuple(std::move(items)));
      return true;
    }
    case 't': push(tuple(pop_mark())); return true;
    case ']': push(make(Kind::kList)); return true;
    case 'l': {
      auto v = make(Kind::kList);
      v->items = pop_mark();
      push(v);
      return true;
    }
    case 'a': {
      auto x = pop();
      add_items(top(), {std::move(x)});
      return true;
    }
    case 'e':
    case 0x90: {
      auto items = pop_mark();
      add_items(top(), std::move(items));
      return true;
    }
    case '}': push(make(Kind::kDict)); return true;
    case 'd': {
      auto v = make(Kind::kDict);
      set_items(v, pop_mark());
      push(v);
      return true;
    }
    case 's': {
      auto value = pop();
      auto key = pop();
      set_items(top(), {std::move(key), std::move(value)});
      return true;
    }
    case 'u': {
      auto kv = pop_mark();
      set_items(top(), std::move(kv));
      return true;
    }
    case 0x8f: push(make(Kind::kSet)); return true;
    case 0x91: {
      auto v = make(Kind::kSet);
      v->items = pop_mark();
      push(v);
      return true;
    }
    default: return false;
  }
}
// Globals, the objects made of them, and the memo.
bool Reader::reference(unsigned char op) {
  switch (op) {
    case 'c': {
      const auto module = line();
      push(global(module, line()));
      return true;
    }
    case 0x93: {
      auto name = pop();
      auto module = pop();
      if (module->kind != Kind::kStr || name->kind != Kind::kStr) fail("STACK_GLOBAL of values that are not strings");
      push(global(module->s, name->s));
      return true;
    }
    case 'R':
    case 0x81: {
      auto args = pop();
      auto cls = pop();
      push(object(std::move(cls), args));
      return true;
    }
    case 0x92: {
      pop();  // kwargs: not kept
      auto args = pop();
      auto cls = pop();
      push(object(std::move(cls), args));
      return true;
    }
    case 'b': {
      auto state = pop();
      auto& obj = top();
      if (obj->kind != Kind::kObject) fail("BUILD on a value that is no object");
      obj->state = std::move(state);
      return true;
    }
    case 0x94: memo_put(memo_.size()); return true;
    case 'q': memo_put(uint(1)); return true;
    case 'r': memo_put(uint(4)); return true;
    case 'p': memo_put(decimal(line())); return true;
    case 'h': memo_get(uint(1)); return true;
    case 'j': memo_get(uint(4)); return true;
    case 'g': memo_get(decimal(line())); return true;
    default: return false;
  }
}
void Reader::step(unsigned char op) {
  if (scalar(op) || container(op) || reference(op)) return;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  fail(std::string("opcode ") + hex +
       " is not one anchor reads (a persistent ID, an extension code, an "
       "out-of-band buffer or a protocol 0 text value)");
}

}  // namespace

Ref load(std::string_view data, std::size_t max_values) { return Reader(data, max_values).run(); }

}  // namespace anchor::checkpoint::pickle
