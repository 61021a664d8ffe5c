#pragma once
// SHA-256 through OpenSSL 3's EVP interface (uses the CPU's SHA extensions).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace anchor {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes and returns the lowercase hex digest; the object may not be updated after.
  std::string hex();
  std::array<std::uint8_t, 32> digest();

 private:
  evp_md_ctx_st* ctx_;
};

std::string sha256_hex(std::string_view data);
std::string to_hex(const std::uint8_t* data, std::size_t len);
bool is_sha256_hex(std::string_view s);  // 64 lowercase hex characters

struct FileDigest {
  std::string sha256;  // lowercase hex
  std::uint64_t size = 0;
};

// Streams `path` through SHA-256 in constant memory. `progress` (optional) is
// called with bytes read so far. Throws Error (kIo) naming the path when the
// file cannot be opened or read, is not a regular file, or changes size or
// mtime while it is hashed.
FileDigest sha256_file(const std::string& path, const std::function<void(std::uint64_t)>& progress = {});

}  // namespace anchor
