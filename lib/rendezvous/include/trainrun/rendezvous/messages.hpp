#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trainrun/base/process.hpp"
#include "trainrun/rendezvous/options.hpp"
#include "trainrun/rendezvous/preflight_offer.hpp"

namespace trainrun::rendezvous {

// Every frame body is one JSON object with a "type" field; docs/protocol.md is the reference.
inline constexpr std::string_view kMagic = "trainrun-rdzv";
inline constexpr int kProtocolVersion = 5;

// A message that is not valid for this protocol: bad JSON, unknown type, a field missing, of the
// wrong type or out of range. The peer is told why and the connection is closed.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The longest host name, address or run id a message carries; the most workers a node may run.
// The launcher refuses more when it parses its command line, so that no node learns it later.
inline constexpr std::size_t kMaxNameLength = 255;
inline constexpr int kMaxNproc = 1 << 16;

// What an agent says about itself when it joins a round.
struct NodeDescriptor {
  std::string host;      // host name, for messages
  std::string addr;      // advertised address; empty: the server uses the address it sees
  std::int64_t pid = 0;  // agent process id, a tie breaker between agents on one host
  int nproc = 1;         // workers on this node
  // Static backend: this node's given rank. Dynamic: its --node-rank, a preference; -1: none.
  int node_rank = -1;
  int master_port = 0;  // a port this agent holds for worker RANK 0's store, 0 if none
  // Dynamic: the node rank this agent had in the job's previous round (-1: none), kept when it
  // can be; and whether it is the node the endpoint names (the built-in: it hosts the server),
  // which takes node rank 0 (docs/protocol.md, Rank assignment).
  int last_rank = -1;
  bool at_endpoint = false;
  std::optional<PreflightOffer> preflight = {};  // none: this node runs no preflight
  // The address the built-in server saw this node's connection come from (IPv4-mapped addresses
  // as IPv4); the server fills it in: not on the wire, nor in etcd's state.
  std::string seen_addr = {};
};

// The longest failure summary a node sends (docs/protocol.md): a longer one is cut to this size
// when encoded. Tracebacks are shortened to fit before that (see format_failure_summary), with a
// note naming the host and file that hold them whole.
inline constexpr std::size_t kMaxSummaryBytes = 16 * 1024;

// A worker's failure as its agent reports it; the server relays it to every node in `restart`
// or `stop`.
struct FailureReport {
  std::string host;
  int rank = -1;  // global rank of the failed worker
  int local_rank = -1;
  int exit_code = 1;    // as the agent reports it (128+N for signal N)
  std::string summary;  // the failure summary shown on every node, kMaxSummaryBytes at most
};

// One failed worker, as its agent recorded it: what every node's failure summary shows of it.
struct WorkerFailure {
  std::string host;
  int rank = -1;  // global rank
  int local_rank = -1;
  std::int64_t pid = 0;
  int exit_code = 0;       // when it exited
  int signal = 0;          // the signal that killed it, 0 when it exited
  double timestamp = 0;    // unix seconds: from its error file, else when its end was seen
  std::string error_file;  // empty: it wrote none
  std::string message;
  std::string traceback;  // cut to kMaxRelayedTraceback by the sender
  // The last lines of its stderr, where it wrote no error file (the summary's best clue), cut
  // the same way; optional in the message (absent: none).
  std::string stderr_tail;
  // The shell's convention: the exit code, or 128+N for death by signal N.
  int shell_code() const { return signal != 0 ? shell_code_for_signal(signal) : exit_code; }
};

// The longest traceback (and message) a node sends of one failure; the launcher cuts longer ones
// to their head and tail around a note naming the file and host that hold them whole.
inline constexpr std::size_t kMaxRelayedTraceback = 4 * 1024;
// At most this many failures travel in a `stop` (the root cause first); the rest are counted.
inline constexpr std::size_t kMaxRelayedFailures = 32;
// And at most this many bytes of them, encoded: 32 failures of the longest texts, all control
// characters (six bytes each escaped), would not fit in one frame (kMaxFrameSize, 1 MiB).
inline constexpr std::size_t kMaxRelayedFailureBytes = 512 * 1024;

// The root-cause rule, the one every node applies (docs/cli.md): the failure with the earliest
// timestamp, the lowest rank among equals. `F` has `timestamp` and `rank`.
template <class F>
bool failed_before(const F& a, const F& b) {
  return a.timestamp < b.timestamp || (a.timestamp == b.timestamp && a.rank < b.rank);
}

// The root cause of `failures` by that rule; `failures` must not be empty.
template <class F>
std::size_t root_cause_index(const std::vector<F>& failures) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i)
    if (failed_before(failures[i], failures[best])) best = i;
  return best;
}

enum class StopCause {
  finished,
  worker_failed,
  node_lost,
  join_timeout,
  rejected,
  server_lost,
  left,
  preflight_failed
};
enum class RestartCause { worker_failed, node_lost, scale_up };

// What a refusal (or a stop for want of a server) is about, where the user has something to
// change: this library says what happened, the launcher adds which of its options to look at.
enum class Refusal {
  none,
  run_id,         // the node belongs to another job
  token,          // the rendezvous requires a token the node does not hold
  node_rank,      // static ranks: the node's rank is out of range
  rank_taken,     // static ranks: another node has the node's rank
  port_held,      // the endpoint's port is held on this machine by what is not a host
  not_a_host,     // what listens at the endpoint is not a trainrun rendezvous host
  unreachable,    // no connection to the endpoint before the deadline
  no_handshake,   // connections, but none admitted before the deadline
  foreign_state,  // etcd: the state under the run id is not one trainrun wrote
  state_version,  // etcd: the state under the run id was written by another trainrun version
};

std::string_view to_string(StopCause cause);
std::string_view to_string(RestartCause cause);
std::string_view to_string(Refusal refusal);

// Client to server.
struct Hello {
  std::string magic{kMagic};
  int version = kProtocolVersion;
  std::string run_id;
  std::string nonce;  // 32 random bytes, hex
  bool auth = false;  // the client holds a token
};
struct Auth {
  std::string proof;  // hex HMAC, see handshake.hpp
};
struct Join {
  NodeDescriptor node;
};
struct Heartbeat {};
struct Failure {  // "failure": a worker of this node failed in `round`
  // Constructors, not an aggregate: the lists came later, and the four-field form stays.
  Failure() = default;
  Failure(std::uint64_t r, FailureReport f, std::vector<WorkerFailure> list = {}, int left_out = 0)
      : round(r), failure(std::move(f)), failures(std::move(list)), not_relayed(left_out) {}
  std::uint64_t round = 0;
  FailureReport failure;
  // This node's failures in `round` so far, the earliest (by the rule) kMaxRelayedFailures of
  // them; `not_relayed` counts the others.
  std::vector<WorkerFailure> failures;
  int not_relayed = 0;
};
// "ended": after `halt`, every worker of this node in `round` has ended; these failed.
struct Ended {
  std::uint64_t round = 0;
  std::vector<WorkerFailure> failures;  // as in Failure
  int not_relayed = 0;
};
struct Done {
  std::uint64_t round = 0;
};
struct Leave {
  std::string reason;
};
// "abort": this node's preflight found the job cannot run as configured in `round`: it ends on
// every node with `reason`, whatever restarts are left (a restart would meet the same fault).
struct Abort {
  std::uint64_t round = 0;
  std::string reason;
};
// The roll call across nodes (trainrun --stacks), outside the rounds: an agent asks the host
// (stacks_request), the host asks every other agent (stacks_ask), each answers with its workers'
// stacks (stacks_answer), which the host relays to the asking agent, then says who did not answer
// (stacks_end). `id` is the asking side's: the agent's for its request, the host's for its ask.
// `question`, when not empty, is one JSON object (the launcher's) that the host relays unread in
// its ask: the agents answer it instead of sending their stacks.
struct StacksRequest {
  std::uint64_t id = 0;
  std::string question = {};
};
// The longest question, as JSON text: a longer one is a protocol error.
inline constexpr std::size_t kMaxQuestionBytes = 256 * 1024;
// The longest answer a node sends, as JSON text: an answer longer than this is replaced, when
// encoded, by one that says so ({"error": ...}); the launcher cuts its stacks to fit before that.
inline constexpr std::size_t kMaxStacksAnswerBytes = 512 * 1024;
// How long the host waits for the answers of the other nodes before it names them missing.
inline constexpr std::chrono::seconds kStacksAnswerTimeout{15};
struct StacksAnswer {
  std::uint64_t id = 0;
  std::string
      answer;  // one JSON object (the launcher's node answer), kMaxStacksAnswerBytes at most
};
using ClientMessage = std::variant<Hello, Auth, Join, Heartbeat, Failure, Done, Leave, Ended,
                                   StacksRequest, StacksAnswer, Abort>;

// Server to client.
struct Challenge {
  std::string nonce;  // the server's fresh nonce, hex
  std::string proof;  // the server's proof that it holds the token, hex
};
struct Welcome {
  LivenessOptions liveness;  // on the wire in seconds, to the microsecond
};
struct Reject {
  std::string reason;
  Refusal kind = Refusal::none;  // on the wire only when not none; one not known reads as none
};
struct Waiting {
  std::uint64_t round = 0;
  int joined = 0;
  int min_nodes = 1;
  int max_nodes = 1;
  double waited_s = 0;
  double timeout_s = 0;
};
struct Assignment {
  std::uint64_t round = 0;
  int group_rank = 0;
  int group_world_size = 1;
  int base_rank = 0;
  int local_world_size = 1;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  // The nodes this node checks before its workers start (preflight_peer_ranks), those of them
  // that made an offer; empty when this node made none.
  std::vector<PreflightPeer> preflight = {};
  // Group rank 0: how many other nodes check MASTER_PORT (offers with master_check, when its own
  // has one); it keeps the port open for them until each has. 0 on the other nodes.
  int master_port_checks = 0;
  // Group rank 0, which serves the job's store: every address the round's nodes are known by
  // (node_addresses); empty on the other nodes.
  std::vector<std::string> node_addresses = {};
};
struct Restart {
  RestartCause cause = RestartCause::worker_failed;
  std::string reason;
  int restart_count = 0;  // the count the next round runs with
  std::optional<FailureReport> failure;
};
struct Stop {
  Stop() = default;
  Stop(StopCause c, std::string why, int code, std::optional<FailureReport> f)
      : cause(c), reason(std::move(why)), exit_code(code), failure(std::move(f)) {}
  // This node cannot take part (exit 1), for the reason `r` names.
  Stop(StopCause c, std::string why, Refusal r)
      : cause(c), reason(std::move(why)), exit_code(1), refusal(r) {}
  StopCause cause = StopCause::finished;
  std::string reason;
  int exit_code = 0;
  std::optional<FailureReport> failure;
  // worker_failed: the job's failures, the root cause first (the rule above), at most
  // kMaxRelayedFailures of them; `not_relayed` counts the others.
  std::vector<WorkerFailure> failures;
  int not_relayed = 0;
  // rejected, join_timeout: what the refusal is about (not on the wire: the node's own stop).
  Refusal refusal = Refusal::none;
};
// "halt": the job ends with `round`: stop the workers, then send `ended` with what failed. The
// `stop` that names the job's root cause follows once every node has said.
struct Halt {
  std::uint64_t round = 0;
  std::string reason;
};
struct StacksAsk {
  std::uint64_t id = 0;
  std::string question = {};  // as in StacksRequest
};
// A node asked that gave no answer: `host` names it, `reason` says why (lost, no answer in time).
struct StacksMissing {
  std::string host;
  std::string reason;
};
// After the relayed answers of request `id`: the nodes that did not answer; `error` when the host
// could not ask at all (too many requests at once).
struct StacksEnd {
  std::uint64_t id = 0;
  std::vector<StacksMissing> missing;
  std::string error;
};
using ServerMessage = std::variant<Challenge, Welcome, Reject, Waiting, Assignment, Restart, Stop,
                                   Heartbeat, Halt, StacksAsk, StacksAnswer, StacksEnd>;

std::string encode(const ClientMessage& message);
std::string encode(const ServerMessage& message);

// Parse one frame body. Throw ProtocolError naming the offending field.
ClientMessage decode_client_message(std::string_view body);
ServerMessage decode_server_message(std::string_view body);

// The "type" tag of a message, for logs.
std::string_view type_name(const ClientMessage& message);
std::string_view type_name(const ServerMessage& message);

}  // namespace trainrun::rendezvous
