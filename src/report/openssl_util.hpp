#pragma once
// Private to the report module: RAII for OpenSSL handles and errors.
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <memory>
#include <string>

#include "anchor/error.hpp"

namespace anchor::report {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

// Error (kRuntime) "<what>: <OpenSSL's reason>", draining OpenSSL's error
// queue. The queue holds library reason strings, never key material.
inline Error openssl_error(const std::string& what) {
  unsigned long code = ERR_get_error();
  std::string reason = "unknown OpenSSL error";
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    reason = buf;
  }
  ERR_clear_error();
  return Error(ErrorKind::kRuntime, what + ": " + reason);
}

}  // namespace anchor::report
