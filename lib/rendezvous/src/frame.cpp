#include "frame.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::rendezvous {

namespace {

void put_big_endian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>(value >> (8 * i)));
}

// The tag of frame `sequence` of one direction: HMAC-SHA-256 under that direction's key of the
// 8-byte big-endian sequence number, the 4-byte big-endian payload length and the payload.
std::string frame_tag(const std::string& key, std::uint64_t sequence, std::string_view payload) {
  std::string header;
  put_big_endian(header, sequence, 8);
  put_big_endian(header, payload.size(), 4);
  Digest mac = hmac_sha256(key, {header, payload});
  return std::string(reinterpret_cast<const char*>(mac.data()), kFrameTagSize);
}

}  // namespace

std::string FrameAuth::seal(std::string_view payload) {
  std::string body(payload);
  body += frame_tag(keys_.send, sent_++, payload);
  return body;
}

std::string FrameAuth::open(std::string body) {
  const std::uint64_t sequence = received_++;
  const std::string_view payload(body.data(), body.size() - std::min(body.size(), kFrameTagSize));
  if (body.size() <= kFrameTagSize ||
      !constant_time_equal(std::string_view(body).substr(payload.size()),
                           frame_tag(keys_.receive, sequence, payload))) {
    throw FrameError(fmt::format(
        "authentication failed on frame {} after the handshake: it was altered, replayed, "
        "reordered or not sent by a holder of the token",
        sequence));
  }
  body.resize(payload.size());
  return body;
}

std::string encode_frame(std::string_view body) {
  if (body.empty() || body.size() > kMaxFrameSize) {
    throw FrameError(fmt::format("rendezvous: cannot send a frame of {} bytes (allowed 1..{})",
                                 body.size(), kMaxFrameSize));
  }
  auto n = static_cast<std::uint32_t>(body.size());
  std::string out;
  out.reserve(kFrameHeaderSize + body.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(body);
  return out;
}

std::size_t FrameDecoder::feed(const char* data, std::size_t size) {
  std::size_t used = 0;
  if (complete_) return 0;
  while (header_filled_ < kFrameHeaderSize && used < size) {
    header_[header_filled_++] = static_cast<unsigned char>(data[used++]);
    if (header_filled_ == kFrameHeaderSize) {
      std::uint32_t n = (std::uint32_t{header_[0]} << 24) | (std::uint32_t{header_[1]} << 16) |
                        (std::uint32_t{header_[2]} << 8) | std::uint32_t{header_[3]};
      if (n == 0) throw FrameError("frame with an empty body");
      if (n > max_size_) {
        throw FrameError(
            fmt::format("frame of {} bytes exceeds the limit of {} bytes", n, max_size_));
      }
      body_size_ = n;
      // No reserve: memory grows with bytes actually received, not with what the header claims.
      body_.clear();
    }
  }
  if (header_filled_ < kFrameHeaderSize) return used;
  std::size_t take = std::min(size - used, body_size_ - body_.size());
  body_.append(data + used, take);
  used += take;
  if (body_.size() == body_size_) complete_ = true;
  return used;
}

std::optional<std::string> FrameDecoder::next() {
  if (!complete_) return std::nullopt;
  std::string out = std::move(body_);
  body_ = std::string();
  header_filled_ = 0;
  body_size_ = 0;
  complete_ = false;
  return out;
}

}  // namespace trainrun::rendezvous
