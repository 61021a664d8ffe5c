#include "anchor/common/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "anchor/common/unique_fd.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace anchor {
namespace {

const EVP_MD* sha256_md() {
  // Fetched once: EVP_MD_fetch is not free and the digest is immutable.
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (!md) throw Error(ErrorKind::kRuntime, "OpenSSL: SHA256 digest unavailable");
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_, sha256_md(), nullptr) != 1)
    throw Error(ErrorKind::kRuntime, "OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, std::size_t len) {
  if (len && EVP_DigestUpdate(ctx_, data, len) != 1) throw Error(ErrorKind::kRuntime, "OpenSSL: SHA-256 update failed");
}

std::array<std::uint8_t, 32> Sha256::digest() {
  std::array<std::uint8_t, 32> out{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_, out.data(), &n) != 1 || n != 32)
    throw Error(ErrorKind::kRuntime, "OpenSSL: SHA-256 final failed");
  return out;
}

std::string Sha256::hex() {
  auto d = digest();
  return to_hex(d.data(), d.size());
}

std::string to_hex(const std::uint8_t* data, std::size_t len) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(len * 2, '0');
  for (std::size_t i = 0; i < len; ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

FileDigest sha256_file(const std::string& path, const std::function<void(std::uint64_t)>& progress) {
  struct stat before {};
  fs::UniqueFd file =
      fs::open_regular(path, &before,
                       {"", ErrorKind::kIo,
                        "hash regular files only: name the files inside a directory (or a glob such as " + path +
                            "/*); devices, pipes and sockets are refused"});
  const int fd = file.get();
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  Sha256 h;
  constexpr std::size_t kChunk = 1 << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);
  std::uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), kChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("read", path, errno);
    }
    if (n == 0) break;
    h.update(buf.get(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
    if (progress) progress(total);
  }
  struct stat after {};
  if (::fstat(fd, &after) != 0) throw io_error("stat", path, errno);
  if (after.st_size != before.st_size || after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
      after.st_mtim.tv_nsec != before.st_mtim.tv_nsec || total != static_cast<std::uint64_t>(after.st_size)) {
    throw Error(ErrorKind::kIo, "read " + printable(path) + ": the file changed while it was being hashed",
                "wait until whatever writes it has finished, then pin again");
  }
  return FileDigest{h.hex(), total};
}

}  // namespace anchor
