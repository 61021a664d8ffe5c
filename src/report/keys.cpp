#include "anchor/report/keys.hpp"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "anchor/common/fs.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"
#include "openssl_util.hpp"

namespace anchor::report {

Key::Key(evp_pkey_st* pkey) : pkey_(pkey) {}
Key::~Key() { EVP_PKEY_free(pkey_); }
Key::Key(Key&& other) noexcept : pkey_(other.pkey_) { other.pkey_ = nullptr; }
Key& Key::operator=(Key&& other) noexcept {
  if (this != &other) {
    EVP_PKEY_free(pkey_);
    pkey_ = other.pkey_;
    other.pkey_ = nullptr;
  }
  return *this;
}

namespace {

// Wipes a string that held key material or a passphrase before it is freed.
struct Wipe {
  std::string& s;
  ~Wipe() {
    if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  }
};

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Only P-256 is accepted: the predicate records "ecdsa-p256-sha256", and the
// DSSE verifiers we document (openssl, python3-cryptography, cosign) are told so.
void require_p256(const Key& key, const std::string& what) {
  char group[64] = {0};
  size_t len = 0;
  bool ok = EVP_PKEY_is_a(key.get(), "EC") &&
            EVP_PKEY_get_utf8_string_param(key.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) == 1 &&
            (std::strcmp(group, "prime256v1") == 0 || std::strcmp(group, "P-256") == 0);
  ERR_clear_error();
  if (!ok)
    throw Error(
        ErrorKind::kUsage,
        what + ": not an ECDSA P-256 key (found " +
            (EVP_PKEY_get0_type_name(key.get()) ? EVP_PKEY_get0_type_name(key.get()) : std::string("unknown type")) +
            (len ? std::string(" on curve ") + group : std::string()) + ")",
        "anchor signs with ECDSA P-256 only; create a key with `anchor keygen`");
}

// PEM text from a secure-memory BIO (its buffer is cleared when freed).
std::string bio_to_string(BIO* bio) {
  BUF_MEM* mem = nullptr;
  BIO_get_mem_ptr(bio, &mem);
  return mem && mem->length ? std::string(mem->data, mem->length) : std::string();
}

// Reads a private key file through one descriptor so the mode we check is the
// mode of the file we read.
std::string read_private_key_file(const std::string& path) {
  struct stat st {};
  fs::UniqueFd file = fs::open_regular(path, &st, {"private key", ErrorKind::kUsage, {}});
  const int fd = file.get();
  if (st.st_mode & 077) {
    throw Error(ErrorKind::kUsage,
                "private key " + path + " has mode " + mode_text(st.st_mode) +
                    ": group or others can access it, so it is refused",
                "chmod 600 " + path);
  }
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      OPENSSL_cleanse(buf, sizeof buf);
      OPENSSL_cleanse(data.data(), data.size());
      throw io_error("read private key", path, err);
    }
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  OPENSSL_cleanse(buf, sizeof buf);
  return data;
}

struct PassCtx {
  const std::string* pass;
  bool asked = false;
};

// Never prompts: with no passphrase the callback fails, and the caller names
// the two prompt-free ways to give one.
int pass_cb(char* buf, int size, int /*rwflag*/, void* u) {
  auto* ctx = static_cast<PassCtx*>(u);
  ctx->asked = true;
  if (ctx->pass->empty() || ctx->pass->size() > static_cast<std::size_t>(size)) return -1;
  // pem_password_cb's contract: the passphrase's length is the return value,
  // and OpenSSL reads exactly that many bytes (its own example copies no NUL).
  std::memcpy(buf, ctx->pass->data(), ctx->pass->size());  // NOLINT(bugprone-not-null-terminated-result)
  return static_cast<int>(ctx->pass->size());
}

// Writes `content` to a sibling temp file with `mode`, then publishes it at
// `path`: rename(2) when replacing is allowed, link(2) otherwise (fails with
// EEXIST instead of overwriting a key that appeared meanwhile).
void publish_file(const std::string& path, const std::string& content, mode_t mode, bool force) {
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmp = dir + "/." + p.filename().string() + ".tmp-" + fs::random_suffix();
  fs::FileSystem& f = fs::real_fs();
  fs::UniqueFd fd = f.create_excl(tmp, mode);
  try {
    f.write_all(fd.get(), content.data(), content.size(), tmp);
    f.fsync(fd.get(), tmp);
    f.close(std::move(fd), tmp);
    if (force) {
      f.rename(tmp, path);
    } else {
      if (::link(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        if (err == EEXIST)
          throw Error(ErrorKind::kUsage, path + ": already exists; refusing to overwrite a key",
                      "pass --force to replace it, or choose another path");
        throw io_error("link " + tmp + " ->", path, err);
      }
      ::unlink(tmp.c_str());
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  f.fsync_dir(dir);
}

}  // namespace

std::string resolve_passphrase(const std::string& passphrase_file) {
  if (!passphrase_file.empty()) {
    std::string content = fs::read_file(passphrase_file);
    Wipe wipe{content};
    std::string pass = content.substr(0, content.find('\n'));
    if (!pass.empty() && pass.back() == '\r') pass.pop_back();
    if (pass.empty()) {
      throw Error(ErrorKind::kUsage, "passphrase file " + passphrase_file + ": empty first line",
                  "put the passphrase on the file's first line");
    }
    return pass;
  }
  const char* env = std::getenv(kPassphraseEnv);
  return env ? std::string(env) : std::string();
}

Key generate_key() {
  EVP_PKEY* pkey = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (!pkey) throw openssl_error("generate ECDSA P-256 key");
  return Key(pkey);
}

std::string private_key_pem(const Key& key, const std::string& passphrase) {
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (!bio) throw openssl_error("allocate memory BIO");
  const EVP_CIPHER* cipher = passphrase.empty() ? nullptr : EVP_aes_256_cbc();
  // PEM_write_bio_PKCS8PrivateKey takes a non-const buffer; it only reads it.
  std::string pass = passphrase;
  Wipe wipe{pass};
  int ok = PEM_write_bio_PKCS8PrivateKey(bio.get(), key.get(), cipher, pass.empty() ? nullptr : pass.data(),
                                         static_cast<int>(pass.size()), nullptr, nullptr);
  if (ok != 1) throw openssl_error("encode PKCS#8 private key");
  return bio_to_string(bio.get());
}

std::string public_key_pem(const Key& key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio) throw openssl_error("allocate memory BIO");
  if (PEM_write_bio_PUBKEY(bio.get(), key.get()) != 1) throw openssl_error("encode public key");
  return bio_to_string(bio.get());
}

std::string public_key_der(const Key& key) {
  unsigned char* der = nullptr;
  int len = i2d_PUBKEY(key.get(), &der);
  if (len <= 0) throw openssl_error("encode public key (DER)");
  std::string out(reinterpret_cast<char*>(der), static_cast<std::size_t>(len));
  OPENSSL_free(der);
  return out;
}

std::string key_id(const Key& key) {
  // securesystemslib's compute_default_keyid: SHA-256 of the canonical JSON (sorted keys, no spaces,
  // only \\ and " escaped: the PEM's newlines stay as they are) of {keytype, scheme, keyval}.
  std::string pem = public_key_pem(key);
  std::string escaped;
  for (char c : pem) {
    if (c == '\\' || c == '"') escaped.push_back('\\');
    escaped.push_back(c);
  }
  return sha256_hex(std::string(R"({"keytype":"ecdsa","keyval":{"public":")") + escaped +
                    R"("},"scheme":"ecdsa-sha2-nistp256"})");
}

std::string legacy_key_id(const Key& key) { return sha256_hex(public_key_der(key)); }

KeygenResult write_keypair(const KeygenOptions& opts) {
  if (opts.private_path.empty() || opts.public_path.empty())
    throw Error(ErrorKind::kUsage, "keygen: both a private and a public key path are needed");
  if (opts.private_path == opts.public_path)
    throw Error(ErrorKind::kUsage, "keygen: private and public key paths are the same (" + opts.private_path + ")");
  if (!opts.force) {
    for (const auto* path : {&opts.private_path, &opts.public_path}) {
      std::error_code ec;
      if (std::filesystem::symlink_status(*path, ec).type() != std::filesystem::file_type::not_found)
        throw Error(ErrorKind::kUsage, *path + ": already exists; refusing to overwrite a key",
                    "pass --force to replace it, or choose another path");
    }
  }
  Key key = generate_key();
  std::string priv = private_key_pem(key, opts.passphrase);
  Wipe wipe{priv};
  publish_file(opts.private_path, priv, 0600, opts.force);
  publish_file(opts.public_path, public_key_pem(key), 0644, opts.force);
  return {key_id(key), !opts.passphrase.empty()};
}

namespace {

std::string absolute_env(const char* name) {
  const char* v = std::getenv(name);
  return v && v[0] == '/' ? std::string(v) : std::string();
}

bool exists_no_follow(const std::string& path) {
  std::error_code ec;
  return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found;
}

// mkdir -p, each directory it creates mode 0700 (the XDG spec's mode).
void make_private_dirs(const std::filesystem::path& dir) {
  std::filesystem::path at;
  for (const auto& part : dir) {
    at /= part;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) throw io_error("mkdir", at.string(), errno);
  }
}

}  // namespace

UserKey user_key_paths() {
  std::string base = absolute_env("XDG_CONFIG_HOME");
  if (base.empty()) {
    const std::string home = absolute_env("HOME");
    if (home.empty())
      throw Error(ErrorKind::kConfig,
                  "no place for your signing key: neither XDG_CONFIG_HOME nor HOME is set to an absolute path",
                  "set HOME or XDG_CONFIG_HOME");
    base = home + "/.config";
  }
  UserKey k;
  k.private_path = base + "/anchor/anchor.key";
  k.public_path = base + "/anchor/anchor.pub";
  return k;
}

UserKey ensure_user_key() {
  UserKey k = user_key_paths();
  const std::string passphrase = resolve_passphrase("");
  // Publish `content` at `path` unless it is there already (or another
  // process publishes it meanwhile: link(2) refuses ours). True if ours landed.
  auto publish_once = [](const std::string& path, const std::string& content, mode_t mode) {
    if (exists_no_follow(path)) return false;
    try {
      publish_file(path, content, mode, /*force=*/false);
      return true;
    } catch (const Error&) {
      if (exists_no_follow(path)) return false;
      throw;
    }
  };
  const std::string dir = std::filesystem::path(k.private_path).parent_path().string();
  make_private_dirs(dir);
  // Whoever can write the directory can swap the key: it must be a real
  // directory of this user that no one else writes, and the key a regular
  // file of this user (not a link to some other key).
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw io_error("stat", dir, errno);
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
    throw Error(ErrorKind::kConfig,
                dir + " is " + (S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory") +
                    ": someone else could replace the signing key in it",
                "move it aside; anchor then makes a directory of its own there (mode 0700)");
  if (st.st_uid != ::geteuid())
    throw Error(ErrorKind::kConfig,
                dir + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                    std::to_string(::geteuid()) + "): its owner could replace the signing key in it",
                "run as its owner, or set XDG_CONFIG_HOME to a directory of your own");
  if ((st.st_mode & 022) != 0)
    throw Error(ErrorKind::kConfig,
                dir + " is writable by others (mode " + mode_text(st.st_mode) +
                    "): someone else could replace the signing key in it",
                "chmod 700 " + dir);
  if (::lstat(k.private_path.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()))
    throw Error(ErrorKind::kConfig, k.private_path + " is not a regular file of yours",
                "remove it; the next run makes a new key (or name a key with report.signing_key)");
  if (!exists_no_follow(k.private_path)) {
    Key fresh = generate_key();
    std::string pem = private_key_pem(fresh, passphrase);
    Wipe wipe{pem};
    k.created = publish_once(k.private_path, pem, 0600);
  }
  Key key = load_private_key(k.private_path, passphrase);
  k.key_id = key_id(key);
  // anchor.pub follows from the key that won: written by whoever gets there
  // first (its maker, or a later run when it went missing), never replaced.
  if (!publish_once(k.public_path, public_key_pem(key), 0644) && key_id(load_public_key(k.public_path)) != k.key_id)
    throw Error(ErrorKind::kConfig, k.public_path + " is not the public half of " + k.private_path,
                "remove " + k.public_path + ": the next run writes it again from the key");
  return k;
}

Key load_private_key(const std::string& path, const std::string& passphrase) {
  std::string pem = read_private_key_file(path);
  Wipe wipe{pem};
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) throw openssl_error("allocate memory BIO");
  PassCtx ctx{&passphrase};
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio.get(), nullptr, pass_cb, &ctx);
  ERR_clear_error();
  if (!pkey) {
    if (ctx.asked && passphrase.empty())
      throw Error(ErrorKind::kUsage, "private key " + path + ": encrypted, and no passphrase given",
                  std::string("set ") + kPassphraseEnv + " or pass --passphrase-file FILE");
    if (ctx.asked)
      throw Error(ErrorKind::kUsage, "private key " + path + ": cannot decrypt it (wrong passphrase?)",
                  std::string("check ") + kPassphraseEnv + " or the --passphrase-file");
    throw Error(ErrorKind::kUsage, "private key " + path + ": not a PEM private key",
                "give the PKCS#8 PEM file written by `anchor keygen` (the .key, not the .pub)");
  }
  Key key(pkey);
  require_p256(key, "private key " + path);
  return key;
}

Key parse_public_key_pem(const std::string& pem, const std::string& what) {
  if (pem.find("PRIVATE KEY-----") != std::string::npos)
    throw Error(ErrorKind::kUsage, what + ": holds a private key, not a public key",
                "give the SPKI PEM public key (the .pub file written by `anchor keygen`)");
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) throw openssl_error("allocate memory BIO");
  EVP_PKEY* pkey = PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  ERR_clear_error();
  if (!pkey)
    throw Error(ErrorKind::kUsage, what + ": not a PEM public key (SubjectPublicKeyInfo)",
                "give the .pub file written by `anchor keygen`");
  Key key(pkey);
  require_p256(key, what);
  return key;
}

Key load_public_key(const std::string& path) { return parse_public_key_pem(fs::read_file(path), "public key " + path); }

}  // namespace anchor::report
