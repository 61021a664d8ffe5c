#pragma once
// A strict safetensors reader and writer of our own (no torch: raw bytes).
//
// Format: an 8-byte little-endian header length N, N bytes of a JSON object
// header, then the data section. Each header key other than "__metadata__"
// names a tensor: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
// offsets relative to the start of the data section. "__metadata__" is an
// object of string -> string. docs/checkpoints.md lists every rule the reader
// enforces and the message each violation produces.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"

namespace anchor::checkpoint {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

const char* dtype_name(DType d);                           // "F32"
std::optional<DType> dtype_from_name(std::string_view s);  // nullopt when unknown
std::size_t dtype_size(DType d);                           // bytes per element

// The largest header the reader accepts (a guard against absurd allocations).
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

// A tensor to write: `data` points at nbytes bytes (C-contiguous, little-endian).
struct TensorRef {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

// What a checkpoint manifest (anchor.checkpoint-manifest/v2) pins of a
// safetensors file in place of one SHA-256 over it: the SHA-256 of the header
// (header_bytes()) and of each tensor's data bytes, by name. The strict reader
// makes the tensors tile the data section, so together they cover every byte
// of the file; unlike one stream they can be checked on several cores, and
// the trainer reuses them as the state's digests (docs/checkpoints.md).
struct TensorDigests {
  std::string header;                          // lowercase hex
  std::map<std::string, std::string> tensors;  // tensor name -> lowercase hex of its data bytes
};

// Writes a safetensors file at `path` through the fs seam: create_excl (the
// file must not exist), write_all, fsync, close. Tensors are sorted by name,
// their data laid out contiguously in that order; the header is padded with
// spaces so that the data starts at a multiple of 8. SHA-256 is computed while
// streaming. Throws Error(kUsage) for an invalid request (duplicate or empty
// name, "__metadata__" as a tensor name, nbytes != product(shape) * element
// size, negative dimension) before touching the disk, and Error(kIo) naming
// the path and errno when the file system fails; on failure the partial file
// is unlinked (best effort).
//
// With `per_tensor`, the bytes are hashed as a checkpoint manifest v2 pins
// them instead (TensorDigests above), and the returned digest has the size
// and no sha256: each byte is still hashed once.
FileDigest write_safetensors(fs::FileSystem& fs, const std::string& path, const std::vector<TensorRef>& tensors,
                             const std::map<std::string, std::string>& metadata = {},
                             TensorDigests* per_tensor = nullptr);

// The serialized bytes of a safetensors file (what write_safetensors writes).
std::string serialize_safetensors(const std::vector<TensorRef>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Reads a whole file into memory, hashing each chunk right after it is read
// (so the bytes are hashed while hot in cache and the file is read once).
// Throws Error(kIo) naming the path.
std::string read_file_hashed(const std::string& path, FileDigest* digest);

// The bytes of a file held in memory, owned. Files of 2 MiB and more are read
// into an anonymous mapping advised for transparent huge pages (512x fewer
// page faults than a std::string of the same size; see docs/checkpoints.md).
// Not mmap of the file itself: what was hashed is what the caller uses, even
// if the file changes later. Move-only.
class FileBytes {
 public:
  FileBytes() = default;
  explicit FileBytes(std::string bytes);
  FileBytes(FileBytes&& o) noexcept;
  FileBytes& operator=(FileBytes&& o) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  // Reads `path` fully, hashing each chunk right after it is read when
  // `digest` is given. Throws Error(kIo) naming the path (also when the file
  // changes size while it is read).
  static FileBytes read(const std::string& path, FileDigest* digest);
  // Reads `path` fully like read(), while `threads` threads hash what a
  // manifest v2 pins of a safetensors file (TensorDigests): the header is
  // parsed as soon as its bytes are in, then each tensor is hashed as soon as
  // its last byte is, so reading and hashing overlap. `digests` is left empty
  // when the bytes are not a valid safetensors file (SafetensorsFile::parse
  // then says why) and for a file under 2 MiB (hash_tensors it once parsed).
  static FileBytes read_hashing_tensors(const std::string& path, unsigned threads,
                                        std::optional<TensorDigests>* digests);

  const std::uint8_t* data() const { return map_ ? base_ : reinterpret_cast<const std::uint8_t*>(str_.data()); }
  std::size_t size() const { return map_ ? size_ : str_.size(); }

 private:
  void release();
  std::string str_;
  void* map_ = nullptr;
  std::size_t map_len_ = 0;
  std::uint8_t* base_ = nullptr;
  std::size_t size_ = 0;
};

// A validated safetensors file held in memory.
class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // byte offsets within the data section
  };

  // Reads `path` fully and validates it. When `digest` is given, it receives
  // the SHA-256 and size of the bytes read (one pass). Throws Error(kIo) when
  // the file cannot be read or is not a regular file, Error(kVerification)
  // "<path>: <rule>: <details>" when it breaks any rule. Messages are valid
  // UTF-8 whatever the bytes (invalid bytes are shown as \xNN). The hint
  // names no policy: a caller that knows where the file came from (the store
  // falls back to an older checkpoint; a weights file can be re-downloaded)
  // says so itself.
  static SafetensorsFile open(const std::string& path, FileDigest* digest = nullptr);
  // Same validation on bytes in memory; `name` is used in messages. The
  // header is parsed in one streaming pass (no JSON tree of the whole
  // header): time O(n log n) in the number of tensors, memory a small
  // multiple of the header size (docs/checkpoints.md, "safetensors, strictly").
  static SafetensorsFile parse(std::string bytes, std::string name);
  static SafetensorsFile parse(FileBytes bytes, std::string name);

  const std::string& name() const { return name_; }
  const std::vector<Entry>& entries() const { return entries_; }  // sorted by name
  const Entry* find(std::string_view name) const;
  // Start of the tensor's bytes (end - begin of them).
  const std::uint8_t* data(const Entry& e) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::uint64_t header_size() const { return header_len_; }
  std::uint64_t file_size() const { return bytes_.size(); }
  // The 8-byte header length and the header (padding included): the bytes before the data section.
  std::string_view header_bytes() const {
    return {reinterpret_cast<const char*>(bytes_.data()), static_cast<std::size_t>(8 + header_len_)};
  }

 private:
  std::string name_;
  FileBytes bytes_;
  std::uint64_t header_len_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// What a streamed read of a file found: `anchor checkpoint verify` and `list`
// (and every check that keeps no file) hold the header and one 4 MiB chunk,
// never the file, whatever its size (an 80 GB shard: a few MiB resident).
struct StreamedFile {
  FileDigest digest;                     // its size, and the SHA-256 of the whole file unless per tensor
  std::optional<TensorDigests> tensors;  // per tensor (manifest v2), when asked and the header holds
  std::string problem;                   // a safetensors file whose header breaks a rule: what parse() says
};
// Reads `path` once, in chunks. `safetensors`: the header is parsed strictly
// as parse() does, against the file's size (the tiling of the data section
// included); `per_tensor`: the header and each tensor are hashed as a manifest
// v2 pins them, instead of the whole file. Throws Error(kIo) naming the path
// (also when the file changes size while it is read).
StreamedFile stream_file(const std::string& path, bool safetensors, bool per_tensor);

// The TensorDigests of a parsed file, hashed on up to `threads` threads (the
// largest tensors first; 0 or 1: on this one).
TensorDigests hash_tensors(const SafetensorsFile& f, unsigned threads);

}  // namespace anchor::checkpoint
