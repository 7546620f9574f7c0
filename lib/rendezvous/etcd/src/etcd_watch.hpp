#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "etcd_calls.hpp"
#include "etcd_keys.hpp"
#include "etcd_round.hpp"

namespace trainrun::rendezvous {

// What one agent knows of its run's keys in etcd: the state as last read or watched, its
// revision, and the keys beside it.
struct EtcdView {
  std::optional<std::uint64_t> generation;  // this node's job, known from the first read
  std::optional<EtcdRoundState> stored;
  std::int64_t stored_mod_revision = 0;
  EtcdKeys keys;
  std::int64_t watch_from = 0;  // the revision the watch has reached
  bool watching_all = false;    // every key, or the node keys and the summary

  // Whether `id` is the lowest live node id: that agent watches every key and writes.
  bool lowest(const std::string& id) const {
    return keys.live.lower_bound(id) == keys.live.begin();
  }
  // The keys as etcd had them when the watch last heard from it.
  EtcdSnapshot snapshot() const;
};

// An agent's view of its run's keys: read whole, then watched from the revision read. The agent
// with the lowest live node id watches every key; the others only the node keys and the state's
// summary, so that etcd sends each agent's join, answer and done, and each state, to one agent,
// not to all. What the keys mean for this node is the caller's (Hooks).
class EtcdWatch {
 public:
  struct Hooks {
    std::function<bool()> finished;  // the job has ended on this node: nothing more is taken in
    std::function<void(Stop)> fail;
    // A state later than any taken in so far (watched, or read for a summary).
    std::function<void(const EtcdRoundState&, std::int64_t revision)> state;
    // The summary changed (watched by the agents that do not watch the state).
    std::function<void(const std::string& value, std::int64_t revision)> summary;
    // A watch response or a state taken in; `node_gone`: a node key went away.
    std::function<void(bool node_gone)> taken;
    // The watch ended (etcd restarted or went away, or watch_everything()): read, watch again.
    std::function<void()> lost;
  };

  EtcdWatch(boost::asio::io_context& io, EtcdCalls& calls, const EtcdKeyspace& space,
            const EtcdRound& round, std::string node_id, std::string endpoint, Hooks hooks)
      : io_(io),
        calls_(calls),
        space_(space),
        round_(round),
        node_id_(std::move(node_id)),
        endpoint_(std::move(endpoint)),
        hooks_(std::move(hooks)) {}

  const EtcdView& view() const { return view_; }
  bool lowest() const { return view_.lowest(node_id_); }
  // Whether this agent watches every key as the lowest: it writes the changes they make due.
  bool writing() const { return view_.watching_all && lowest(); }
  // A watched state waits to be decoded.
  bool state_pending() const { return pending_state_.has_value(); }

  // Every key of the run, then `then` with what was read, once taken in.
  void read(std::function<void(const EtcdSnapshot&)> then);
  // A range response taken in as this node's view; false where the state is not one this
  // version wrote (the job stops on this node).
  bool take(const nlohmann::json& response, EtcdSnapshot& s);
  // The state alone, at `revision` or later; one read at a time, again where a later summary
  // wants a later state than the one it read.
  void read_state(std::int64_t revision);
  void watch(std::int64_t from);
  // The watch ends, to watch every key once read again (the lowest node is gone: this one is).
  void watch_everything();
  // This agent's own write landed at `revision`: the state now, before the watch brings it back.
  void wrote(const EtcdRoundState& s, std::int64_t revision);

 private:
  bool parse(const nlohmann::json& j, EtcdSnapshot& s);
  void on_watch(const std::string& line);
  void take_pending_state();

  boost::asio::io_context& io_;
  EtcdCalls& calls_;
  const EtcdKeyspace& space_;
  const EtcdRound& round_;
  std::string node_id_;
  std::string endpoint_;
  Hooks hooks_;
  EtcdView view_;
  bool rewatch_ = false;  // the watch ends, to watch every key
  // A state watched, not yet decoded (base64), and its revision.
  std::optional<std::pair<std::string, std::int64_t>> pending_state_;
  bool reading_state_ = false;  // read_state()'s read is out
  std::int64_t state_wanted_ = 0;
  // A post that had not run when this was destroyed: each checks this first.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace trainrun::rendezvous
