#pragma once

#include <fmt/format.h>

#include <string>

namespace trainrun::bench {

// A loopback address of simulated client `i`'s own in 127.0.0.0/8, to connect to (the servers
// listen on every address) or to bind before connecting. Clients on distinct hosts reach a server
// from distinct addresses; thousands of connections between one pair of addresses instead make the
// kernel search for a free ephemeral port on each connect (__inet_hash_connect), which cost the
// simulating process more CPU than the whole server used (perf at 16,384), and run out of ports
// past about 28,000.
inline std::string loopback_source(int i) {
  return fmt::format("127.{}.{}.{}", 1 + i / 62500, (i / 250) % 250 + 1, i % 250 + 1);
}

}  // namespace trainrun::bench
