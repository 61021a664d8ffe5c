#include "anchor/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <future>
#include <mutex>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

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
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

// Chunk size for streaming: small enough that a chunk is still in cache when
// it is hashed right after being written or read.
constexpr std::size_t kChunk = 1u << 20;
// From this size on, write_safetensors hashes on a second thread.
constexpr std::uint64_t kParallelHashBytes = 4u << 20;
// write_safetensors starts writeback every this many bytes (sync_file_range).
constexpr std::uint64_t kWritebackBytes = 8u << 20;

Error invalid(const std::string& name, const std::string& rule, const std::string& details) {
  return Error(ErrorKind::kVerification, name + ": " + rule + ": " + details,
               "the file is corrupt, truncated or was not written by a safetensors writer; "
               "restore falls back to an older checkpoint");
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

Layout plan(const std::vector<TensorRef>& tensors,
            const std::map<std::string, std::string>& metadata) {
  Layout L;
  for (const auto& t : tensors) L.order.push_back(&t);
  std::sort(L.order.begin(), L.order.end(),
            [](const TensorRef* a, const TensorRef* b) { return a->name < b->name; });
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < L.order.size(); ++i) {
    const TensorRef& t = *L.order[i];
    if (t.name.empty())
      throw Error(ErrorKind::kUsage, "safetensors write: a tensor has an empty name");
    if (t.name == "__metadata__")
      throw Error(ErrorKind::kUsage, "safetensors write: '__metadata__' is reserved, not a tensor name");
    if (i > 0 && L.order[i - 1]->name == t.name)
      throw Error(ErrorKind::kUsage, "safetensors write: duplicate tensor name '" + t.name + "'");
    auto want = byte_size(t.dtype, t.shape);
    if (!want)
      throw Error(ErrorKind::kUsage, "safetensors write: tensor '" + t.name + "' has an invalid shape " +
                                         shape_str(t.shape));
    if (*want != t.nbytes)
      throw Error(ErrorKind::kUsage,
                  "safetensors write: tensor '" + t.name + "' " + dtype_name(t.dtype) + " " +
                      shape_str(t.shape) + " needs " + std::to_string(*want) + " bytes, got " +
                      std::to_string(t.nbytes));
    if (t.nbytes > 0 && t.data == nullptr)
      throw Error(ErrorKind::kUsage, "safetensors write: tensor '" + t.name + "' has no data pointer");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {off, off + t.nbytes}}};
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

FileDigest write_safetensors(fs::FileSystem& fs, const std::string& path,
                             const std::vector<TensorRef>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  Layout L = plan(tensors, metadata);  // validates before touching the disk
  // Large files are hashed on a second thread while this one writes the same
  // source bytes: the save costs max(write, hash) instead of their sum. The
  // caller must not modify the tensors during the call (it is blocked in it).
  auto hash_all = [&L] {
    Sha256 sha;
    sha.update(L.prefix);
    for (const TensorRef* t : L.order) sha.update(t->data, t->nbytes);
    return sha.hex();
  };
  const bool parallel = L.data_len >= kParallelHashBytes;
  std::future<std::string> hashed;
  FileDigest d;
  int fd = fs.create_excl(path, 0644);
  try {
    if (parallel) hashed = std::async(std::launch::async, hash_all);
    std::uint64_t flushed = 0;
    auto put = [&](const void* p, std::size_t n) {
      const char* c = static_cast<const char*>(p);
      while (n > 0) {
        std::size_t k = std::min(n, kChunk);
        fs.write_all(fd, c, k, path);
        c += k;
        n -= k;
        d.size += k;
        // Start writeback of what is written so far, so the disk works while
        // we keep writing and the final fsync has little left to do. A hint
        // only: errors surface in fsync, which is checked.
        if (d.size - flushed >= kWritebackBytes) {
          ::sync_file_range(fd, static_cast<off_t>(flushed), static_cast<off_t>(d.size - flushed),
                            SYNC_FILE_RANGE_WRITE);
          flushed = d.size;
        }
      }
    };
    put(L.prefix.data(), L.prefix.size());
    for (const TensorRef* t : L.order) put(t->data, t->nbytes);
    fs.fsync(fd, path);
    int f = fd;
    fd = -1;
    fs.close(f, path);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    throw;  // ~future joins the hashing thread
  }
  d.sha256 = parallel ? hashed.get() : hash_all();
  return d;
}

std::string read_file_hashed(const std::string& path, FileDigest* digest) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw io_error("stat", path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::kIo, "read " + path + ": not a regular file");
  }
  std::string buf;
  buf.resize(static_cast<std::size_t>(st.st_size));
  Sha256 sha;
  std::size_t got = 0;
  for (;;) {
    if (got == buf.size()) buf.resize(buf.size() + kChunk);  // file grew: keep reading
    std::size_t want = std::min(kChunk, buf.size() - got);
    ssize_t n = ::read(fd, buf.data() + got, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw io_error("read", path, e);
    }
    if (n == 0) break;
    if (digest) sha.update(buf.data() + got, static_cast<std::size_t>(n));
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buf.resize(got);
  if (digest) {
    digest->size = got;
    digest->sha256 = sha.hex();
  }
  return buf;
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
  constexpr std::size_t kHuge = 2u << 20;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("open", path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kIo, "read " + path + ": not a regular file");
  const std::size_t n = static_cast<std::size_t>(st.st_size);
  if (n < kHuge) return FileBytes(read_file_hashed(path, digest));

  FileBytes b;
  // Over-allocate by one huge page so the buffer can start 2 MiB-aligned.
  b.map_len_ = ((n + kHuge - 1) / kHuge) * kHuge + kHuge;
  void* m = ::mmap(nullptr, b.map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw io_error("allocate buffer for", path, errno);
  b.map_ = m;
  b.base_ = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(m) + kHuge - 1) &
                                            ~static_cast<std::uintptr_t>(kHuge - 1));
#ifdef MADV_HUGEPAGE
  ::madvise(b.base_, b.map_len_ - kHuge, MADV_HUGEPAGE);  // advice only: fine if refused
#endif
  // Read on this thread, hash on a second one that follows behind: the cost
  // is max(read, hash) instead of their sum. `published` is how far the
  // buffer is filled; `done` ends the hasher (also on a read error).
  std::mutex mu;
  std::condition_variable cv;
  std::size_t published = 0;
  bool done = false;
  std::future<std::string> hashed;
  if (digest)
    hashed = std::async(std::launch::async, [&] {
      Sha256 sha;
      std::size_t at = 0;
      for (;;) {
        std::size_t upto;
        bool fin;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return published > at || done; });
          upto = published;
          fin = done;
        }
        if (upto > at) sha.update(b.base_ + at, upto - at);
        at = upto;
        if (fin && at == upto) {
          std::lock_guard<std::mutex> lk(mu);
          if (published == at) break;
        }
      }
      return sha.hex();
    });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
    }
    cv.notify_one();
  };
  std::size_t got = 0;
  try {
    while (got < n) {
      ssize_t k = ::read(fd, b.base_ + got, std::min(4 * kChunk, n - got));
      if (k < 0) {
        if (errno == EINTR) continue;
        throw io_error("read", path, errno);
      }
      if (k == 0) break;
      got += static_cast<std::size_t>(k);
      {
        std::lock_guard<std::mutex> lk(mu);
        published = got;
      }
      cv.notify_one();
    }
  } catch (...) {
    finish();
    throw;  // ~future joins the hasher
  }
  finish();
  std::string hex = digest ? hashed.get() : std::string();
  char extra;
  ssize_t more = ::read(fd, &extra, 1);
  if (got != n || more > 0)
    throw Error(ErrorKind::kIo, "read " + path + ": file changed size while it was read (" + std::to_string(n) +
                                    " bytes at open)");
  b.size_ = n;
  if (digest) {
    digest->size = n;
    digest->sha256 = std::move(hex);
  }
  return b;
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

const std::uint8_t* SafetensorsFile::data(const Entry& e) const {
  return bytes_.data() + 8 + header_len_ + e.begin;
}

SafetensorsFile SafetensorsFile::parse(FileBytes bytes, std::string name) {
  const std::uint64_t size = bytes.size();
  const char* raw = reinterpret_cast<const char*>(bytes.data());
  if (size < 8)
    throw invalid(name, "truncated header length",
                  "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(raw[i]);
  if (n > kMaxHeaderBytes)
    throw invalid(name, "header too large",
                  "header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    throw invalid(name, "header length past end of file",
                  "header length " + std::to_string(n) + " needs " + std::to_string(8 + n) +
                      " bytes but the file is " + std::to_string(size) + " bytes");
  const std::uint64_t data_len = size - 8 - n;

  // nlohmann keeps the last of duplicate keys; catch them while parsing.
  std::vector<std::set<std::string>> seen;
  std::string dup, dup_ctx, top_key;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: seen.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!seen.empty()) seen.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string k = parsed.get<std::string>();
        if (depth == 1) top_key = k;
        if (!seen.empty() && !seen.back().insert(k).second && dup.empty()) {
          dup = k;
          dup_ctx = depth == 1 ? "at the top level" : "inside '" + top_key + "'";
        }
        break;
      }
      default: break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(raw + 8, raw + 8 + n, cb);
  } catch (const json::exception& e) {
    throw invalid(name, "header is not valid JSON", e.what());
  }
  if (!dup.empty()) throw invalid(name, "duplicate key", "'" + dup + "' appears twice " + dup_ctx);
  if (!header.is_object())
    throw invalid(name, "header is not a JSON object", std::string("found a JSON ") + header.type_name());

  SafetensorsFile f;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object())
        throw invalid(name, "__metadata__ is not an object of strings",
                      std::string("found a JSON ") + v.type_name());
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw invalid(name, "__metadata__ is not an object of strings",
                        "value of '" + m.key() + "' is a JSON " + m.value().type_name() +
                            ", expected a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + key + "'";
    if (!v.is_object())
      throw invalid(name, "bad tensor entry", t + " is a JSON " + v.type_name() + ", expected an object");
    for (auto m = v.begin(); m != v.end(); ++m)
      if (m.key() != "dtype" && m.key() != "shape" && m.key() != "data_offsets")
        throw invalid(name, "bad tensor entry",
                      t + " has unknown field '" + m.key() + "' (expected dtype, shape, data_offsets)");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field))
        throw invalid(name, "bad tensor entry", t + " has no '" + field + "'");
    Entry e;
    e.name = key;
    const json& dt = v["dtype"];
    if (!dt.is_string()) throw invalid(name, "unknown dtype", t + " dtype is a JSON " + dt.type_name());
    auto d = dtype_from_name(dt.get<std::string>());
    if (!d)
      throw invalid(name, "unknown dtype",
                    t + " has dtype '" + dt.get<std::string>() +
                        "' (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    e.dtype = *d;
    const json& sh = v["shape"];
    if (!sh.is_array()) throw invalid(name, "bad shape", t + " shape is a JSON " + sh.type_name());
    for (const json& dim : sh) {
      if (!dim.is_number_unsigned() ||
          dim.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw invalid(name, "bad shape", t + " shape " + sh.dump() + " is not a list of non-negative integers");
      e.shape.push_back(static_cast<std::int64_t>(dim.get<std::uint64_t>()));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw invalid(name, "bad data_offsets",
                    t + " data_offsets " + off.dump() + " is not [begin, end] of non-negative integers");
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.begin > e.end)
      throw invalid(name, "bad data_offsets",
                    t + " begin " + std::to_string(e.begin) + " > end " + std::to_string(e.end));
    auto want = byte_size(e.dtype, e.shape);
    if (!want)
      throw invalid(name, "shape/byte-length mismatch", t + " shape " + shape_str(e.shape) + " overflows");
    if (*want != e.end - e.begin)
      throw invalid(name, "shape/byte-length mismatch",
                    t + " " + dtype_name(e.dtype) + " " + shape_str(e.shape) + " needs " +
                        std::to_string(*want) + " bytes, data_offsets [" + std::to_string(e.begin) +
                        ", " + std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin));
    f.entries_.push_back(std::move(e));
  }

  // The tensors must tile [0, data_len) exactly: no gap, no overlap, no tail.
  std::vector<const Entry*> by_off;
  for (const auto& e : f.entries_) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_off) {
    if (e->begin < pos)
      throw invalid(name, "overlapping data_offsets",
                    "tensor '" + e->name + "' begins at " + std::to_string(e->begin) + " but tensor '" +
                        prev->name + "' ends at " + std::to_string(pos));
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
                      " data = " + std::to_string(8 + n + pos) + " bytes, file is " + std::to_string(size) +
                      " bytes");
  f.name_ = std::move(name);
  f.header_len_ = n;
  f.bytes_ = std::move(bytes);
  return f;
}

}  // namespace anchor::checkpoint
