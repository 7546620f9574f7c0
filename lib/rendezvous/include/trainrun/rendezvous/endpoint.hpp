#pragma once

#include <string>

namespace trainrun::rendezvous {

inline constexpr int kDefaultRendezvousPort = 29400;

struct HostPort {
  std::string host;
  int port = kDefaultRendezvousPort;
};

// Where worker RANK 0's store lives. Dynamic rounds take it from group rank 0's descriptor;
// the static backend is given it on the command line.
struct MasterEndpoint {
  std::string addr;
  int port = 0;
};

// "host", "host:port", "[v6addr]:port" or a bare IPv6 address. Throws std::invalid_argument
// naming the problem (empty host, port not a number or out of 0..65535).
HostPort parse_endpoint(const std::string& text, int default_port = kDefaultRendezvousPort);

// "host:port", as messages name an endpoint.
std::string to_string(const HostPort& endpoint);

// "localhost" or a literal loopback address (127.x.y.z, ::1): a host no other machine reaches.
// Names are not resolved.
bool is_loopback_host(const std::string& host);

}  // namespace trainrun::rendezvous
