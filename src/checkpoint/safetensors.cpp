#include "anchor/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <future>
#include <mutex>
#include <limits>
#include <memory>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor::checkpoint {

using nlohmann::json;

namespace {

struct DTypeInfo {
  DType d;
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4},   {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8}, {DType::I32, "I32", 4},   {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},   {DType::BOOL, "BOOL", 1},
};

// Chunk size for streaming: small enough that a chunk is still in cache when
// it is hashed right after being written or read.
constexpr std::size_t kChunk = 1u << 20;
// From this size on, write_safetensors hashes on a second thread.
constexpr std::uint64_t kParallelHashBytes = 4u << 20;
// write_safetensors starts writeback every this many bytes (sync_file_range).
constexpr std::uint64_t kWritebackBytes = 8u << 20;

// The hint names no policy (see SafetensorsFile::open): the store falls back
// to an older checkpoint, a weights file is re-downloaded; each caller says so.
// The message may quote the file's bytes (a JSON syntax error shows the token
// it stopped at) and the path may hold any byte: keep it valid UTF-8.
Error invalid(const std::string& name, const std::string& rule, const std::string& details) {
  return Error(ErrorKind::kVerification, printable(name + ": " + rule + ": " + details),
               "the file is corrupt, truncated or was not written by a safetensors writer");
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor of this dtype and shape; nullopt on overflow.
std::optional<std::uint64_t> byte_size(DType d, const std::vector<std::int64_t>& shape) {
  std::uint64_t n = dtype_size(d);
  for (auto dim : shape) {
    if (dim < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dim), &n)) return std::nullopt;
  }
  return n;
}

void put_le64(char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

struct Layout {
  std::string prefix;  // 8-byte length + padded header
  std::vector<const TensorRef*> order;
  std::uint64_t data_len = 0;
};

Layout plan(const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata) {
  Layout L;
  for (const auto& t : tensors) L.order.push_back(&t);
  std::sort(L.order.begin(), L.order.end(), [](const TensorRef* a, const TensorRef* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < L.order.size(); ++i) {
    const TensorRef& t = *L.order[i];
    if (t.name.empty()) throw Error(ErrorKind::kUsage, "safetensors write: a tensor has an empty name");
    if (t.name == "__metadata__")
      throw Error(ErrorKind::kUsage, "safetensors write: '__metadata__' is reserved, not a tensor name");
    if (i > 0 && L.order[i - 1]->name == t.name)
      throw Error(ErrorKind::kUsage, "safetensors write: duplicate tensor name '" + t.name + "'");
    auto want = byte_size(t.dtype, t.shape);
    if (!want)
      throw Error(ErrorKind::kUsage,
                  "safetensors write: tensor '" + t.name + "' has an invalid shape " + shape_str(t.shape));
    if (*want != t.nbytes)
      throw Error(ErrorKind::kUsage, "safetensors write: tensor '" + t.name + "' " + dtype_name(t.dtype) + " " +
                                         shape_str(t.shape) + " needs " + std::to_string(*want) + " bytes, got " +
                                         std::to_string(t.nbytes));
    if (t.nbytes > 0 && t.data == nullptr)
      throw Error(ErrorKind::kUsage, "safetensors write: tensor '" + t.name + "' has no data pointer");
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  L.data_len = off;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  L.prefix.resize(8);
  put_le64(L.prefix.data(), h.size());
  L.prefix += h;
  return L;
}

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& i : kDTypes)
    if (i.d == d) return i.name;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& i : kDTypes)
    if (s == i.name) return i.d;
  return std::nullopt;
}

std::size_t dtype_size(DType d) {
  for (const auto& i : kDTypes)
    if (i.d == d) return i.size;
  return 0;
}

std::string serialize_safetensors(const std::vector<TensorRef>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  Layout L = plan(tensors, metadata);
  std::string out = L.prefix;
  out.reserve(L.prefix.size() + L.data_len);
  for (const TensorRef* t : L.order) out.append(static_cast<const char*>(t->data), t->nbytes);
  return out;
}

FileDigest write_safetensors(fs::FileSystem& fs, const std::string& path, const std::vector<TensorRef>& tensors,
                             const std::map<std::string, std::string>& metadata, TensorDigests* per_tensor) {
  Layout L = plan(tensors, metadata);  // validates before touching the disk
  // Large files are hashed on a second thread while this one writes the same
  // source bytes: the save costs max(write, hash) instead of their sum. The
  // caller must not modify the tensors during the call (it is blocked in it).
  // Per tensor, the thread fills *per_tensor, read only after it is joined.
  auto hash_all = [&L, per_tensor] {
    if (per_tensor) {
      per_tensor->header = sha256_hex(L.prefix);
      per_tensor->tensors.clear();
      for (const TensorRef* t : L.order)
        per_tensor->tensors[t->name] = sha256_hex(std::string_view(static_cast<const char*>(t->data), t->nbytes));
      return std::string();
    }
    Sha256 sha;
    sha.update(L.prefix);
    for (const TensorRef* t : L.order) sha.update(t->data, t->nbytes);
    return sha.hex();
  };
  const bool parallel = L.data_len >= kParallelHashBytes;
  std::future<std::string> hashed;
  FileDigest d;
  fs::UniqueFd fd = fs.create_excl(path, 0644);
  try {
    if (parallel) hashed = std::async(std::launch::async, hash_all);
    std::uint64_t flushed = 0;
    auto put = [&](const void* p, std::size_t n) {
      const char* c = static_cast<const char*>(p);
      while (n > 0) {
        std::size_t k = std::min(n, kChunk);
        fs.write_all(fd.get(), c, k, path);
        c += k;
        n -= k;
        d.size += k;
        // Start writeback of what is written so far, so the disk works while
        // we keep writing and the final fsync has little left to do. A hint
        // only: errors surface in fsync, which is checked.
        if (d.size - flushed >= kWritebackBytes) {
          ::sync_file_range(fd.get(), static_cast<off_t>(flushed), static_cast<off_t>(d.size - flushed),
                            SYNC_FILE_RANGE_WRITE);
          flushed = d.size;
        }
      }
    };
    put(L.prefix.data(), L.prefix.size());
    for (const TensorRef* t : L.order) put(t->data, t->nbytes);
    fs.fsync(fd.get(), path);
    fs.close(std::move(fd), path);
  } catch (...) {
    ::unlink(path.c_str());
    throw;  // ~future joins the hashing thread
  }
  d.sha256 = parallel ? hashed.get() : hash_all();
  return d;
}

namespace {

// Reads an open regular file of `size` bytes (at open) to its end into a
// string, hashing each chunk right after it is read when `digest` is given.
std::string read_fd_hashed(int fd, std::size_t size, const std::string& path, FileDigest* digest) {
  std::string buf;
  buf.resize(size);
  Sha256 sha;
  std::size_t got = 0;
  for (;;) {
    if (got == buf.size()) buf.resize(buf.size() + kChunk);  // file grew: keep reading
    std::size_t want = std::min(kChunk, buf.size() - got);
    ssize_t n = ::read(fd, buf.data() + got, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("read", path, errno);
    }
    if (n == 0) break;
    if (digest) sha.update(buf.data() + got, static_cast<std::size_t>(n));
    got += static_cast<std::size_t>(n);
  }
  buf.resize(got);
  if (digest) {
    digest->size = got;
    digest->sha256 = sha.hex();
  }
  return buf;
}

// FileBytes::read maps a file of this size or more (a huge page) instead of
// reading it into a string.
constexpr std::size_t kHugePage = 2u << 20;

struct HugeMapping {
  void* map;
  std::size_t len;
  std::uint8_t* base;  // inside map, 2 MiB-aligned, room for n bytes
};

// Anonymous memory for n bytes that starts on a huge page.
HugeMapping map_huge_aligned(std::size_t n, const std::string& path) {
  HugeMapping h{};
  // Over-allocate by one huge page so the buffer can start 2 MiB-aligned.
  h.len = ((n + kHugePage - 1) / kHugePage) * kHugePage + kHugePage;
  void* m = ::mmap(nullptr, h.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw io_error("allocate buffer for", path, errno);
  h.map = m;
  const std::size_t misalign = reinterpret_cast<std::uintptr_t>(m) % kHugePage;
  h.base = static_cast<std::uint8_t*>(m) + (misalign ? kHugePage - misalign : 0);
#ifdef MADV_HUGEPAGE
  ::madvise(h.base, h.len - kHugePage, MADV_HUGEPAGE);  // advice only: fine if refused
#endif
  return h;
}

// How far a buffer is filled, shared by the thread that reads into it and the
// ones that hash behind it. `done` ends the hashers (also on a read error).
struct FillState {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t published = 0;
  bool done = false;

  void publish(std::size_t upto) {
    {
      std::lock_guard<std::mutex> lk(mu);
      published = upto;
    }
    cv.notify_all();
  }
  void finish() {
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
    }
    cv.notify_all();
  }
};

// Hashes `base` as far as `fill` publishes, until it is done.
std::string hash_behind(const std::uint8_t* base, FillState& fill) {
  Sha256 sha;
  std::size_t at = 0;
  for (;;) {
    std::size_t upto;
    bool fin;
    {
      std::unique_lock<std::mutex> lk(fill.mu);
      fill.cv.wait(lk, [&] { return fill.published > at || fill.done; });
      upto = fill.published;
      fin = fill.done;
    }
    if (upto > at) sha.update(base + at, upto - at);
    at = upto;
    if (fin && at == upto) {
      std::lock_guard<std::mutex> lk(fill.mu);
      if (fill.published == at) break;
    }
  }
  return sha.hex();
}

// Reads up to n bytes of fd into `base`, publishing each chunk to `fill`.
// Returns how many it read: fewer when the file ended early.
std::size_t read_publishing(int fd, std::uint8_t* base, std::size_t n, const std::string& path, FillState& fill) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t k = ::read(fd, base + got, std::min(4 * kChunk, n - got));
    if (k < 0) {
      if (errno == EINTR) continue;
      throw io_error("read", path, errno);
    }
    if (k == 0) break;
    got += static_cast<std::size_t>(k);
    fill.publish(got);
  }
  return got;
}

}  // namespace

std::string read_file_hashed(const std::string& path, FileDigest* digest) {
  struct stat st {};
  fs::UniqueFd fd = fs::open_regular(path, &st);
  return read_fd_hashed(fd.get(), static_cast<std::size_t>(st.st_size), path, digest);
}

FileBytes::FileBytes(std::string bytes) : str_(std::move(bytes)) {}

FileBytes::FileBytes(FileBytes&& o) noexcept
    : str_(std::move(o.str_)), map_(o.map_), map_len_(o.map_len_), base_(o.base_), size_(o.size_) {
  o.map_ = nullptr;
  o.map_len_ = o.size_ = 0;
  o.base_ = nullptr;
}

FileBytes& FileBytes::operator=(FileBytes&& o) noexcept {
  if (this != &o) {
    release();
    str_ = std::move(o.str_);
    map_ = o.map_;
    map_len_ = o.map_len_;
    base_ = o.base_;
    size_ = o.size_;
    o.map_ = nullptr;
    o.map_len_ = o.size_ = 0;
    o.base_ = nullptr;
  }
  return *this;
}

FileBytes::~FileBytes() { release(); }

void FileBytes::release() {
  if (map_) ::munmap(map_, map_len_);
  map_ = nullptr;
}

FileBytes FileBytes::read(const std::string& path, FileDigest* digest) {
  struct stat st {};
  fs::UniqueFd file = fs::open_regular(path, &st);
  const int fd = file.get();
  const std::size_t n = static_cast<std::size_t>(st.st_size);
  if (n < kHugePage) return FileBytes(read_fd_hashed(fd, n, path, digest));

  FileBytes b;
  const HugeMapping m = map_huge_aligned(n, path);
  b.map_ = m.map;
  b.map_len_ = m.len;
  b.base_ = m.base;
  // Read on this thread, hash on a second one that follows behind: the cost
  // is max(read, hash) instead of their sum.
  FillState fill;
  std::future<std::string> hashed;
  if (digest) hashed = std::async(std::launch::async, [&] { return hash_behind(b.base_, fill); });
  std::size_t got = 0;
  try {
    got = read_publishing(fd, b.base_, n, path, fill);
  } catch (...) {
    fill.finish();
    throw;  // ~future joins the hasher
  }
  fill.finish();
  std::string hex = digest ? hashed.get() : std::string();
  char extra;
  ssize_t more = ::read(fd, &extra, 1);
  if (got != n || more > 0)
    throw Error(ErrorKind::kIo, "read " + printable(path) + ": file changed size while it was read (" +
                                    std::to_string(n) + " bytes at open)");
  b.size_ = n;
  if (digest) {
    digest->size = n;
    digest->sha256 = std::move(hex);
  }
  return b;
}

TensorDigests hash_tensors(const SafetensorsFile& f, unsigned threads) {
  // One job per tensor, the largest first, so the last ones to finish are short.
  const auto& entries = f.entries();
  std::vector<std::size_t> order(entries.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].end - entries[a].begin > entries[b].end - entries[b].begin;
  });
  std::vector<std::string> hex(entries.size());
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::exception_ptr failed;
  auto work = [&] {
    try {
      for (std::size_t k; (k = next.fetch_add(1)) < order.size();) {
        const auto& e = entries[order[k]];
        hex[order[k]] = sha256_hex(
            std::string_view(reinterpret_cast<const char*>(f.data(e)), static_cast<std::size_t>(e.end - e.begin)));
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!failed) failed = std::current_exception();
    }
  };
  const std::size_t n = std::min<std::size_t>(std::max(1u, threads), entries.size());
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work);
  } catch (...) {  // fewer threads: the ones started and this one do the work
  }
  work();
  for (auto& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
  TensorDigests d;
  d.header = sha256_hex(f.header_bytes());
  for (std::size_t i = 0; i < entries.size(); ++i) d.tensors.emplace(entries[i].name, std::move(hex[i]));
  return d;
}

SafetensorsFile SafetensorsFile::open(const std::string& path, FileDigest* digest) {
  return parse(FileBytes::read(path, digest), path);
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, std::string name) {
  return parse(FileBytes(std::move(bytes)), std::move(name));
}

const SafetensorsFile::Entry* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const std::uint8_t* SafetensorsFile::data(const Entry& e) const { return bytes_.data() + 8 + header_len_ + e.begin; }

namespace {

// The header parser: one streaming pass over the JSON (nlohmann's SAX
// interface), no tree of the whole header. nlohmann's DOM parser with a
// callback (what this used to be) erases each discarded value by a linear
// scan of its parent, which made an n-tensor header O(n^2); a tree also costs
// ~70 bytes per header byte. Here each tensor is checked when its object
// ends, into an Entry, and the only memory that grows with the header is the
// entries themselves and the metadata. Problems are recorded, not thrown, so
// that the precedence stays what it was with a whole parsed tree: a syntax
// error first, then a duplicate key (the first in file order), then "not an
// object", then the schema error of the smallest key (the tree iterated its
// keys sorted).
class HeaderParser {
 public:
  using json_t = nlohmann::json;
  using string_t = json_t::string_t;

  struct Result {
    std::vector<SafetensorsFile::Entry> entries;  // file order
    std::vector<std::uint32_t> position;          // each entry's index among the top-level keys
    std::map<std::string, std::string> metadata;
    std::string syntax_error;         // nlohmann's message
    const char* root_type = nullptr;  // set when the root is not an object
    // The first duplicate key found inside a value (position: its top-level key's index).
    std::string dup_key, dup_where;
    std::uint64_t dup_position = ~0ull;
    // The schema error of the smallest key: (key, subkey) orders it.
    bool has_error = false;
    std::string error_key, error_subkey, error_rule, error_details;
  };

  explicit HeaderParser(std::uint64_t header_bytes) {
    // A tensor entry takes at least ~50 header bytes: reserve for a typical
    // header instead of growing through ~20 reallocations.
    r_.entries.reserve(static_cast<std::size_t>(header_bytes / 64));
    r_.position.reserve(static_cast<std::size_t>(header_bytes / 64));
  }
  Result& result() { return r_; }

  // --- SAX events (each scalar's text is made only when it is rendered) ---
  bool null() {
    return scalar(Kind::kNull, [] { return std::string("null"); });
  }
  bool boolean(bool v) {
    return scalar(Kind::kBool, [v] { return std::string(v ? "true" : "false"); });
  }
  bool number_integer(json_t::number_integer_t v) {
    return scalar(Kind::kInt, [v] { return std::to_string(v); });
  }
  bool number_unsigned(json_t::number_unsigned_t v) {
    unsigned_value_ = v;
    return scalar(Kind::kUnsigned, [v] { return std::to_string(v); });
  }
  bool number_float(json_t::number_float_t v, const string_t&) {
    return scalar(Kind::kFloat, [v] { return json_t(v).dump(); });
  }
  bool string(string_t& v) {
    string_value_ = &v;  // value() may move it (dtype, metadata); a rendered string is never moved
    return scalar(Kind::kString, [&v] { return json_t(v).dump(); });
  }
  bool binary(json_t::binary_t&) {
    return scalar(Kind::kNull, [] { return std::string("null"); });
  }  // not in JSON text
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k);
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    r_.syntax_error = e.what();
    return false;
  }

 private:
  enum class Kind { kNull, kBool, kInt, kUnsigned, kFloat, kString, kObject, kArray };
  // What a container is to the header: the top-level object, __metadata__, a
  // tensor entry, a tensor's shape or data_offsets list, or anything else
  // (only checked for duplicate keys, and rendered inside a shape/offsets).
  enum class Role { kTop, kMeta, kTensor, kShape, kOffsets, kOther };
  enum Field : unsigned { kNone = 0, kDtype = 1, kShapeField = 2, kOffsetsField = 4, kUnknownField = 8 };

  struct Frame {
    Role role;
    bool is_object;
    std::unique_ptr<std::set<std::string>> keys;  // kOther objects: for duplicate detection
  };

  // The tensor entry being read (one at a time: tensors are not nested).
  struct Tensor {
    unsigned seen = 0;                               // Field bits
    std::string min_unknown;                         // the smallest unknown field
    std::unique_ptr<std::set<std::string>> unknown;  // unknown fields, for duplicates
    const char* dtype_type = nullptr;                // JSON type when dtype is not a string
    std::string dtype;
    const char* shape_type = nullptr;  // JSON type when shape is not an array
    bool shape_ok = true;
    std::vector<std::int64_t> dims;
    std::string shape_text;  // rendered only once the shape is known to be bad
    bool offsets_ok = true;
    std::size_t n_offsets = 0;
    std::uint64_t offsets[2] = {0, 0};
    std::string offsets_text;  // likewise
    void reset() {
      seen = 0;
      unknown.reset();
      dtype_type = shape_type = nullptr;
      dtype.clear();
      shape_ok = offsets_ok = true;
      dims.clear();
      shape_text.clear();
      offsets_text.clear();
      n_offsets = 0;
    }
  };

  // Compact rendering of a bad shape or data_offsets value for messages (what
  // json::dump() printed), capped: a message never holds a megabyte list.
  struct Render {
    static constexpr std::size_t kCap = 200;
    std::string* out = nullptr;  // rendering while set
    std::vector<char> wrote;     // per open container: an element was written
    bool after_key = false;
    std::size_t depth = 0;  // stack size at which the rendered value ends
    void put(std::string_view s) {
      if (out->size() >= kCap) return;
      out->append(s.substr(0, kCap - out->size()));
      if (out->size() >= kCap) out->append("...");
    }
    void before_value() {
      if (!wrote.empty() && !after_key && wrote.back()) put(",");
      if (!wrote.empty()) wrote.back() = 1;
      after_key = false;
    }
  };

  static const char* type_name(Kind k) {
    switch (k) {
      case Kind::kNull: return "null";
      case Kind::kBool: return "boolean";
      case Kind::kInt:
      case Kind::kUnsigned:
      case Kind::kFloat: return "number";
      case Kind::kString: return "string";
      case Kind::kObject: return "object";
      case Kind::kArray: return "array";
    }
    return "?";
  }

  std::uint32_t top_index() const { return static_cast<std::uint32_t>(top_keys_ - 1); }

  void error(const std::string& key, const std::string& subkey, const char* rule, std::string details) {
    if (r_.has_error && std::tie(r_.error_key, r_.error_subkey) <= std::tie(key, subkey)) return;
    r_.has_error = true;
    r_.error_key = key;
    r_.error_subkey = subkey;
    r_.error_rule = rule;
    r_.error_details = std::move(details);
  }
  void duplicate(const std::string& k) {
    if (r_.dup_position != ~0ull) return;  // the first one found wins
    r_.dup_position = top_index();
    r_.dup_key = k;
    r_.dup_where = "inside '" + top_key_ + "'";
  }

  // Starts rendering the value of a shape/data_offsets into `text`: from its
  // start (a value that is not a list), or, inside the list, from the
  // elements collected so far (all of them fine until now).
  template <class T>
  void start_render(std::string& text, bool in_list, const T* values, std::size_t n) {
    text.clear();
    render_.out = &text;
    render_.wrote.clear();
    render_.after_key = false;
    if (in_list) {
      render_.depth = stack_.size() - 1;
      render_.put("[");
      for (std::size_t i = 0; i < n && text.size() < Render::kCap; ++i) {
        if (i) render_.put(",");
        render_.put(std::to_string(values[i]));
      }
      render_.wrote.push_back(static_cast<char>(n > 0));
    } else {
      render_.depth = stack_.size();
    }
  }

  void value(Kind kind);
  void tensor_value(Kind kind);
  template <class Text>
  bool scalar(Kind kind, const Text& text) {
    value(kind);
    if (render_.out) {
      render_.before_value();
      render_.put(text());
      if (render_.wrote.empty()) render_.out = nullptr;  // a scalar shape/data_offsets: done
    }
    string_value_ = nullptr;
    return true;
  }
  bool open(bool is_object);
  bool close();
  void finish_tensor();

  Result r_;
  std::vector<Frame> stack_;
  Role next_role_ = Role::kOther;  // the role of the container value() saw start
  std::uint64_t top_keys_ = 0;
  std::string top_key_;  // the current top-level key
  bool top_is_meta_ = false;
  unsigned field_ = kNone;  // the current key inside a tensor
  std::string meta_key_;    // the current key inside __metadata__
  bool meta_seen_ = false;
  Tensor t_;
  Render render_;
  std::uint64_t unsigned_value_ = 0;
  string_t* string_value_ = nullptr;
};

bool HeaderParser::key(string_t& k) {
  Frame& f = stack_.back();
  if (render_.out) {
    render_.before_value();  // the comma before a key
    render_.put(json_t(k).dump());
    render_.put(":");
    render_.after_key = true;
  }
  switch (f.role) {
    case Role::kTop:
      ++top_keys_;
      top_key_.assign(k);  // reuses its capacity: no allocation per key
      top_is_meta_ = std::string_view(k) == "__metadata__";
      if (top_is_meta_) {
        if (meta_seen_ && r_.dup_position == ~0ull) {
          r_.dup_position = top_index();
          r_.dup_key = k;
          r_.dup_where = "at the top level";
        }
        meta_seen_ = true;
      } else {
        r_.entries.emplace_back();
        r_.entries.back().name = k;
        r_.position.push_back(top_index());
      }
      break;
    case Role::kMeta: {
      auto [it, inserted] = r_.metadata.try_emplace(k);
      if (!inserted) duplicate(k);
      meta_key_.assign(k);
      break;
    }
    case Role::kTensor: {
      const std::string_view sk(k);
      field_ = sk == "dtype"          ? kDtype
               : sk == "shape"        ? kShapeField
               : sk == "data_offsets" ? kOffsetsField
                                      : kUnknownField;
      if (field_ != kUnknownField) {
        if (t_.seen & field_) duplicate(k);
      } else {
        if (!t_.unknown) t_.unknown = std::make_unique<std::set<std::string>>();
        if (!t_.unknown->insert(k).second) duplicate(k);
        if (!(t_.seen & kUnknownField) || k < t_.min_unknown) t_.min_unknown = k;
      }
      t_.seen |= field_;
      break;
    }
    default:
      if (f.is_object) {
        if (!f.keys) f.keys = std::make_unique<std::set<std::string>>();
        if (!f.keys->insert(k).second) duplicate(k);
      }
      break;
  }
  return true;
}

// A value (a scalar, or the start of a container) in the current context;
// sets next_role_ to the role of a container it starts.
void HeaderParser::value(Kind kind) {
  next_role_ = Role::kOther;
  if (stack_.empty()) {  // the root
    if (kind == Kind::kObject)
      next_role_ = Role::kTop;
    else
      r_.root_type = type_name(kind);
    return;
  }
  Frame& f = stack_.back();
  switch (f.role) {
    case Role::kTop:
      if (top_is_meta_) {
        if (kind == Kind::kObject)
          next_role_ = Role::kMeta;
        else
          error(top_key_, "", "__metadata__ is not an object of strings",
                std::string("found a JSON ") + type_name(kind));
      } else if (kind == Kind::kObject) {
        t_.reset();
        next_role_ = Role::kTensor;
      } else {
        error(top_key_, "", "bad tensor entry",
              "tensor '" + top_key_ + "' is a JSON " + type_name(kind) + ", expected an object");
      }
      return;
    case Role::kMeta:
      if (kind == Kind::kString)
        r_.metadata[meta_key_] = std::move(*string_value_);
      else
        error(top_key_, meta_key_, "__metadata__ is not an object of strings",
              "value of '" + meta_key_ + "' is a JSON " + type_name(kind) + ", expected a string");
      return;
    case Role::kTensor: tensor_value(kind); return;
    case Role::kShape:
      if (render_.out) return;  // already bad: the rest is only rendered
      if (kind == Kind::kUnsigned &&
          unsigned_value_ <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        t_.dims.push_back(static_cast<std::int64_t>(unsigned_value_));
      } else {
        t_.shape_ok = false;
        start_render(t_.shape_text, true, t_.dims.data(), t_.dims.size());
      }
      return;
    case Role::kOffsets:
      if (render_.out) return;
      if (kind == Kind::kUnsigned && t_.n_offsets < 2) {
        t_.offsets[t_.n_offsets++] = unsigned_value_;
      } else {
        t_.offsets_ok = false;
        start_render(t_.offsets_text, true, t_.offsets, t_.n_offsets);
      }
      return;
    case Role::kOther: return;
  }
}

// The value of a tensor entry's field: dtype, shape or data_offsets (an
// unknown field's value is skipped).
void HeaderParser::tensor_value(Kind kind) {
  if (field_ == kDtype) {
    if (kind == Kind::kString) {
      t_.dtype_type = nullptr;
      t_.dtype = std::move(*string_value_);
    } else {
      t_.dtype_type = type_name(kind);
    }
  } else if (field_ == kShapeField) {
    t_.dims.clear();
    t_.shape_ok = kind == Kind::kArray;
    t_.shape_type = t_.shape_ok ? nullptr : type_name(kind);
    if (t_.shape_ok)
      next_role_ = Role::kShape;
    else
      start_render(t_.shape_text, false, t_.dims.data(), 0);
  } else if (field_ == kOffsetsField) {
    t_.n_offsets = 0;
    t_.offsets_ok = kind == Kind::kArray;
    t_.offsets_text.clear();
    if (t_.offsets_ok)
      next_role_ = Role::kOffsets;
    else
      start_render(t_.offsets_text, false, t_.offsets, 0);
  }
}

bool HeaderParser::open(bool is_object) {
  // A header nests 3 levels (tensor entry, shape); 100 MiB of '[' would hold
  // ~1.6 GB of frames before the syntax error at its end.
  if (stack_.size() >= kMaxJsonDepth) {
    r_.syntax_error = "arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }
  value(is_object ? Kind::kObject : Kind::kArray);
  if (render_.out) {
    render_.before_value();
    render_.put(is_object ? "{" : "[");
    render_.wrote.push_back(0);
  }
  stack_.push_back(Frame{next_role_, is_object, nullptr});
  return true;
}

bool HeaderParser::close() {
  const Role role = stack_.back().role;
  const bool is_object = stack_.back().is_object;
  stack_.pop_back();
  if (render_.out) {
    render_.put(is_object ? "}" : "]");
    render_.wrote.pop_back();
    if (stack_.size() == render_.depth) render_.out = nullptr;
  }
  if (role == Role::kTensor) finish_tensor();
  return true;
}

// A tensor entry is complete: check it in the order the tree-based parser did.
void HeaderParser::finish_tensor() {
  const std::string& key = top_key_;
  auto bad = [&](const char* rule, const std::string& details) {
    error(key, "", rule, "tensor '" + key + "'" + details);
  };
  if (t_.seen & kUnknownField)
    return bad("bad tensor entry", " has unknown field '" + t_.min_unknown + "' (expected dtype, shape, data_offsets)");
  if (!(t_.seen & kDtype)) return bad("bad tensor entry", " has no 'dtype'");
  if (!(t_.seen & kShapeField)) return bad("bad tensor entry", " has no 'shape'");
  if (!(t_.seen & kOffsetsField)) return bad("bad tensor entry", " has no 'data_offsets'");
  if (t_.dtype_type) return bad("unknown dtype", std::string(" dtype is a JSON ") + t_.dtype_type);
  auto d = dtype_from_name(t_.dtype);
  if (!d)
    return bad("unknown dtype",
               " has dtype '" + t_.dtype + "' (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  if (t_.shape_type) return bad("bad shape", std::string(" shape is a JSON ") + t_.shape_type);
  if (!t_.shape_ok) return bad("bad shape", " shape " + t_.shape_text + " is not a list of non-negative integers");
  if (!t_.offsets_ok || t_.n_offsets != 2) {
    if (t_.offsets_text.empty()) {  // a list of fewer than two non-negative integers: never rendered
      t_.offsets_text = "[";
      for (std::size_t i = 0; i < t_.n_offsets; ++i) t_.offsets_text += (i ? "," : "") + std::to_string(t_.offsets[i]);
      t_.offsets_text += "]";
    }
    return bad("bad data_offsets",
               " data_offsets " + t_.offsets_text + " is not [begin, end] of non-negative integers");
  }
  SafetensorsFile::Entry& e = r_.entries.back();  // this tensor's, pushed at its key
  e.dtype = *d;
  e.shape = t_.dims;  // a copy sized exactly; t_.dims keeps its capacity for the next tensor
  e.begin = t_.offsets[0];
  e.end = t_.offsets[1];
  if (e.begin > e.end)
    return bad("bad data_offsets", " begin " + std::to_string(e.begin) + " > end " + std::to_string(e.end));
  auto want = byte_size(e.dtype, e.shape);
  if (!want) return bad("shape/byte-length mismatch", " shape " + shape_str(e.shape) + " overflows");
  if (*want != e.end - e.begin)
    return bad("shape/byte-length mismatch", std::string(" ") + dtype_name(e.dtype) + " " + shape_str(e.shape) +
                                                 " needs " + std::to_string(*want) + " bytes, data_offsets [" +
                                                 std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
                                                 std::to_string(e.end - e.begin));
}

// Reorders `v` so that v[k] becomes the old v[order[k]] (order is consumed).
template <class T>
void permute(std::vector<T>& v, std::vector<std::uint32_t>& order) {
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (order[k] == k) continue;
    T held = std::move(v[k]);
    std::size_t j = k;
    for (;;) {
      std::size_t src = order[j];
      order[j] = static_cast<std::uint32_t>(j);
      if (src == k) {
        v[j] = std::move(held);
        break;
      }
      v[j] = std::move(v[src]);
      j = src;
    }
  }
}

// The header length a file of `size` bytes starts with (little-endian u64),
// checked against the limit and the file's size.
std::uint64_t header_length(const char* raw, std::uint64_t size, const std::string& name) {
  if (size < 8)
    throw invalid(name, "truncated header length",
                  "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(raw[i]);
  if (n > kMaxHeaderBytes)
    throw invalid(
        name, "header too large",
        "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    throw invalid(name, "header length past end of file",
                  "header length " + std::to_string(n) + " needs " + std::to_string(8 + n) + " bytes but the file is " +
                      std::to_string(size) + " bytes");
  return n;
}

// The entries' indices sorted by name (stable in file order; a writer that
// sorts, like ours, is already sorted).
std::vector<std::uint32_t> name_order(const HeaderParser::Result& r) {
  std::vector<std::uint32_t> order(r.entries.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  const auto by_name = [&](std::uint32_t a, std::uint32_t b) { return r.entries[a].name < r.entries[b].name; };
  if (!std::is_sorted(order.begin(), order.end(), by_name)) std::stable_sort(order.begin(), order.end(), by_name);
  return order;
}

// What the parser found wrong, in this order: a duplicate key, a root that is
// not an object, a bad entry.
void check_header(const HeaderParser::Result& r, const std::vector<std::uint32_t>& order, const std::string& name) {
  // Duplicate tensor names: the first second occurrence in file order is the
  // one reported, unless a duplicate inside a value came first.
  std::uint64_t top_dup = ~0ull;
  std::string top_dup_key;
  for (std::size_t k = 1; k < order.size(); ++k) {
    const auto& a = r.entries[order[k - 1]];
    const auto& b = r.entries[order[k]];
    if (a.name == b.name && r.position[order[k]] < top_dup) {
      top_dup = r.position[order[k]];
      top_dup_key = b.name;
    }
  }
  if (top_dup != ~0ull && top_dup <= r.dup_position)
    throw invalid(name, "duplicate key", "'" + top_dup_key + "' appears twice at the top level");
  if (r.dup_position != ~0ull) throw invalid(name, "duplicate key", "'" + r.dup_key + "' appears twice " + r.dup_where);
  if (r.root_type) throw invalid(name, "header is not a JSON object", std::string("found a JSON ") + r.root_type);
  if (r.has_error) throw invalid(name, r.error_rule, r.error_details);
}

// The tensors must tile [0, data_len) exactly: no gap, no overlap, no tail.
void check_tiling(const std::vector<SafetensorsFile::Entry>& entries, std::uint64_t n, std::uint64_t size,
                  const std::string& name) {
  using Entry = SafetensorsFile::Entry;
  const std::uint64_t data_len = size - 8 - n;
  std::vector<const Entry*> by_off;
  by_off.reserve(entries.size());
  for (const auto& e : entries) by_off.push_back(&e);
  const auto off_less = [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  };
  if (!std::is_sorted(by_off.begin(), by_off.end(), off_less)) std::sort(by_off.begin(), by_off.end(), off_less);
  std::uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_off) {
    if (e->begin < pos)
      throw invalid(name, "overlapping data_offsets",
                    "tensor '" + e->name + "' begins at " + std::to_string(e->begin) + " but tensor '" + prev->name +
                        "' ends at " + std::to_string(pos));
    if (e->begin > pos)
      throw invalid(name, "gap in data_offsets",
                    "tensor '" + e->name + "' begins at " + std::to_string(e->begin) + ", expected " +
                        std::to_string(pos) +
                        (prev ? " (end of tensor '" + prev->name + "')" : std::string(" (start of data)")));
    pos = e->end;
    prev = e;
  }
  if (pos != data_len)
    throw invalid(name, "file length mismatch",
                  "expected 8 + " + std::to_string(n) + " header + " + std::to_string(pos) +
                      " data = " + std::to_string(8 + n + pos) + " bytes, file is " + std::to_string(size) + " bytes");
}

}  // namespace

namespace {

struct ParsedHeader {
  std::uint64_t len = 0;
  std::vector<SafetensorsFile::Entry> entries;  // by name
  std::map<std::string, std::string> metadata;
};

// Every rule of SafetensorsFile::parse, for a file of `size` bytes of which
// only the first 8 + header length need to be in `raw` (the tensors' data
// is not read: the tiling is checked against `size`).
ParsedHeader parse_header(const char* raw, std::uint64_t size, const std::string& name) {
  const std::uint64_t n = header_length(raw, size, name);
  HeaderParser parser(n);
  json::sax_parse(raw + 8, raw + 8 + n, &parser);
  HeaderParser::Result& r = parser.result();
  if (!r.syntax_error.empty()) throw invalid(name, "header is not valid JSON", r.syntax_error);
  std::vector<std::uint32_t> order = name_order(r);
  check_header(r, order, name);
  ParsedHeader h;
  h.len = n;
  h.metadata = std::move(r.metadata);
  std::vector<std::uint32_t>().swap(r.position);
  permute(r.entries, order);
  std::vector<std::uint32_t>().swap(order);
  h.entries = std::move(r.entries);
  check_tiling(h.entries, n, size, name);
  return h;
}

// One read of `size` bytes into `buf` from fd: all of them, or the file ended (fewer).
std::size_t read_full(int fd, char* buf, std::size_t size, const std::string& path) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, buf + got, size - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("read", path, errno);
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

// The tensors of a parsed header in file order, each hashed as its bytes stream past.
class StreamedTensors {
 public:
  explicit StreamedTensors(const ParsedHeader& h) : h_(h) {
    for (std::size_t i = 0; i < h.entries.size(); ++i) order_.push_back(i);
    std::sort(order_.begin(), order_.end(),
              [&](std::size_t a, std::size_t b) { return h.entries[a].begin < h.entries[b].begin; });
    hex_.resize(h.entries.size());
    open_next();
  }
  // Bytes of the data section from offset `at` on.
  void feed(const char* p, std::size_t n, std::uint64_t at) {
    while (n > 0 && k_ < order_.size()) {
      const auto& e = h_.entries[order_[k_]];
      const std::uint64_t take = std::min<std::uint64_t>(n, e.end - at);
      sha_->update(p, static_cast<std::size_t>(take));
      p += take, n -= static_cast<std::size_t>(take), at += take;
      if (at == e.end) {
        hex_[order_[k_]] = sha_->hex();
        ++k_;
        open_next();
      }
    }
  }
  TensorDigests finish(std::string header_hex) {
    TensorDigests d;
    d.header = std::move(header_hex);
    for (std::size_t i = 0; i < hex_.size(); ++i) d.tensors.emplace(h_.entries[i].name, std::move(hex_[i]));
    return d;
  }

 private:
  void open_next() {  // empty tensors end where they begin: hashed at once
    while (k_ < order_.size() && h_.entries[order_[k_]].begin == h_.entries[order_[k_]].end)
      hex_[order_[k_++]] = sha256_hex(std::string_view());
    if (k_ < order_.size()) sha_ = std::make_unique<Sha256>();
  }
  const ParsedHeader& h_;
  std::vector<std::size_t> order_;
  std::vector<std::string> hex_;
  std::size_t k_ = 0;
  std::unique_ptr<Sha256> sha_;
};

// The hashing side of FileBytes::read_hashing_tensors: several threads behind
// one reader. The first to start parses the header once its bytes are in;
// then each takes the next tensor in file order and hashes it once the reader
// has its last byte. Gives up (leaving the caller to parse and report) when
// the header does not parse or the file ends early.
class TensorHasher {
 public:
  TensorHasher(const std::uint8_t* base, std::size_t size, const std::string& path, FillState& fill)
      : base_(base), size_(size), path_(path), fill_(fill) {}

  // Never throws (it runs on a thread of its own): a tensor it could not
  // hash (no memory for its digest) is left empty, and the caller hashes the
  // file once it is parsed instead.
  void run() noexcept {
    try {
      hash_in_file_order();
    } catch (...) {
    }
  }

  // After every thread is joined and the whole file was read: the digests,
  // or nullopt when the hashers gave up.
  std::optional<TensorDigests> digests() {
    if (!parsed_ || next_.load() < by_offset_.size()) return std::nullopt;
    for (const auto& h : hex_)
      if (h.empty()) return std::nullopt;
    TensorDigests d;
    d.header =
        sha256_hex(std::string_view(reinterpret_cast<const char*>(base_), static_cast<std::size_t>(8 + header_.len)));
    for (std::size_t i = 0; i < hex_.size(); ++i) d.tensors.emplace(header_.entries[i].name, std::move(hex_[i]));
    return d;
  }

 private:
  void hash_in_file_order() {
    if (!header_ready()) return;
    for (std::size_t k; (k = next_.fetch_add(1)) < by_offset_.size();) {
      const auto& e = header_.entries[by_offset_[k]];
      const std::uint64_t from = 8 + header_.len + e.begin, to = 8 + header_.len + e.end;
      if (!filled(to)) return;
      hex_[by_offset_[k]] = sha256_hex(
          std::string_view(reinterpret_cast<const char*>(base_ + from), static_cast<std::size_t>(to - from)));
    }
  }

  // Whether the reader has filled `upto` bytes (waits for it; false when it stopped short).
  bool filled(std::uint64_t upto) {
    std::unique_lock<std::mutex> lk(fill_.mu);
    fill_.cv.wait(lk, [&] { return fill_.published >= upto || fill_.done; });
    return fill_.published >= upto;
  }

  bool header_ready() {
    std::unique_lock<std::mutex> lk(mu_);
    if (started_) {
      ready_cv_.wait(lk, [&] { return ready_; });
      return parsed_;
    }
    started_ = true;
    lk.unlock();
    bool ok = false;
    try {
      const char* raw = reinterpret_cast<const char*>(base_);
      if (filled(8) && filled(8 + header_length(raw, size_, path_))) {
        header_ = parse_header(raw, size_, path_);
        by_offset_.resize(header_.entries.size());
        for (std::size_t i = 0; i < by_offset_.size(); ++i) by_offset_[i] = i;
        std::sort(by_offset_.begin(), by_offset_.end(),
                  [&](std::size_t a, std::size_t b) { return header_.entries[a].begin < header_.entries[b].begin; });
        hex_.assign(header_.entries.size(), std::string());
        ok = true;
      }
    } catch (...) {  // not safetensors: the caller's parse says why
    }
    lk.lock();
    parsed_ = ok;
    ready_ = true;
    ready_cv_.notify_all();
    return parsed_;
  }

  const std::uint8_t* base_;
  const std::size_t size_;
  const std::string& path_;
  FillState& fill_;
  std::mutex mu_;
  std::condition_variable ready_cv_;
  bool started_ = false, ready_ = false, parsed_ = false;
  ParsedHeader header_;
  std::vector<std::size_t> by_offset_;
  std::vector<std::string> hex_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace

FileBytes FileBytes::read_hashing_tensors(const std::string& path, unsigned threads,
                                          std::optional<TensorDigests>* digests) {
  digests->reset();
  struct stat st {};
  fs::UniqueFd file = fs::open_regular(path, &st);
  const int fd = file.get();
  const std::size_t n = static_cast<std::size_t>(st.st_size);
  if (n < kHugePage) return FileBytes(read_fd_hashed(fd, n, path, nullptr));  // small: hashed after parsing

  FileBytes b;
  const HugeMapping m = map_huge_aligned(n, path);
  b.map_ = m.map;
  b.map_len_ = m.len;
  b.base_ = m.base;
  FillState fill;
  TensorHasher hasher(b.base_, n, path, fill);
  std::vector<std::thread> pool;
  // The hashers end when the reader is done (or fails): joined on every path.
  struct Join {
    FillState& fill;
    std::vector<std::thread>& pool;
    ~Join() {
      fill.finish();
      for (auto& t : pool) t.join();
    }
  } join{fill, pool};
  try {
    for (unsigned t = 0; t < std::max(1u, threads); ++t) pool.emplace_back([&] { hasher.run(); });
  } catch (...) {  // fewer threads, or none: what is not hashed here is hashed after parsing
  }
  const std::size_t got = read_publishing(fd, b.base_, n, path, fill);
  char extra;
  const ssize_t more = ::read(fd, &extra, 1);
  if (got != n || more > 0)
    throw Error(ErrorKind::kIo, "read " + printable(path) + ": file changed size while it was read (" +
                                    std::to_string(n) + " bytes at open)");
  b.size_ = n;
  fill.finish();
  for (auto& t : pool) t.join();
  pool.clear();
  *digests = hasher.digests();
  return b;
}

StreamedFile stream_file(const std::string& path, bool safetensors, bool per_tensor) {
  struct stat st {};
  fs::UniqueFd file = fs::open_regular(path, &st);
  const int fd = file.get();
  const auto size = static_cast<std::uint64_t>(st.st_size);
  StreamedFile out;
  Sha256 whole;
  // The header first (8 bytes and at most kMaxHeaderBytes): parsed against the file's size.
  std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(size, 8)), '\0');
  std::uint64_t got = read_full(fd, head.data(), head.size(), path);
  std::optional<ParsedHeader> h;
  if (safetensors) {
    try {
      const std::uint64_t n = header_length(head.data(), size, path);
      head.resize(static_cast<std::size_t>(8 + n));
      got += read_full(fd, head.data() + 8, static_cast<std::size_t>(n), path);
      if (got == head.size()) h = parse_header(head.data(), size, path);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kIo) throw;
      out.problem = e.what();
    }
    head.resize(static_cast<std::size_t>(got));
  }
  const bool tensors = per_tensor && h;
  std::optional<StreamedTensors> streamed;
  if (tensors) streamed.emplace(*h);
  if (!per_tensor) whole.update(head);
  const std::uint64_t data_start = h ? 8 + h->len : 0;
  std::vector<char> chunk(kChunk);
  for (;;) {
    const std::size_t n = read_full(fd, chunk.data(), chunk.size(), path);
    if (n == 0) break;
    if (!per_tensor) whole.update(chunk.data(), n);
    if (streamed && got + n <= size) streamed->feed(chunk.data(), n, got - data_start);
    got += n;
  }
  if (got != size)
    throw Error(ErrorKind::kIo, "read " + printable(path) + ": file changed size while it was read (" +
                                    std::to_string(size) + " bytes at open, " + std::to_string(got) + " read)");
  out.digest.size = size;
  if (!per_tensor) out.digest.sha256 = whole.hex();
  if (streamed) out.tensors = streamed->finish(sha256_hex(head));
  return out;
}

SafetensorsFile SafetensorsFile::parse(FileBytes bytes, std::string name) {
  ParsedHeader h = parse_header(reinterpret_cast<const char*>(bytes.data()), bytes.size(), name);
  SafetensorsFile f;
  f.metadata_ = std::move(h.metadata);
  f.entries_ = std::move(h.entries);
  f.name_ = std::move(name);
  f.header_len_ = h.len;
  f.bytes_ = std::move(bytes);
  return f;
}

}  // namespace anchor::checkpoint
