#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "etcd_round.hpp"

namespace trainrun::rendezvous {

// A field of etcd's JSON gateway that holds an int64 (a string there, or a number); 0 where it
// is absent (the gateway leaves out zeros).
std::int64_t etcd_int(const nlohmann::json& j, const char* key);

// The round state and the keys beside it under a run's prefix, from one range response.
struct EtcdSnapshot {
  std::optional<EtcdRoundState> state;
  std::int64_t state_mod_revision = 0;  // 0: no state yet
  std::int64_t revision = 0;            // the store's revision when read
  EtcdKeys keys;
};

// The keys of one run under its prefix (/trainrun/<run id, percent-encoded>/, docs/protocol.md):
// their names, the ranges an agent reads and watches, and what a range response or a watch
// event says of them. Pure: JSON of etcd's gateway in, values out.
class EtcdKeyspace {
 public:
  explicit EtcdKeyspace(std::string prefix) : prefix_(std::move(prefix)) {}

  const std::string& prefix() const { return prefix_; }
  std::string state() const { return prefix_ + "state"; }
  // The state's summary (layout 3), written with it.
  std::string round() const { return prefix_ + "round"; }
  std::string nodes() const { return prefix_ + "nodes/"; }
  std::string joins() const { return prefix_ + "joins/"; }
  std::string answers() const { return prefix_ + "answers/"; }
  std::string done() const { return prefix_ + "done/"; }
  std::string ended() const { return prefix_ + "ended/"; }

  // A range (or watch) request: every key of the run; the node keys and the state only
  // ([nodes/, state], nothing else sorts between but the summary), what an agent that does not
  // write reads; the node keys and the summary ([nodes/, round]), what it watches; the state.
  nlohmann::json everything() const;
  nlohmann::json nodes_and_state() const;
  nlohmann::json nodes_and_round() const;
  nlohmann::json state_only() const;

  // A range response; throws (ProtocolError, or the JSON library's) for a state this version
  // did not write. A key beside the state whose value is not one is no key.
  EtcdSnapshot snapshot(const nlohmann::json& response) const;
  // One key beside the state, put (`kv`, as etcd sends it) or deleted (null), into `keys`.
  void note(EtcdKeys& keys, const std::string& key, const nlohmann::json* kv) const;

 private:
  std::string prefix_;
};

}  // namespace trainrun::rendezvous
