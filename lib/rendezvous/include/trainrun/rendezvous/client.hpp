#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/server.hpp"

namespace trainrun::rendezvous {

struct ClientOptions {
  std::string host;  // the rendezvous endpoint
  int port = 29400;
  std::string run_id;
  std::optional<std::string> token;
  // Until the server has admitted us, unreachable endpoints are retried until this passes.
  Clock::duration connect_deadline = std::chrono::seconds(600);
  Clock::duration attempt_timeout = std::chrono::seconds(5);
  Clock::duration handshake_timeout = std::chrono::seconds(10);
  Clock::duration initial_backoff = std::chrono::milliseconds(100);
  Clock::duration max_backoff = std::chrono::seconds(5);
  Clock::duration retry_log_interval = std::chrono::seconds(10);
  // Set when the endpoint is on this machine and this agent could not bind its port. Called on
  // a refused connection, it returns the bind error while the port is still held, else nothing.
  // Held but refusing means the holder does not listen: it is not a trainrun host, and waiting
  // cannot help. Past refused_grace (a hosting agent may be starting) the client gives up.
  // Unset (remote endpoints): refusals are retried until connect_deadline.
  std::function<std::optional<std::string>()> local_port_held;
  Clock::duration refused_grace = std::chrono::seconds(3);
  LogFunction log;  // lines without prefix; nothing is logged when empty
};

struct ClientEvents {
  std::function<void(const Assignment&)> on_assignment;  // a round formed: start workers
  std::function<void(const Restart&)> on_restart;        // stop workers, then join() the next round
  std::function<void(const Waiting&)> on_waiting;  // progress while a round forms (may be empty)
  std::function<void(const Stop&)> on_stop;        // terminal: finished, failed, lost, refused
};

// One agent's connection to the rendezvous server, on the agent's io_context, never blocking.
// start() connects (retrying with back-off until connect_deadline) and authenticates; join()
// may be called before that and is sent once admitted. Exactly one on_stop ends its life; after
// on_stop, or after leave(), no event is delivered. Connections lost during the handshake are
// retried (a flooded server drops pending handshakes); a peer that answers with something that
// is not the protocol is not a trainrun host, and ends the client at once (StopCause::rejected).
class RendezvousClient {
 public:
  RendezvousClient(boost::asio::io_context& io, ClientOptions options, ClientEvents events);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  void start();
  // An empty node.addr is filled in: the local address of the connection to the server, or the
  // host name when that is a loopback address reached through a host name.
  void join(const NodeDescriptor& node);
  void report_failure(const WorkerFailure& failure);
  void report_done();
  // Says goodbye (the server treats this node as lost) and closes. No events afterwards.
  void leave(const std::string& reason);

  std::optional<Assignment> assignment() const;
  // This end of the connection while admitted: how the server tells this client's connection
  // from the others (the hosting agent's own, for RendezvousServer::leave).
  std::optional<boost::asio::ip::tcp::endpoint> local_endpoint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace trainrun::rendezvous
