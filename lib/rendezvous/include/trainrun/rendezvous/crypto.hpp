#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

// The rendezvous' cryptography, all of it from OpenSSL's libcrypto: SHA-256, HMAC-SHA-256, a
// constant-time compare and random nonces. Nothing here is hand-written.
namespace trainrun::rendezvous {

using Digest = std::array<std::uint8_t, 32>;

Digest sha256(std::string_view data);

// HMAC-SHA-256 (RFC 2104) under `key` of the concatenation of `parts`.
Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
inline Digest hmac_sha256(std::string_view key, std::string_view message) {
  return hmac_sha256(key, {message});
}

// Compares without an early exit (CRYPTO_memcmp), so the time taken says nothing about where the
// contents differ. The length is not secret: different lengths are unequal at once.
bool constant_time_equal(std::string_view a, std::string_view b);

std::string to_hex(const std::uint8_t* data, std::size_t size);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

// 32 bytes from the kernel's random source (random_hex) as 64 lowercase hex digits: a handshake
// nonce. Throws std::runtime_error if the kernel gives none.
std::string random_nonce();

}  // namespace trainrun::rendezvous
