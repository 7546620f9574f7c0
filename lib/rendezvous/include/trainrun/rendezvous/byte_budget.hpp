#pragma once

#include <algorithm>
#include <cstddef>

namespace trainrun::rendezvous {

// Bytes that many holders share under one limit (the server's partial incoming frames): each
// holder keeps its own charge and changes it through resize, which refuses to go past the limit.
// Single-threaded, like the io_context it serves.
class ByteBudget {
 public:
  explicit ByteBudget(std::size_t limit) : limit_(limit) {}

  // Changes a holder's charge from `held` to `wanted`. False, and nothing changed, when that
  // would take the total past the limit; a charge that shrinks always succeeds.
  bool resize(std::size_t& held, std::size_t wanted) {
    if (wanted > held && used_ + (wanted - held) > limit_) return false;
    used_ = used_ - held + wanted;
    held = wanted;
    peak_ = std::max(peak_, used_);
    return true;
  }

  std::size_t used() const { return used_; }
  std::size_t peak() const { return peak_; }
  std::size_t limit() const { return limit_; }

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace trainrun::rendezvous
