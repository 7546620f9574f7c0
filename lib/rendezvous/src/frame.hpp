#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trainrun::rendezvous {

// A frame is a 4-byte big-endian body length followed by that many bytes (a JSON document).
inline constexpr std::size_t kFrameHeaderSize = 4;
// The largest body a peer may send once admitted; a round's messages are far smaller.
inline constexpr std::size_t kMaxFrameSize = 1 << 20;
// The largest body before the handshake is complete, so strangers cannot make the server
// buffer much.
inline constexpr std::size_t kMaxHandshakeFrameSize = 4096;

// A peer broke the framing rules (empty or oversize frame). The connection cannot be resynced.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string encode_frame(std::string_view body);

// After a handshake with a token, each frame's body is the payload followed by a tag of this many
// bytes: HMAC-SHA-256 under the direction's session key of (sequence, length, payload), truncated.
inline constexpr std::size_t kFrameTagSize = 16;

// One connection's session keys, one per direction, as seen from one end (see handshake.hpp).
struct SessionKeys {
  std::string send;
  std::string receive;
};

// Seals the frames one end sends and opens those it receives, after the handshake: each
// direction counts its frames from 0, and the tag covers that count, so a frame that is altered,
// dropped, replayed, reordered or taken from another connection does not open. Pure.
class FrameAuth {
 public:
  explicit FrameAuth(SessionKeys keys) : keys_(std::move(keys)) {}

  // The body to frame: `payload` followed by its tag.
  std::string seal(std::string_view payload);
  // The payload of a received body, its tag checked. Throws FrameError ("authentication failed:
  // ...") when the tag does not match; the connection cannot go on after that.
  std::string open(std::string body);

 private:
  SessionKeys keys_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

// Turns a byte stream into frames incrementally. It never holds more than one frame's body
// (at most `max_size` bytes) plus the header, whatever the peer sends.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_size = kMaxFrameSize) : max_size_(max_size) {}

  void set_max_size(std::size_t max_size) { max_size_ = max_size; }

  // Consumes bytes from `data` until one frame is complete or the input runs out.
  // Returns the number of bytes consumed; `next()` then yields the frame if one completed.
  // Throws FrameError when the declared length is 0 or above the limit.
  std::size_t feed(const char* data, std::size_t size);

  // The completed frame, if any; calling it hands the frame over and resets for the next one.
  std::optional<std::string> next();

  // Bytes of a partial frame held right now (for tests of the memory bound).
  std::size_t buffered() const { return header_filled_ + body_.size(); }

 private:
  std::size_t max_size_;
  unsigned char header_[kFrameHeaderSize] = {};
  std::size_t header_filled_ = 0;
  std::size_t body_size_ = 0;
  std::string body_;
  bool complete_ = false;
};

}  // namespace trainrun::rendezvous
