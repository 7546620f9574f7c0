#include "round_backends.hpp"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "etcd_client.hpp"
#include "etcd_round.hpp"
#include "etcd_server.hpp"
#include "round_machine.hpp"

namespace trainrun::rendezvous::table {
namespace {

using test::EtcdServer;

using json = nlohmann::json;
using namespace std::chrono_literals;

NodeDescriptor descriptor(int node, const std::string& host, int nproc,
                          std::optional<int> master_port, Wish wish,
                          const std::optional<Assignment>& last) {
  NodeDescriptor n;
  n.node_rank = wish.node_rank;
  n.at_endpoint = wish.at_endpoint;
  n.last_rank = last ? last->group_rank : -1;
  n.host = host;
  n.addr = "10.0.0." + std::to_string(node);
  n.pid = 1000 + node;
  n.nproc = nproc;
  n.master_port = master_port.value_or(30000 + node);
  return n;
}

template <class T>
std::optional<T> last_of(const std::vector<ServerMessage>& inbox) {
  for (auto m = inbox.rbegin(); m != inbox.rend(); ++m) {
    if (const T* t = std::get_if<T>(&*m)) return *t;
  }
  return std::nullopt;
}

// ---- the built-in rendezvous: its RoundMachine, as the TCP server drives it ----

class Builtin : public Backend {
 public:
  explicit Builtin(const RoundOptions& options)
      : machine_(options, LivenessOptions{}, "node0:29400", now_) {}

  std::string endpoint() const override { return "node0:29400"; }

  void join(int node, const std::string& host, int nproc, std::optional<int> master_port,
            Wish wish) override {
    if (connected_.insert(node).second) take(machine_.connected(id(node), now_));
    send(node, Join{descriptor(node, host, nproc, master_port, wish, assignment(node))});
  }
  void fail(int node, const FailureReport& failure, const std::vector<WorkerFailure>& failures,
            int not_relayed, std::optional<std::uint64_t> round) override {
    send(node, Failure{round.value_or(assigned_round(node)), failure, failures, not_relayed});
  }
  void done(int node) override { send(node, Done{assigned_round(node)}); }
  void abort(int node, const std::string& reason) override {
    send(node, Abort{assigned_round(node), reason});
  }
  void ended(int node, const std::vector<WorkerFailure>& failures, int not_relayed) override {
    send(node, Ended{assigned_round(node), failures, not_relayed});
  }
  void lose(int node, const std::string& why) override {
    gone_.insert(node);
    take(machine_.disconnected(id(node), why, now_));
  }
  void advance(Clock::duration d) override {
    const Clock::time_point end = now_ + d;
    while (now_ < end) {
      now_ += std::min<Clock::duration>(1s, end - now_);
      for (int node : connected_) {
        if (!gone_.count(node)) take(machine_.received(id(node), Heartbeat{}, now_));
      }
      take(machine_.tick(now_));
    }
  }

  std::optional<Assignment> assignment(int node) const override {
    return last_of<Assignment>(inbox(node));
  }
  std::optional<Restart> restart(int node) const override { return last_of<Restart>(inbox(node)); }
  bool halted(int node) const override { return last_of<Halt>(inbox(node)).has_value(); }
  std::optional<Stop> stop(int node) const override { return last_of<Stop>(inbox(node)); }
  std::optional<std::string> refused(int node) const override {
    auto r = last_of<Reject>(inbox(node));
    return r ? std::optional<std::string>(r->reason) : std::nullopt;
  }

 private:
  static NodeId id(int node) { return static_cast<NodeId>(node); }
  std::uint64_t assigned_round(int node) const {
    auto a = assignment(node);
    return a ? a->round : 0;
  }
  const std::vector<ServerMessage>& inbox(int node) const {
    static const std::vector<ServerMessage> none;
    auto it = inbox_.find(node);
    return it == inbox_.end() ? none : it->second;
  }
  void send(int node, const ClientMessage& m) { take(machine_.received(id(node), m, now_)); }
  void take(const Effects& fx) {
    for (const auto& m : fx.messages) {
      inbox_[static_cast<int>(m.to)].push_back(m.message);
      if (m.close) gone_.insert(static_cast<int>(m.to));
    }
  }

  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  RoundMachine machine_;
  std::set<int> connected_;
  std::set<int> gone_;  // lost, or closed by the server
  std::map<int, std::vector<ServerMessage>> inbox_;
};

std::int64_t number(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const json& v = j.at(key);
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<std::int64_t>();
}

// ---- the etcd backend: each node an agent with its lease and keys; the state read, changed by
// EtcdRound and written back by compare-and-set, as the handler does ----

struct Snapshot {
  std::optional<EtcdRoundState> state;
  std::int64_t state_mod_revision = 0;
  EtcdKeys keys;
};

class Etcd : public Backend {
 public:
  Etcd(const RoundOptions& options, const EtcdServer& server)
      : server_(server),
        client_(io_, server.url()),
        round_(options, server.endpoint(), 15),
        prefix_("/trainrun/table-" + std::to_string(++runs_) + "-" + std::to_string(::getpid()) +
                "/") {}

  std::string endpoint() const override { return server_.endpoint(); }

  void join(int node, const std::string& host, int nproc, std::optional<int> master_port,
            Wish wish) override {
    Agent& a = agent(node);
    const NodeDescriptor d = descriptor(node, host, nproc, master_port, wish, assignment(node));
    // Its own key, then one change takes it in, as the agent that sees it first does.
    put(prefix_ + "joins/" + a.id, encode_join(EtcdJoin{0, ++a.joins, d, 0}), a.lease);
    refresh();
    const Snapshot snap = read();
    a.refused.reset();
    if (auto r = snap.state->refused.find(a.id); r != snap.state->refused.end())
      a.refused = r->second.reason;
    a.joined = !a.refused;
    settle();
  }
  void fail(int node, const FailureReport& failure, const std::vector<WorkerFailure>& failures,
            int not_relayed, std::optional<std::uint64_t> round) override {
    Agent& a = agent(node);
    const Failure report{round.value_or(a.assigned.value_or(0)), failure, failures, not_relayed};
    change([&](EtcdRoundState& s, double now) { return round_.failure(s, a.id, report, now); });
    settle();
  }
  void abort(int node, const std::string& reason) override {
    Agent& a = agent(node);
    const Abort report{a.assigned.value_or(0), reason};
    change([&](EtcdRoundState& s, double) { return round_.abort(s, a.id, report); });
    settle();
  }
  void done(int node) override {
    Agent& a = agent(node);
    put(prefix_ + "done/" + a.id, encode_done(EtcdDone{0, a.assigned.value_or(0)}), a.lease);
    refresh();
    settle();
  }
  void ended(int node, const std::vector<WorkerFailure>& failures, int not_relayed) override {
    Agent& a = agent(node);
    put(prefix_ + "ended/" + a.id,
        encode(ClientMessage{Ended{a.assigned.value_or(0), failures, not_relayed}}), a.lease);
    refresh();
    settle();
  }
  void lose(int node, const std::string& why) override {
    Agent& a = agent(node);
    // An agent that leaves says so; one that is killed is found by its lease.
    if (why.rfind("left: ", 0) == 0) {
      change([&](EtcdRoundState& s, double now) { return round_.lost(s, a.id, why, now); });
    }
    a.lost = true;
    call("/v3/lease/revoke", {{"ID", std::to_string(a.lease)}});
    refresh();
    settle();
  }
  void advance(Clock::duration d) override {
    const double end = now_ + in_seconds(d);
    for (int i = 0; i < 1000; ++i) {
      const Snapshot snap = read();
      const auto at = snap.state ? round_.next_deadline(*snap.state) : std::nullopt;
      if (!at || *at > end) break;
      now_ = std::max(now_, *at);
      tick();
    }
    now_ = end;
    tick();
  }

  std::optional<Assignment> assignment(int node) const override { return view(node).assignment; }
  std::optional<Restart> restart(int node) const override { return view(node).restart; }
  bool halted(int node) const override { return view(node).halted; }
  std::optional<Stop> stop(int node) const override { return view(node).stop; }
  std::optional<std::string> refused(int node) const override { return view(node).refused; }

 private:
  struct Agent {
    std::string id;
    std::int64_t lease = 0;
    std::uint64_t joins = 0;
    bool joined = false;
    bool lost = false;
    std::optional<std::uint64_t> assigned;
    std::optional<Assignment> assignment;
    std::optional<Restart> restart;
    bool halted = false;
    std::optional<Stop> stop;
    std::optional<std::string> refused;
  };

  json call(const std::string& path, const json& body) {
    const EtcdReply r = client_.post_now(path, body.dump(), 5000ms);
    INFO(path << ": " << r.describe());
    REQUIRE(r.ok());
    return json::parse(r.body);
  }
  static std::string range_end(std::string prefix) {
    prefix.back() = static_cast<char>(prefix.back() + 1);
    return prefix;
  }
  void put(const std::string& key, const std::string& value, std::int64_t lease) {
    call("/v3/kv/put", {{"key", base64_encode(key)},
                        {"value", base64_encode(value)},
                        {"lease", std::to_string(lease)}});
  }

  Agent& agent(int node) {
    Agent& a = agents_[node];
    if (a.id.empty()) {
      a.id = "node" + std::to_string(node);
      a.lease = number(call("/v3/lease/grant", {{"TTL", 600}, {"ID", 0}}), "ID");
      put(prefix_ + "nodes/" + a.id, "agent", a.lease);
    }
    return a;
  }
  const Agent& view(int node) const {
    static const Agent none;
    auto it = agents_.find(node);
    return it == agents_.end() ? none : it->second;
  }
  Agent* by_id(const std::string& id) {
    for (auto& [n, a] : agents_) {
      if (a.id == id) return &a;
    }
    return nullptr;
  }

  Snapshot read() {
    const json j = call("/v3/kv/range", {{"key", base64_encode(prefix_)},
                                         {"range_end", base64_encode(range_end(prefix_))}});
    Snapshot s;
    if (!j.contains("kvs")) return s;
    for (const json& kv : j.at("kvs")) {
      const std::string key = base64_decode(kv.at("key").get<std::string>());
      const std::string value = base64_decode(kv.value("value", ""));
      const std::string name = key.substr(prefix_.size());
      auto under = [&](const std::string& dir) { return name.rfind(dir, 0) == 0; };
      if (name == "state") {
        s.state = decode_state(value);
        s.state_mod_revision = number(kv, "mod_revision");
      } else if (under("nodes/")) {
        s.keys.live.insert(name.substr(6));
      } else if (under("joins/")) {
        s.keys.joins[name.substr(6)] = *decode_join(value, number(kv, "mod_revision"));
      } else if (under("answers/")) {
        s.keys.answers[name.substr(8)] = std::stoull(value);
      } else if (under("done/")) {
        s.keys.done[name.substr(5)] = *decode_done(value);
      } else if (under("ended/")) {
        s.keys.ended[name.substr(6)] = std::get<Ended>(decode_client_message(value));
      }
    }
    return s;
  }

  // Read, apply the change as the handler does, compare-and-set; again on a conflict.
  void change(const EtcdRound::Change& f) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      const Snapshot snap = read();
      std::optional<EtcdRoundState> mine = round_.state_of(snap.state, 0);
      REQUIRE(mine);
      EtcdRoundState& s = *mine;
      if (!round_.apply(s, snap.keys, f, now_)) return;
      const std::string key = base64_encode(prefix_ + "state");
      json compare = {{"key", key},
                      {"target", "MOD"},
                      {"result", "EQUAL"},
                      {"mod_revision", std::to_string(snap.state_mod_revision)}};
      json write = {{"request_put", {{"key", key}, {"value", base64_encode(encode_state(s))}}}};
      const json r = call("/v3/kv/txn",
                          {{"compare", json::array({compare})}, {"success", json::array({write})}});
      if (r.value("succeeded", false)) return;
    }
    FAIL("no compare-and-set succeeded");
  }
  void refresh() {
    change([](EtcdRoundState&, double) { return false; });
  }
  void tick() {
    change([&](EtcdRoundState& s, double now) { return round_.tick(s, now); });
    settle();
  }

  // Every member of a formed round answers it (its own key), then one change starts it; each
  // agent then sees what the state means for it.
  void settle() {
    for (int i = 0; i < 10; ++i) {
      const Snapshot snap = read();
      if (!snap.state || snap.state->phase != EtcdRoundState::Phase::running || snap.state->started)
        break;
      bool answered = false;
      for (const auto& m : snap.state->participants) {
        Agent* a = by_id(m.id);
        auto it = snap.keys.answers.find(m.id);
        if (!a || a->lost || (it != snap.keys.answers.end() && it->second == snap.state->round))
          continue;
        put(prefix_ + "answers/" + m.id, std::to_string(snap.state->round), a->lease);
        answered = true;
      }
      if (!answered) break;
      refresh();
    }
    observe();
  }

  // What each agent makes of the state (the handler's react()).
  void observe() {
    const Snapshot snap = read();
    if (!snap.state) return;
    const EtcdRoundState& s = *snap.state;
    for (auto& [node, a] : agents_) {
      if (a.stop || a.lost || !a.joined) continue;
      if (s.stop) {
        a.stop = s.stop;
        continue;
      }
      const EtcdMember* me = s.participant(a.id);
      if (s.phase == EtcdRoundState::Phase::concluding && a.assigned == s.round) {
        if (!me) {
          a.stop = round_.dropped(s);
          continue;
        }
        if (s.awaiting.count(a.id)) a.halted = true;
      }
      if (a.assigned && (s.round != *a.assigned || !me)) {
        a.restart = s.restart;
        a.assigned.reset();
        a.joined = false;
        continue;
      }
      if (!a.assigned && !me && !s.waiter(a.id)) {
        a.stop = round_.dropped(s);
        continue;
      }
      if (!a.assigned && me && s.phase == EtcdRoundState::Phase::running && s.started) {
        std::size_t mine = 0;
        while (s.participants[mine].id != a.id) ++mine;
        a.assignment = round_.assignments(s)[mine];
        a.assigned = s.round;
      }
    }
  }

  static inline int runs_ = 0;
  const EtcdServer& server_;
  boost::asio::io_context io_;
  EtcdClient client_;
  EtcdRound round_;
  std::string prefix_;
  double now_ = 1'000'000;
  std::map<int, Agent> agents_;
};

}  // namespace

std::unique_ptr<Backend> builtin_backend(const RoundOptions& options) {
  return std::make_unique<Builtin>(options);
}

std::unique_ptr<Backend> etcd_backend(const RoundOptions& options) {
  const EtcdServer* server = EtcdServer::get();
  if (!server) {
    WARN("etcd (/usr/bin/etcd) is not available: the etcd backend's rows are not run");
    return nullptr;
  }
  return std::make_unique<Etcd>(options, *server);
}

}  // namespace trainrun::rendezvous::table
