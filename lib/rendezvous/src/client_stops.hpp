#pragma once

#include <string>
#include <string_view>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// What ends an agent's part in the rendezvous, in words: each Stop a client gives, from what
// happened and at which endpoint ("host:port"). Pure.
struct ClientStops {
  std::string endpoint;

  // The endpoint answered, but not with the protocol: no retry can change that. `what`: what it
  // sent (sent()), or that it sent nothing.
  Stop not_a_host(const std::string& what) const;
  // A sealed frame did not open: someone between this node and the server altered it.
  Stop tampered(const std::string& why, bool admitted) const;
  Stop server_lost(const std::string& why) const;
  Stop invalid_message(const std::string& what) const;
  // No message within the heartbeat timeout.
  Stop silent(Clock::duration heartbeat_timeout) const;
  // The server refused this node's hello, or this node the server's proof.
  Stop refused(const std::string& reason, Refusal kind) const;
  Stop refused_server(const std::string& why) const;
  // A join refused after admission (or by the rules, on etcd).
  Stop dropped(const Reject& reject) const;

  // `it sent "..."`: the first bytes a peer sent, printable ASCII as it is and every other byte
  // as \xNN (it may be binary, or not UTF-8), then "..." when `more` followed them.
  static std::string sent(std::string_view head, bool more);
};

}  // namespace trainrun::rendezvous
