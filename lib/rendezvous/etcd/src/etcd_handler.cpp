#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>
#include <utility>

#include "conclusion.hpp"
#include "etcd_calls.hpp"
#include "etcd_client.hpp"
#include "etcd_keys.hpp"
#include "etcd_lease.hpp"
#include "etcd_membership.hpp"
#include "etcd_own_keys.hpp"
#include "etcd_refresh.hpp"
#include "etcd_round.hpp"
#include "etcd_state_writer.hpp"
#include "etcd_watch.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/rendezvous/etcd.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// An etcd agent's pieces wired together: its requests (EtcdCalls), lease (EtcdLease), own keys
// (EtcdOwnKeys), view of the run's keys (EtcdWatch), changes to the state (EtcdStateWriter), who
// writes them when (EtcdRefresh), and what the state means for this node (EtcdMembership).
class EtcdRendezvousHandler : public RendezvousHandler {
 public:
  EtcdRendezvousHandler(asio::io_context& io, RendezvousOptions options, LogFunction log)
      : io_(io),
        options_(std::move(options)),
        log_(std::move(log)),
        // Encoded, so that no run id's keys fall under another's: run "a" reads and watches the
        // range /trainrun/a/, which would otherwise hold run "a/nodes/x" too.
        space_("/trainrun/" + percent_encode(options_.credentials.run_id) + "/"),
        round_(options_.round, endpoint(), in_seconds(options_.liveness.heartbeat_timeout)),
        node_id_(random_hex(8)) {}

  ~EtcdRendezvousHandler() override {
    cancel_timers();
    if (calls_.client() && lease_.id() && !lease_.revoked()) lease_.revoke(*calls_.client());
    calls_.disconnect();
  }

  void start(ClientEvents events) override {
    events_ = std::move(events);
    calls_.connect(
        fmt::format("http://{}:{}", bracketed(options_.endpoint.host), options_.endpoint.port));
    lease_.grant([this] { first_contact(); });
  }

  void join(const JoinRequest& request) override {
    NodeDescriptor node;
    node.host = host_name();
    node.pid = ::getpid();
    node.nproc = request.nproc;
    node.master_port = request.master_port;
    node.node_rank = request.preferred_rank;
    node.last_rank = request.last_rank;
    node.preflight = request.preflight;
    member_.join(node);
    if (lease_.id() && view().generation) own_.join(*view().generation);
  }

  void report_failure(const FailureReport& failure, const std::vector<WorkerFailure>& failures,
                      int not_relayed) override {
    if (!member_.assigned()) return;
    Failure report{*member_.assigned(), failure, failures, not_relayed};
    writer_.enqueue([this, report](EtcdRoundState& s, double now) {
      return round_.failure(s, node_id_, report, now);
    });
  }

  void abort(const std::string& reason) override {
    if (!member_.assigned()) return;
    Abort report{*member_.assigned(), reason};
    writer_.enqueue(
        [this, report](EtcdRoundState& s, double) { return round_.abort(s, node_id_, report); });
  }

  // A key of its own, on its lease, not the shared state (every member is done at about the
  // same moment); the agent that sees the barrier complete ends the job.
  void report_done() override {
    if (!member_.assigned()) return;
    member_.done();
    own_.put(space_.done(), encode_done(EtcdDone{*view().generation, *member_.assigned()}));
  }

  // After on_halt: a key of its own, as report_done's; the agent that sees every awaited answer
  // concludes.
  void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) override {
    if (!member_.assigned()) return;
    Ended ended{*member_.assigned(), failures, not_relayed};
    fit_failures(ended.failures, ended.not_relayed, kMaxStoredFailureBytes);
    member_.ended();
    own_.put(space_.ended(), encode(ClientMessage{ended}));
  }

  void shutdown(const std::string& reason) override {
    if (finished_) return;
    finished_ = true;
    cancel_timers();
    if (!calls_.client() || !lease_.id()) return;
    // The agent is on its way out: say why in the state (bounded, blocking), then let go.
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (leave_now("left: " + reason)) break;
    }
    lease_.revoke(*calls_.client());
  }

  // etcd relays no messages between agents: each node's roll call is asked on that node.
  void request_stacks(StacksDone done) override {
    done({}, {}, "on an etcd job, run trainrun --stacks on each node");
  }

  std::string endpoint() const override {
    return fmt::format("{}:{}", options_.endpoint.host, options_.endpoint.port);
  }
  bool hosting() const override { return false; }
  // What this node's join carries: --local-addr, else the address it reaches etcd from.
  std::string advertised_address() const override {
    return options_.local_addr.empty() ? calls_.local_ip() : options_.local_addr;
  }
  // What only a reply from etcd tells: this node's address, and whether it runs on etcd's own
  // machine (it reaches etcd from etcd's address), which makes it the endpoint's node.
  NodeDescriptor addressed(NodeDescriptor node) const {
    if (node.addr.empty()) node.addr = advertised_address();
    node.at_endpoint = options_.is_host.value_or(!calls_.local_ip().empty() &&
                                                 calls_.local_ip() == calls_.peer_ip());
    return node;
  }

 private:
  static std::string bracketed(const std::string& host) {
    return host.find(':') != std::string::npos ? "[" + host + "]" : host;
  }
  const EtcdView& view() const { return watch_.view(); }

  void cancel_timers() {
    calls_.cancel();
    refresh_.cancel();
    lease_.cancel();
  }

  void fail(Stop stop) {
    if (finished_) return;
    finished_ = true;
    cancel_timers();
    if (calls_.client()) calls_.client()->cancel_streams();
    if (events_.on_stop) events_.on_stop(stop);
  }

  void log(const std::string& line) {
    if (log_) log_(line);
  }

  void lease_expired() {
    fail(Stop{StopCause::node_lost,
              fmt::format("this node's etcd lease at {} expired (no keep-alive reached etcd for "
                          "{:.0f} s): the others count it lost",
                          endpoint(), in_seconds(options_.liveness.heartbeat_timeout)),
              1, std::nullopt});
  }

  // The first read, with this node's key: the agent that finds itself the lowest then reads
  // every key, to write the state.
  void first_contact() {
    own_.first_contact([this](const json& range, bool joined) {
      lease_.keep_alive();
      EtcdSnapshot s;
      if (!watch_.take(range, s)) return;
      if (joined) refresh_.check_later(false);
      if (watch_.lowest()) return read_and_watch();
      watch_after_read(s);
    });
  }

  void read_and_watch() {
    watch_.read([this](const EtcdSnapshot& s) { watch_after_read(s); });
  }

  void watch_after_read(const EtcdSnapshot& s) {
    if (s.state && s.state->generation >= *view().generation) {
      member_.react(*s.state, s.state_mod_revision);
    } else {
      member_.first_state();
    }
    if (finished_) return;
    if (member_.pending_join()) own_.join(*view().generation);
    watch_.watch(s.revision + 1);
    refresh_.consider();  // keys that came while the watch was down: once watch() has chosen what
                          // it sees
  }

  // shutdown(): the one blocking path, bounded: read, mark this node lost, compare-and-set.
  bool leave_now(const std::string& why) {
    EtcdReply r = calls_.client()->post_now("/v3/kv/range", space_.everything().dump(), 1s);
    if (!r.ok()) return true;  // etcd is not there: the lease will expire on its own
    try {
      EtcdSnapshot snap = space_.snapshot(json::parse(r.body));
      const auto& generation = view().generation;
      if (!snap.state || !generation || snap.state->generation != *generation) return true;
      EtcdRoundState s = *snap.state;
      if (!round_.lost(s, node_id_, why, unix_time())) return true;
      EtcdReply t =
          calls_.client()->post_now("/v3/kv/txn", writer_.compare_and_set_body(snap, s).dump(), 1s);
      return !t.ok() || json::parse(t.body).value("succeeded", false);
    } catch (const std::exception&) {
      return true;
    }
  }

  asio::io_context& io_;
  RendezvousOptions options_;
  LogFunction log_;
  EtcdKeyspace space_;
  EtcdRound round_;
  std::string node_id_;
  ClientEvents events_;
  bool finished_ = false;
  EtcdWatch watch_{
      io_,
      calls_,
      space_,
      round_,
      node_id_,
      endpoint(),
      EtcdWatch::Hooks{[this] { return finished_; }, [this](Stop s) { fail(s); },
                       [this](const EtcdRoundState& s, std::int64_t r) { member_.react(s, r); },
                       [this](const std::string& v, std::int64_t r) { member_.take_summary(v, r); },
                       [this](bool node_gone) { refresh_.taken(node_gone); },
                       [this] { read_and_watch(); }}};
  EtcdStateWriter writer_{
      calls_, space_, round_,
      EtcdStateWriter::Hooks{
          [this] { return !finished_ && lease_.id().has_value(); },
          [this] { return *view().generation; },
          [this] { return watch_.writing() ? std::optional(view().snapshot()) : std::nullopt; },
          [this](std::function<void(const EtcdSnapshot&)> then) { watch_.read(std::move(then)); },
          [this](const EtcdRoundState& s, std::int64_t r) { watch_.wrote(s, r); },
          [this](const EtcdRoundState& s, std::int64_t r) { member_.react(s, r); },
          [this](Stop s) { fail(s); }}};
  EtcdMembership member_{
      round_,
      options_.round,
      view(),
      node_id_,
      endpoint(),
      events_,
      EtcdMembership::Hooks{
          [this] { return finished_; }, [this](Stop s) { fail(s); },
          [this](std::uint64_t round) { own_.put(space_.answers(), std::to_string(round)); },
          [this](std::int64_t revision) { watch_.read_state(revision); },
          [this](const std::optional<double>& at) { refresh_.arm(at); },
          [this](const std::string& line) { log(line); }}};
  EtcdOwnKeys own_{
      calls_,
      space_,
      lease_,
      member_,
      node_id_,
      EtcdOwnKeys::Hooks{[this](NodeDescriptor node) { return addressed(std::move(node)); },
                         [this] { refresh_.check_later(false); }}};
  EtcdRefresh refresh_{
      io_,     calls_, watch_,   member_,
      writer_, round_, node_id_, [this] {
                         return !finished_ && view().generation && lease_.id(); }};
  EtcdLease lease_{
      io_, options_.liveness,
      [this](const std::string& path, const json& body, std::function<void(const json&)> ok,
             std::function<void()> retry) { calls_.call(path, body, ok, retry); },
      [this] { lease_expired(); }};
  // Last: destroyed first (its client first of all), no callback runs after it.
  EtcdCalls calls_{io_, endpoint(), options_,
                   EtcdCalls::Hooks{[this] { return finished_; }, [this](Stop s) { fail(s); },
                                    [this](const std::string& line) { log(line); }}};
};

}  // namespace

std::unique_ptr<RendezvousHandler> make_etcd_rendezvous_handler(asio::io_context& io,
                                                                RendezvousOptions options,
                                                                LogFunction log) {
  return std::make_unique<EtcdRendezvousHandler>(io, std::move(options), std::move(log));
}

}  // namespace trainrun::rendezvous
