#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "etcd_calls.hpp"
#include "etcd_keys.hpp"
#include "etcd_round.hpp"

namespace trainrun::rendezvous {

// An agent's changes to the round state, one at a time: read the keys (or take them as
// watched), apply the change with EtcdRound, write the state and its summary by compare-and-set;
// where another agent wrote first, again after a short random pause, so that N agents writing at
// once do not all collide again.
class EtcdStateWriter {
 public:
  struct Hooks {
    // Whether changes may be written now (the job goes on here, the lease is granted).
    std::function<bool()> ready;
    // This node's job: the generation its changes apply to.
    std::function<std::uint64_t()> generation;
    // The keys as watched, where this agent watches every key: written from without a read.
    std::function<std::optional<EtcdSnapshot>()> watched;
    // Every key, read afresh.
    std::function<void(std::function<void(const EtcdSnapshot&)>)> read;
    // This agent's write landed at `revision`: the state now, before the watch brings it back.
    std::function<void(const EtcdRoundState&, std::int64_t revision)> wrote;
    // The state after a change: written, or as read where the change changed nothing.
    std::function<void(const EtcdRoundState&, std::int64_t revision)> state;
    std::function<void(Stop)> fail;
  };

  EtcdStateWriter(EtcdCalls& calls, const EtcdKeyspace& space, const EtcdRound& round, Hooks hooks)
      : calls_(calls), space_(space), round_(round), hooks_(std::move(hooks)) {}

  void enqueue(EtcdRound::Change change);
  // The change every agent may make: take in the keys written since, and the timeouts. One
  // queued at a time is enough: it reads afresh when it runs.
  void enqueue_refresh();
  // The transaction that writes `s` if the state is still at the revision `snap` read.
  nlohmann::json compare_and_set_body(const EtcdSnapshot& snap, const EtcdRoundState& s) const;

 private:
  void run_next();
  void change_from(const EtcdSnapshot& snap);
  void compare_and_set(const EtcdSnapshot& snap, const EtcdRoundState& s);
  void finish();

  struct Pending {
    EtcdRound::Change change;
    bool refresh = false;  // enqueue_refresh()'s
  };
  EtcdCalls& calls_;
  const EtcdKeyspace& space_;
  const EtcdRound& round_;
  Hooks hooks_;
  std::deque<Pending> changes_;
  bool changing_ = false;
  bool read_first_ = false;  // the last compare-and-set failed: the next change reads
  int conflicts_ = 0;        // compare-and-sets lost in a row
  std::minstd_rand rng_{std::random_device{}()};
};

}  // namespace trainrun::rendezvous
