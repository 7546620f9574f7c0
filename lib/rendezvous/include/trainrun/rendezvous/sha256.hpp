#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainrun::rendezvous {

using Digest = std::array<std::uint8_t, 32>;

// SHA-256 (FIPS 180-4), small and self-contained so the launcher needs no crypto library to
// prove a shared token. Streaming: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  Digest finish();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Digest sha256(std::string_view data);

// HMAC-SHA256 (RFC 2104) of `message` under `key`.
Digest hmac_sha256(std::string_view key, std::string_view message);

// Compares without an early exit, so the time taken says nothing about where strings differ.
bool constant_time_equal(std::string_view a, std::string_view b);

std::string to_hex(const std::uint8_t* data, std::size_t size);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }

}  // namespace trainrun::rendezvous
