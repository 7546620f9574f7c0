#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "round_rules.hpp"
#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// The job's rounds as one value kept in etcd (/trainrun/<run_id>/state) and changed only by
// compare-and-set: the rules are RoundRules', the same as the built-in rendezvous'; every agent
// may apply a change, so no node is special. What is etcd's own: the state's encoding (times in
// Unix seconds: the agents' clocks are compared with each other only for timeouts of seconds),
// generations, the keys each agent writes for itself (its join, its answer, its done, what
// failed there), which a change takes into the state, and members found lost by their keys.
// docs/protocol.md describes the layout.
//
// A run id may hold one job after another: each has a generation, and a job that has ended is
// over for good; an agent that first finds it so belongs to the next generation, which its join
// starts afresh (compare-and-set: of agents arriving together, one starts it, the others join).
using EtcdMember = RoundMember;

// The most bytes of failures one value in etcd holds (the state's, a node's `ended` key's): far
// under etcd's default request limit (1.5 MiB) with the members beside them.
inline constexpr std::size_t kMaxStoredFailureBytes = 256 * 1024;

// The layout of the state this version writes and reads; a state of another layout is refused.
// 3: the state has its summary beside it (EtcdRoundSummary).
inline constexpr int kEtcdStateLayout = 3;

struct EtcdRoundState : RoundState {
  std::uint64_t generation = 0;  // which job of the run id this is
  // Node id: the last of its joins taken into the state, and why it was refused, where it was.
  std::map<std::string, std::uint64_t> joins_taken;
  std::map<std::string, Reject> refused;
};

std::string encode_state(const EtcdRoundState& state);
// A state of another layout than this version's: another version of trainrun wrote it.
class StateLayoutError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// Throws ProtocolError for a value that is not a state this version wrote (StateLayoutError when
// it is one of another layout).
EtcdRoundState decode_state(const std::string& text);

// What a change of the state was, in a few bytes: written beside the state (key `round`) in the
// same transaction, and watched by the agents that do not write, instead of the state (about
// 15 KB at 64 members, sent to every watcher at every change). An agent reads the state only
// where the summary says the change concerns it (concerns()); a round formed or started with it
// in it, it takes from the summary: the members while running, their assignments once started.
struct EtcdRoundSummary {
  std::uint64_t generation = 0;
  RoundState::Phase phase = RoundState::Phase::forming;
  std::uint64_t round = 0;
  bool started = false;
  std::size_t waiting = 0;              // s.waiting's size, for the agents' "waiting" lines
  std::optional<double> deadline;       // EtcdRound::next_deadline(), Unix seconds
  std::set<std::string> refused;        // s.refused's node ids
  std::set<std::string> left;           // members (participants, waiting) no longer members
  std::vector<std::string> members;     // running: the participants' ids, in order
  std::vector<Assignment> assignments;  // started: theirs, index-aligned with `members`
  std::optional<Stop> stop;             // ended: the state's stop, where it is short
};
// The longest stop a summary carries; a longer one is read from the state.
inline constexpr std::size_t kMaxSummaryStopBytes = 1024;
std::string encode_summary(const EtcdRoundSummary& summary);
// Nothing for a value that is not a summary this version wrote (the agent reads the state).
std::optional<EtcdRoundSummary> decode_summary(const std::string& text);
// Whether the change `summary` says was made concerns node `id`, which last knew `known` (the
// summary of the state it read, or of the change it took in last): a new job, phase, round or
// start, or `id` refused or no longer a member.
bool concerns(const EtcdRoundSummary& summary, const std::optional<EtcdRoundSummary>& known,
              const std::string& id);

// A node's join, a key of its own (joins/<node id>), not a write to the shared state: every agent
// joins at once, and separate puts do not collide. `seq`: which of this agent's joins it is (a
// node joins again after each restart); `revision`: the key's, the order joins are taken in.
struct EtcdJoin {
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  NodeDescriptor node;
  std::int64_t revision = 0;
};
// A node's exit barrier, a key of its own (done/<node id>): the round its workers finished.
struct EtcdDone {
  std::uint64_t generation = 0;
  std::uint64_t round = 0;
};
std::string encode_join(const EtcdJoin& join);
std::string encode_done(const EtcdDone& done);
// Nothing for a value that is not one (it counts as no key).
std::optional<EtcdJoin> decode_join(const std::string& text, std::int64_t revision);
std::optional<EtcdDone> decode_done(const std::string& text);

// The keys beside the state, by node id, as one read (or a watch since) found them.
struct EtcdKeys {
  std::set<std::string> live;                    // nodes/: the agents whose lease lives
  std::map<std::string, EtcdJoin> joins;         // joins/
  std::map<std::string, std::uint64_t> answers;  // answers/: the round each answered
  std::map<std::string, EtcdDone> done;          // done/
  std::map<std::string, Ended> ended;            // ended/: what failed there
};

// The rules applied to the state in etcd. `now`: Unix seconds.
class EtcdRound {
 public:
  // One change of the state at `now`; returns whether it changed anything.
  using Change = std::function<bool(EtcdRoundState&, double now)>;

  EtcdRound(RoundOptions options, std::string endpoint, double heartbeat_timeout_s)
      : rules_(std::move(options), endpoint),
        endpoint_(std::move(endpoint)),
        heartbeat_timeout_s_(heartbeat_timeout_s) {}

  // The generation an agent belongs to, from the state it first reads: the stored job while it
  // forms or runs, the next one once it has ended (0 when nothing is stored).
  std::uint64_t generation_to_join(const std::optional<EtcdRoundState>& stored) const;
  // The state that changes of generation `g` apply to: the stored one; a fresh one where nothing
  // is stored or the stored job is an earlier (so ended) one; nothing where a later job has begun,
  // so `g` is over.
  std::optional<EtcdRoundState> state_of(const std::optional<EtcdRoundState>& stored,
                                         std::uint64_t g) const;

  // A change as every agent makes it, to the state it read with the keys beside it: first the
  // members whose node key is gone are lost, the joins not taken yet are taken (in the order
  // they were written), the members done are done, a round every member has answered starts,
  // and a concluding job takes what its members said; then `change`.
  bool apply(EtcdRoundState& s, const EtcdKeys& keys, const Change& change, double now) const;
  // The joins of live nodes not taken yet, in the order written; each refused one is kept in
  // s.refused for its agent to read.
  bool take_joins(EtcdRoundState& s, const EtcdKeys& keys, double now) const;

  // Why this join is refused, or nothing.
  std::optional<Reject> refusal(const EtcdRoundState& s, const std::string& id,
                                const NodeDescriptor& node) const;
  bool join(EtcdRoundState& s, const std::string& id, const NodeDescriptor& node, double now) const;
  // The round starts once every participant has answered it.
  bool start(EtcdRoundState& s, const std::map<std::string, std::uint64_t>& answers) const;
  bool failure(EtcdRoundState& s, const std::string& id, const Failure& report, double now) const;
  bool done(EtcdRoundState& s, const std::string& id, std::uint64_t round) const;
  bool abort(EtcdRoundState& s, const std::string& id, const Abort& report) const;
  // Concluding: the job ends once every awaited member has said what failed (`ended`, as its key
  // under ended/ holds it), or at the deadline (join_timeout after the failure).
  bool conclude(EtcdRoundState& s, const std::map<std::string, Ended>& ended, double now) const;
  bool lost(EtcdRoundState& s, const std::string& id, const std::string& why, double now) const;
  // Members whose node key is gone (lease expired or revoked) are lost.
  bool prune(EtcdRoundState& s, const std::set<std::string>& live, double now) const;
  // Last call, join timeouts; newcomers waiting on a full job too long are dropped.
  bool tick(EtcdRoundState& s, double now) const;
  // When tick() may next change something.
  std::optional<double> next_deadline(const EtcdRoundState& s) const;
  // The summary of the change from `before` (nothing: no state yet, or unknown) to `after`.
  EtcdRoundSummary summary(const std::optional<EtcdRoundState>& before,
                           const EtcdRoundState& after) const;
  // The running round's assignments, index-aligned with s.participants, and a halted member's
  // halt.
  std::vector<Assignment> assignments(const EtcdRoundState& s) const {
    return rules_.forming().assignments(s);
  }
  Halt halt(const EtcdRoundState& s) const { return rules_.halt(s); }
  // A Stop for a node no longer in the state (dropped while waiting on a full job, or lost).
  Stop dropped(const EtcdRoundState& s) const;
  // A Stop for an agent whose job was replaced by a later one before it saw the end.
  Stop superseded() const;

 private:
  RoundRules rules_;
  std::string endpoint_;
  double heartbeat_timeout_s_;
};

}  // namespace trainrun::rendezvous
