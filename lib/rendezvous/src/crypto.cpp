#include "trainrun/rendezvous/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>
#include <stdexcept>

#include "trainrun/base/system.hpp"

namespace trainrun::rendezvous {
namespace {

[[noreturn]] void fail(const char* what) {
  char detail[256] = "unknown error";
  if (unsigned long code = ERR_get_error()) ERR_error_string_n(code, detail, sizeof(detail));
  throw std::runtime_error(std::string("libcrypto: ") + what + ": " + detail);
}

// The HMAC implementation, fetched once and shared (EVP_MAC objects are reference counted and
// safe to share between threads).
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) fail("HMAC is not available");
  return mac;
}

}  // namespace

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != out.size()) {
    fail("SHA-256 failed");
  }
  return out;
}

Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac_algorithm()),
                                                                &EVP_MAC_CTX_free);
  if (!ctx) fail("cannot create an HMAC context");
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                         OSSL_PARAM_construct_end()};
  // A zero-length key is valid HMAC; libcrypto wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const auto* key_bytes =
      key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_MAC_init(ctx.get(), key_bytes, key.size(), params) != 1) fail("HMAC init failed");
  for (std::string_view part : parts) {
    if (EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()),
                       part.size()) != 1) {
      fail("HMAC update failed");
    }
  }
  Digest out{};
  std::size_t size = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &size, out.size()) != 1 || size != out.size()) {
    fail("HMAC final failed");
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string to_hex(const std::uint8_t* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 0x0f]);
  }
  return out;
}

std::string random_nonce() { return random_hex(64); }

}  // namespace trainrun::rendezvous
