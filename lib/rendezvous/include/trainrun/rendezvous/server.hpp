#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

class RoundMachine;  // round_machine.hpp, private to the library

struct ServerOptions {
  Credentials credentials;
  RoundOptions round;
  LivenessOptions liveness;
  ConnectionOptions connection;
  ServerLimits limits;
  std::string endpoint;  // where agents meet ("host:port"), for messages
  LogFunction log;
};

// Bytes of partial incoming frames the server holds, now and at most so far, for connections in
// their handshake and for admitted ones (each bounded by its ServerLimits budget).
struct FrameBytes {
  std::size_t pending = 0;
  std::size_t pending_peak = 0;
  std::size_t admitted = 0;
  std::size_t admitted_peak = 0;
};

// The rendezvous server: TCP, on the agent's io_context, never blocking. It frames and
// authenticates connections and feeds the rest to a RoundMachine. Survives garbage, oversize
// frames, slow or silent peers and connection floods with bounded memory (see docs/protocol.md).
class RendezvousServer {
 public:
  RendezvousServer(boost::asio::io_context& io, ServerOptions options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // Binds (SO_REUSEADDR) and listens. Throws boost::system::system_error on failure.
  void listen(const boost::asio::ip::tcp::endpoint& endpoint);
  boost::asio::ip::tcp::endpoint local_endpoint() const;

  // Stops accepting and closes every remaining connection at once, writing what is queued as
  // far as the socket takes it without waiting. Connections the job's end was already sent to
  // are not among them: those close gracefully, each bounded by the close linger.
  void close();
  // The hosting agent is going away mid-job (`reason`: what stopped it). Every other node gets a
  // stop naming the host and the reason, delivered within the close linger (at once for peers
  // already silent past the heartbeat timeout); then as close(). `own`: the local endpoint of
  // the hosting agent's own client connection, to name that node.
  void leave(const std::string& reason, std::optional<boost::asio::ip::tcp::endpoint> own);

  const RoundMachine& machine() const;
  std::size_t pending_connections() const;
  std::size_t admitted_connections() const;
  FrameBytes partial_frame_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace trainrun::rendezvous
