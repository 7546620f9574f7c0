#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// A time for the round rules: the time since an epoch each backend chooses (the built-in: its
// steady clock's; etcd: the Unix epoch, so that every agent reads the same), in whole
// nanoseconds, so that a deadline compares exactly as it was set.
using RoundTime = std::chrono::nanoseconds;

// A node that joined, under the id its backend gives it (the built-in: its connection; etcd: its
// node key).
struct RoundMember {
  std::string id;
  NodeDescriptor node;
  RoundTime joined_at{};
};

// Nodes in order (join order, or a round's rank order), found by id without a search: a round of
// thousands forms from as many joins, and each join looks its node up, so a linear search made
// forming a round quadratic in its nodes. A list of RoundMember with a sequence number for each
// member, increasing along the list, and an index of ids to sequence numbers beside it: a lookup
// is a hash and a binary search, and removing a member renumbers nobody (a node lost costs what
// it cost a plain list). With a repeated id (never made by the rules) find() gives the first and
// erase(id) removes every one, as a search would.
class Members {
 public:
  using const_iterator = std::vector<RoundMember>::const_iterator;

  Members() = default;
  Members(std::initializer_list<RoundMember> members);

  const_iterator begin() const { return list_.begin(); }
  const_iterator end() const { return list_.end(); }
  std::size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  const RoundMember& operator[](std::size_t i) const { return list_[i]; }
  const RoundMember& front() const { return list_.front(); }
  const RoundMember& back() const { return list_.back(); }

  const RoundMember* find(const std::string& id) const;
  // The member to update in place: its node and times, never its id.
  RoundMember* find(const std::string& id);

  void push_back(RoundMember m);
  void insert(const_iterator pos, const_iterator first, const_iterator last);
  void assign(const_iterator first, const_iterator last);
  const_iterator erase(const_iterator pos);
  const_iterator erase(const_iterator first, const_iterator last);
  // Removes every member with this id; whether there was one.
  bool erase(const std::string& id);
  void clear();

 private:
  std::size_t position(const std::string& id) const;  // list_.size() when absent
  void renumber();

  std::vector<RoundMember> list_;
  std::vector<std::int64_t> order_;  // each member's sequence number, increasing along list_
  std::unordered_map<std::string, std::int64_t> index_;  // id -> its first member's number
  std::size_t repeated_ = 0;                             // members whose id an earlier member has
};

// The job's rounds as a plain value: the built-in rendezvous holds one in memory, the etcd
// backend one in etcd. Only the round rules (RoundRules and its parts) change it.
struct RoundState {
  // concluding: a failure ends the job; every member not done says what failed before the stop
  // that names the job's root cause.
  enum class Phase { forming, running, concluding, ended };
  Phase phase = Phase::forming;
  std::uint64_t round = 0;
  int restart_count = 0;
  Members waiting;       // joined, in join order, not in the running round
  Members participants;  // the running round's members
  // Running, and its members have taken their places (etcd: answered); only then do workers
  // start. The built-in starts a round as it forms.
  bool started = false;
  std::set<std::string> done;
  std::set<std::string> expected;  // forming after a restart: the survivors
  std::optional<RoundTime> forming_since;
  std::optional<RoundTime> min_reached_at;
  std::optional<Restart> restart;  // why the current round began, when a round ended before it
  std::optional<Stop> stop;        // the job's end
  // Concluding: the members yet to say what failed, what each said (the failing node's report
  // first), since when, and why no restart.
  std::set<std::string> awaiting;
  std::map<std::string, Ended> reports;
  std::optional<RoundTime> concluding_since;
  std::string concluding_why;

  const RoundMember* participant(const std::string& id) const;
  const RoundMember* waiter(const std::string& id) const;
};

// What one change decided, beside the new state: what the backend carries out (the built-in
// sends it to the nodes; etcd writes the state, which every agent reads). One change may decide
// several things: a lost node ends a round, and the next forms at once.
struct RoundDecision {
  bool changed = false;
  std::optional<Reject> refused;       // the join is refused, why; the state is unchanged
  std::vector<std::string> restarted;  // the ended round's members, told state.restart
  // A round formed: state.participants, each with its assignment (index-aligned).
  std::vector<Assignment> formed;
  std::vector<std::string> halted;   // concluding began: these stop and say what failed
  bool ended = false;                // the job ended: state.stop for every node
  std::vector<std::string> dropped;  // newcomers that waited on a full job too long
  std::vector<std::string> log;      // one line per notable event
};

// "host (addr, pid N)", as messages name a node.
std::string describe(const RoundMember& m);

// The job ends with `stop`: the state's one way to Phase::ended, whichever rule ends it.
void end_job(RoundState& s, Stop stop, RoundDecision& d);

}  // namespace trainrun::rendezvous
