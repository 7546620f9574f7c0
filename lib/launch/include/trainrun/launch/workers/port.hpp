#pragma once

#include <string>

#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

// A TCP port held for worker RANK 0's store: bound with SO_REUSEADDR but never listening, so no
// other process can be given it, while the worker (which also sets SO_REUSEADDR) can still bind
// and listen on it. Released when destroyed.
class HeldPort {
 public:
  // Binds `port` on all addresses, or a free port when 0. Throws SetupError when the port
  // is taken.
  explicit HeldPort(int port);
  ~HeldPort();
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace trainrun::launch
