#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// What every backend receives: where agents meet, who this node is, how rounds form, how each
// node shows it is alive, and how the endpoint is tried again while it cannot be reached.
struct RendezvousOptions {
  HostPort endpoint;
  std::string local_addr;  // the address advertised to the others; empty: derived
  Credentials credentials;
  RoundOptions round;
  LivenessOptions liveness;
  RetryOptions retry;
  // Whether this node counts as the one the endpoint names, whatever the address: the built-in
  // hosts its server; etcd's takes node rank 0 (as the built-in's host does). Empty: decided by
  // the address.
  std::optional<bool> is_host;
};

// A node that cannot reach the endpoint gives up when a round it could join would have timed
// out: the one rule for how long every backend retries.
inline Clock::duration join_deadline(const RendezvousOptions& options) {
  return options.round.join_timeout;
}

// What only the built-in TCP backend uses besides: who hosts the server, and the server's and the
// connections' own bounds. The backend is round.static_ranks: static, node rank 0 hosts the
// server and ranks are the nodes' node_rank; dynamic, the agent owning the endpoint hosts it.
struct TcpRendezvousOptions : RendezvousOptions {
  int node_rank = -1;  // static backend only
  ConnectionOptions connection;
  ServerLimits limits;  // for the server, where this node hosts it
};

// This node must host the rendezvous server and cannot: what stood in the way (the port taken).
class HostingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What an agent asks of the rendezvous, whatever coordinates the job behind it: the built-in TCP
// server (make_rendezvous_handler) or etcd (etcd.hpp).
//
// Lifecycle, all on the agent's io_context (every event comes on it — the etcd backend's HTTP
// client runs its requests on a thread of its own and posts the results back). No call blocks
// but the etcd backend's shutdown(), for its last words to etcd, a few seconds at most:
//   auto rdzv = make_rendezvous_handler(io, options, log);
//   rdzv->start(events);          // hosts the server if this node owns the endpoint, connects
//   rdzv->join({nproc, port});    // join the first round
//   events.on_assignment(a)       → start workers with a's ranks, MASTER_ADDR/PORT, restart count
//   a worker fails                → rdzv->report_failure(f, list), keep waiting: the decision comes
//                                   back to every node (including this one) as on_restart, or
//                                   as on_halt and then on_stop
//   events.on_halt(h)             → stop workers, then rdzv->report_ended(list); the on_stop that
//                                   follows names the job's failures and root cause
//   all local workers succeeded   → rdzv->report_done(); on_stop(finished, 0) follows once every
//                                   node is done (the exit barrier)
//   events.on_restart(r)          → stop workers, then rdzv->join(...) again for the next round
//   events.on_stop(s)             → stop workers if running; exit with s.exit_code. Terminal.
//   the preflight failed          → rdzv->abort(line): on_stop(preflight_failed) on every node
//   local stop signal             → rdzv->shutdown(reason): the others see this node leave; when
//                                   it hosts the server, the job ends for them with a stop
//                                   naming this node and `reason`
// After on_stop or shutdown() keep running the io_context until it has no work left: the
// server's last messages are flushed and its connections closed (bounded by a few seconds).
class RendezvousHandler {
 public:
  struct JoinRequest {
    int nproc = 1;
    // A port this agent holds for worker RANK 0's store in case it becomes group rank 0
    // (dynamic backend; required there). Ignored by the static backend (round.static_master is
    // used).
    int master_port = 0;
    // Dynamic backends: the node rank asked for (--node-rank; -1: none), and the one this agent
    // had in the job's previous round (-1: none). Both preferences, kept when free.
    int preferred_rank = -1;
    int last_rank = -1;
    std::optional<PreflightOffer> preflight = {};  // travels in the join: NodeDescriptor::preflight
  };

  virtual ~RendezvousHandler() = default;

  // Throws HostingError when this node must host the server and cannot (port taken).
  virtual void start(ClientEvents events) = 0;
  virtual void join(const JoinRequest& request) = 0;
  // `failures`: this node's failures of the round so far, `not_relayed` those left out of it.
  virtual void report_failure(const FailureReport& failure,
                              const std::vector<WorkerFailure>& failures, int not_relayed) = 0;
  virtual void report_done() = 0;
  // After on_halt: this node's workers have all ended, these failed.
  virtual void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) = 0;
  virtual void shutdown(const std::string& reason) = 0;
  // This node's preflight failed: the job ends on every node with `reason` (on_stop follows,
  // StopCause::preflight_failed), not as a lost node that a restart would replace.
  virtual void abort(const std::string& reason) = 0;

  // Asks every other node for its workers' stacks (trainrun --stacks on a multi-node job);
  // `done` is called once, on the io_context. Answered through ClientEvents::on_stacks_ask.
  virtual void request_stacks(StacksDone done) {
    done({}, {},
         "this rendezvous backend cannot ask the other nodes: run trainrun --stacks on each node");
  }

  // Asks every other node `question` (StacksRequest::question) and gives their answers to `done`
  // after the host's end or `bound`, whichever comes first; called once, on the io_context.
  virtual void ask_others(std::string /*question*/, Clock::duration /*bound*/, StacksDone done) {
    done({}, {}, "this rendezvous backend relays nothing between the nodes");
  }

  // "host:port", for messages.
  virtual std::string endpoint() const = 0;
  // Whether this agent hosts the server (known once start() has decided).
  virtual bool hosting() const = 0;
  // The address this node advertises to the others (known once its join was sent).
  virtual std::string advertised_address() const = 0;
};

// The built-in TCP rendezvous for the c10d-style and static backends. `log` receives lines
// without prefix (the agent adds "trainrun: "), including the waiting status
// ("waiting for nodes: 1 of 2 joined, 12 s of 600 s").
std::unique_ptr<RendezvousHandler> make_rendezvous_handler(boost::asio::io_context& io,
                                                           TcpRendezvousOptions options,
                                                           LogFunction log);

}  // namespace trainrun::rendezvous
