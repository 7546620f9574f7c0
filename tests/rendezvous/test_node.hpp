// A node's join as the round tests write it.
#pragma once

#include <string>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// `nproc` workers on `host`, reached at 10.0.0.1, pid 1, master port 29500.
inline NodeDescriptor node(const std::string& host, int nproc = 1) {
  NodeDescriptor n;
  n.host = host;
  n.addr = "10.0.0.1";
  n.pid = 1;
  n.nproc = nproc;
  n.master_port = 29500;
  return n;
}

}  // namespace trainrun::rendezvous
