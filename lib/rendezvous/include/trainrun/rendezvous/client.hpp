#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

struct ClientOptions {
  HostPort endpoint;  // the rendezvous endpoint
  Credentials credentials;
  ConnectionOptions connection;
  RetryOptions retry;
  // Unreachable endpoints are retried until this passes.
  Clock::duration deadline = RoundOptions{}.join_timeout;
  // Set when the endpoint is on this machine and this agent could not bind its port. Called on
  // a refused connection, it returns the bind error while the port is still held, else nothing.
  // Held but refusing means the holder does not listen: it is not a trainrun host, and waiting
  // cannot help. Past connection.refused_grace (a hosting agent may be starting) the client gives
  // up. Unset (remote endpoints): refusals are retried until the deadline.
  std::function<std::optional<std::string>()> local_port_held;
  LogFunction log;
};

// What a request for the other nodes' stacks brings back: each answer (a JSON object's text), the
// nodes that did not answer, and an error when the request could not be made or got no end.
using StacksDone = std::function<void(std::vector<std::string> answers,
                                      std::vector<StacksMissing> missing, std::string error)>;
// The error of a request the host did not end within its bound (the answers that came are kept).
inline constexpr std::string_view kStacksNoEnd =
    "the rendezvous host did not end the request in time";

struct ClientEvents {
  std::function<void(const Assignment&)> on_assignment;  // a round formed: start workers
  std::function<void(const Restart&)> on_restart;        // stop workers, then join() the next round
  std::function<void(const Waiting&)> on_waiting;  // progress while a round forms (may be empty)
  std::function<void(const Stop&)> on_stop;        // terminal: finished, failed, lost, refused
  std::function<void(const Halt&)> on_halt;  // stop workers, then report_ended(); a stop follows
  // The host asks for this node's stacks, or `question` (StacksAsk) when it is not empty: collect
  // them, then call `reply` once with the answer (a JSON object's text). Unset: the node answers
  // that it cannot.
  std::function<void(std::string question, std::function<void(std::string answer)> reply)>
      on_stacks_ask;
};

// One agent's connection to the rendezvous server, on the agent's io_context, never blocking.
// start() connects (retrying with back-off until the deadline) and authenticates; join()
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
  // `failures`: this node's failures of the round so far (Failure::failures).
  void report_failure(const FailureReport& failure, const std::vector<WorkerFailure>& failures,
                      int not_relayed);
  void report_done();
  void abort(const std::string& reason);
  // After on_halt, once every worker has ended: what failed (perhaps nothing).
  void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed);
  // Asks every other node for its stacks, or `question` (StacksRequest), through the host; `done`
  // is called once, on the io_context, whatever happens (the connection ends, or no end within
  // `bound`: with an error, and the answers that came). The host gives up on the others after
  // kStacksAnswerTimeout; the default bound is for a host that never ends the request.
  void request_stacks(StacksDone done, std::string question = {},
                      Clock::duration bound = kStacksAnswerTimeout * 2);
  // Says goodbye (the server treats this node as lost) and closes. No events afterwards.
  void leave(const std::string& reason);

  std::optional<Assignment> assignment() const;
  // This end of the connection while admitted: how the server tells this client's connection
  // from the others (the hosting agent's own, for RendezvousServer::leave).
  std::optional<boost::asio::ip::tcp::endpoint> local_endpoint() const;
  // The address this node advertised in its last join (node.addr, filled in as above); empty
  // before the first join was sent.
  std::string advertised_address() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// `node` as a client advertises it in its join. An empty addr becomes `local` (this end of the
// connection to the server), or this machine's host name where `local` is a loopback address
// reached through a host name that is not one (other nodes could not reach it); an empty host
// becomes the host name.
NodeDescriptor advertised(NodeDescriptor node, const boost::asio::ip::address& local,
                          const std::string& endpoint_host);

}  // namespace trainrun::rendezvous
