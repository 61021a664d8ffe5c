#pragma once
// Signing keys: ECDSA P-256, PKCS#8 PEM private key, SPKI PEM public key.
//
// Key material never reaches a log, an exception message or stdout: messages
// name paths, modes and key ids only. Private-key bytes and passphrases held
// in memory are wiped (OPENSSL_cleanse) once OpenSSL has parsed them.
#include <memory>
#include <string>

struct evp_pkey_st;

namespace anchor::report {

// An EVP_PKEY holding a P-256 key (private or public only). Move-only.
class Key {
 public:
  Key() = default;
  explicit Key(evp_pkey_st* pkey);  // takes ownership
  ~Key();
  Key(Key&& other) noexcept;
  Key& operator=(Key&& other) noexcept;
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;

  evp_pkey_st* get() const { return pkey_; }
  explicit operator bool() const { return pkey_ != nullptr; }

 private:
  evp_pkey_st* pkey_ = nullptr;
};

// The environment variable that may hold a private key's passphrase.
inline constexpr const char* kPassphraseEnv = "ANCHOR_KEY_PASSPHRASE";
// The algorithm name recorded in the predicate ("signer.algorithm").
inline constexpr const char* kSigningAlgorithm = "ecdsa-p256-sha256";

// The passphrase to use: the first line of `passphrase_file` (trailing "\n" or
// "\r\n" removed) when it is non-empty, else $ANCHOR_KEY_PASSPHRASE, else "".
// Never prompts. Throws Error (kIo) when the file cannot be read, (kUsage)
// when the file is given but holds an empty passphrase.
std::string resolve_passphrase(const std::string& passphrase_file);

// A fresh P-256 key pair (EVP_PKEY_Q_keygen). Throws Error (kRuntime) on an
// OpenSSL failure.
Key generate_key();

// PEM text. private_key_pem: PKCS#8 ("BEGIN PRIVATE KEY"), or encrypted PKCS#8
// with AES-256-CBC ("BEGIN ENCRYPTED PRIVATE KEY") when passphrase is non-empty.
// public_key_pem: SubjectPublicKeyInfo ("BEGIN PUBLIC KEY").
std::string private_key_pem(const Key& key, const std::string& passphrase = {});
std::string public_key_pem(const Key& key);

// DER SubjectPublicKeyInfo of the key's public half (what `openssl pkey -pubout
// -outform DER` prints).
std::string public_key_der(const Key& key);

// The key's id, as securesystemslib and the in-toto tools compute it (SSlibKey.from_pem's default
// keyid): hex SHA-256 of {"keytype":"ecdsa","keyval":{"public":<PEM>},"scheme":"ecdsa-sha2-nistp256"}
// as canonical JSON. Every place anchor names a key uses it: the DSSE envelopes' keyid,
// predicate.signer.key_id, keygen's and verify's output (docs/report.md, "Key id").
std::string key_id(const Key& key);
// The id reports signed before 2026-12 recorded (hex SHA-256 of public_key_der): verify accepts it.
std::string legacy_key_id(const Key& key);

struct KeygenOptions {
  std::string private_path;  // written mode 0600
  std::string public_path;   // written mode 0644 (less the umask)
  std::string passphrase;    // non-empty: encrypt the private key (AES-256-CBC)
  bool force = false;        // replace existing key files
};

struct KeygenResult {
  std::string key_id;
  bool encrypted = false;
};

// Generates a key pair and writes both files atomically (temp file, fsync,
// publish, directory fsync). Without `force`, refuses (Error kUsage) when
// either file already exists, and publishes with link(2) so a file that
// appears meanwhile is not overwritten either. Throws Error (kIo) on a file
// system failure; nothing is left half-written.
KeygenResult write_keypair(const KeygenOptions& opts);

// The per-user signing key (docs/report.md, "Signing"): what signs a report
// when the config names no key. It lives in $XDG_CONFIG_HOME/anchor (an
// absolute XDG_CONFIG_HOME only, as the XDG spec says), else
// $HOME/.config/anchor, as anchor.key (0600) and anchor.pub: the names
// `anchor keygen -o DIR` writes.
struct UserKey {
  std::string private_path;
  std::string public_path;
  std::string key_id;    // filled by ensure_user_key
  bool created = false;  // this call made the pair
};

// Where the per-user key lives. Throws Error (kConfig) when neither an
// absolute XDG_CONFIG_HOME nor HOME is set.
UserKey user_key_paths();

// The per-user key, made on first use: its directories are created 0700, the
// private key encrypted with $ANCHOR_KEY_PASSPHRASE when that is set. Processes
// that make it at the same time agree on one key (link(2) publishes it; the
// loser loads the winner's). A missing anchor.pub beside an existing key is
// written again from it. The key is loaded (mode, passphrase and curve
// checked) before this returns.
UserKey ensure_user_key();

// Loads a PKCS#8 (or traditional EC) PEM private key. Refuses (Error kUsage)
// a file whose mode gives group or others any access, naming the mode found
// and `chmod 600 <path>`; a key that is not ECDSA P-256; an encrypted key
// without a passphrase or with a wrong one. `passphrase` is used only for an
// encrypted key. Throws Error (kIo) when the file cannot be opened or read.
Key load_private_key(const std::string& path, const std::string& passphrase = {});

// Loads an SPKI PEM public key (a private key file is refused: a public key
// is what verification needs). Throws Error (kIo) when unreadable, (kUsage)
// when it is not a P-256 public key.
Key load_public_key(const std::string& path);
// The same from PEM text in memory; `what` names it in messages.
Key parse_public_key_pem(const std::string& pem, const std::string& what);

}  // namespace anchor::report
