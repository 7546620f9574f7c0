#pragma once

#include <string>

#include "trainrun/rendezvous/preflight_offer.hpp"

namespace trainrun::launch {

// What this node will run, for its preflight offer (the port and a fresh id are added by the
// agent): `entrypoint_file` is hashed ("" for none, as a module), `entrypoint` named.
struct LocalRun {
  std::string entrypoint;
  std::string entrypoint_file;
  std::string python;  // the workers' Python: "3.11.2 (/usr/bin/python3)"; "" for no Python
  std::string torch;   // its torch version, "" when none
};

// This node's offer: a fresh id, the listener's `port`, trainrun's version, the entrypoint's
// SHA-256 (read whole; "" when it cannot be read) and this network stack's identity.
rendezvous::PreflightOffer local_offer(int port, const LocalRun& run);

// This machine's boot and network namespace, hashed: agents that share it share a loopback.
std::string network_identity();

// The kernel's ephemeral port range ("32768-60999"), "" when it cannot be read.
std::string ephemeral_port_range();

}  // namespace trainrun::launch
