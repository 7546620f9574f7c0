#include "trainrun/rendezvous/frame.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrun::rendezvous {

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
