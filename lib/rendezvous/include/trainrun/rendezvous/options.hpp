#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "trainrun/rendezvous/endpoint.hpp"

// The rendezvous' options, one struct per concern, each default written here and nowhere else.
// The server, the client, the round machine and the `welcome` message take the struct they need.
namespace trainrun::rendezvous {

using Clock = std::chrono::steady_clock;

// A duration in seconds, as messages and the wire give it.
inline double in_seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Lines for a log, without prefix; nothing is logged when empty.
using LogFunction = std::function<void(const std::string& line)>;

// Who may take part: agents of this run id, proving the token when one is set.
struct Credentials {
  std::string run_id;
  std::optional<std::string> token;
};

// How each end of a connection knows the other is alive: both send something at least every
// keep_alive_interval, and a peer silent for heartbeat_timeout is lost. The server's values reach
// every client in `welcome`.
struct LivenessOptions {
  Clock::duration keep_alive_interval = std::chrono::seconds(5);
  Clock::duration heartbeat_timeout = std::chrono::seconds(15);
};

// How rounds form, restart and end (RoundRules, whichever backend keeps them).
struct RoundOptions {
  bool static_ranks = false;  // static backend: ranks are the nodes' node_rank, count = max
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  // A forming round not complete this long after its first join ends the job.
  Clock::duration join_timeout = std::chrono::seconds(600);
  // Once min_nodes have joined, how long to wait for more.
  Clock::duration last_call_timeout = std::chrono::seconds(30);
  // How often nodes waiting in a forming round are told how it goes (`waiting`).
  Clock::duration status_interval = std::chrono::seconds(10);
  MasterEndpoint static_master;  // static backend: worker RANK 0's store
};

// One connection between a client and the server, on either end.
struct ConnectionOptions {
  // The server drops a connection whose handshake is not done within this, however slowly it
  // sends bytes; a client retries a `hello` left unanswered this long.
  Clock::duration handshake_timeout = std::chrono::seconds(10);
  // After its last message (the job's `stop`) to a live peer, the server waits this long for the
  // peer's close, so that the message is not lost to a reset.
  Clock::duration close_linger = std::chrono::seconds(5);
  // After a `reject`, or a frame that breaks the protocol, the closing end waits this long for
  // the peer's close: the reason is all that is owed.
  Clock::duration reject_linger = std::chrono::seconds(1);
  // A client that leaves (its agent shuts down) waits this long for the server to take its last
  // message.
  Clock::duration leave_linger = std::chrono::seconds(2);
  // A client's attempt to connect (resolve and connect) that takes longer fails and is retried.
  Clock::duration attempt_timeout = std::chrono::seconds(5);
  // When the endpoint's port is held on this machine by something that refuses connections:
  // how long refusals are taken for a hosting agent that is starting (between its bind and its
  // listen). Past it the holder is judged not a trainrun host.
  Clock::duration refused_grace = std::chrono::seconds(3);
};

// The server's bounds, so that a flood of connections cannot exhaust it. An agent sets the two
// counts from the descriptors it has left once its workers' are reserved.
struct ServerLimits {
  // Connections still in their handshake; beyond it the oldest is dropped at once, so a flood of
  // idle connections cannot keep a real agent out (its handshake takes milliseconds).
  std::size_t max_pending = 1024;
  // Connections past the handshake; beyond it new ones are refused.
  std::size_t max_admitted = 8192;
  // Bytes of partial incoming frames held for all connections in their handshake together (each
  // holds at most kMaxHandshakeFrameSize), and for all admitted connections together (each at
  // most kMaxFrameSize). A connection whose next bytes would go past its budget is closed
  // without a word, as a flooded server closes a pending handshake: a client tries again.
  std::size_t max_pending_frame_bytes = 1 << 20;
  std::size_t max_admitted_frame_bytes = 64 << 20;
  // Connection-level refusals (a flood) are logged at most once per this, with a count of those
  // not shown.
  Clock::duration refusal_log_interval = std::chrono::seconds(10);
};

// Exponential back-off between attempts, with jitter (backoff.hpp).
struct BackoffOptions {
  Clock::duration initial = std::chrono::milliseconds(100);
  Clock::duration max = std::chrono::seconds(5);
  double multiplier = 2;
  // Each wait is drawn from [1 - jitter, 1] times the current interval.
  double jitter = 0.5;
};

// How a backend tries to reach its server or store again. How long: as long as a round may take
// to form (join_deadline in handler.hpp).
struct RetryOptions {
  BackoffOptions backoff;
  // "not reachable yet" is logged at most this often.
  Clock::duration log_interval = std::chrono::seconds(10);
};

}  // namespace trainrun::rendezvous
