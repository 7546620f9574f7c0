#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/rendezvous/backoff.hpp"
#include "trainrun/rendezvous/conclusion.hpp"
#include "trainrun/rendezvous/etcd.hpp"
#include "trainrun/rendezvous/etcd_calls.hpp"
#include "trainrun/rendezvous/etcd_client.hpp"
#include "trainrun/rendezvous/etcd_keys.hpp"
#include "trainrun/rendezvous/etcd_lease.hpp"
#include "trainrun/rendezvous/etcd_round.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

using Change = EtcdRound::Change;
using Snapshot = EtcdSnapshot;

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
    started_at_ = Clock::now();
    lease_.grant([this] { first_contact(); });
  }

  void join(const JoinRequest& request) override {
    NodeDescriptor node;
    node.host = host_name();
    node.pid = ::getpid();
    node.nproc = request.nproc;
    node.master_port = request.master_port;
    node.preflight = request.preflight;
    joined_ = true;
    ++join_seq_;
    pending_join_ = node;
    if (lease_.id() && generation_) submit_join();
  }

  void report_failure(const FailureReport& failure, const std::vector<WorkerFailure>& failures,
                      int not_relayed) override {
    if (!assigned_) return;
    Failure report{*assigned_, failure, failures, not_relayed};
    enqueue([this, report](EtcdRoundState& s, double now) {
      return round_.failure(s, node_id_, report, now);
    });
  }

  // A key of its own, on its lease, not the shared state (every member is done at about the
  // same moment); the agent that sees the barrier complete ends the job.
  void report_done() override {
    if (!assigned_) return;
    done_round_ = *assigned_;
    put_own(space_.done(), encode_done(EtcdDone{*generation_, *assigned_}));
  }

  // After on_halt: a key of its own, as report_done's; the agent that sees every awaited answer
  // concludes.
  void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) override {
    if (!assigned_) return;
    Ended ended{*assigned_, failures, not_relayed};
    fit_failures(ended.failures, ended.not_relayed, kMaxStoredFailureBytes);
    ended_round_ = *assigned_;
    put_own(space_.ended(), encode(ClientMessage{ended}));
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

 private:
  static std::string bracketed(const std::string& host) {
    return host.find(':') != std::string::npos ? "[" + host + "]" : host;
  }

  // ---- requests, with retries while etcd is unreachable ----

  // Requests through EtcdCalls: retried while etcd is unreachable, until the deadline.
  void call(const std::string& path, const json& body, std::function<void(const json&)> ok,
            std::function<void()> retry) {
    calls_.call(path, body, std::move(ok), std::move(retry));
  }
  void unreachable(const EtcdReply& r, std::function<void()> retry) {
    calls_.unreachable(r, std::move(retry));
  }
  void after(Clock::duration d, std::function<void()> fn) { calls_.after(d, std::move(fn)); }

  void cancel_timers() {
    calls_.cancel();
    tick_timer_.cancel();
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

  // ---- liveness: the lease (EtcdLease), this node's key ----

  void lease_expired() {
    fail(Stop{StopCause::node_lost,
              fmt::format("this node's etcd lease at {} expired (no keep-alive reached etcd for "
                          "{:.0f} s): the others count it lost",
                          endpoint(), in_seconds(options_.liveness.heartbeat_timeout)),
              1, std::nullopt});
  }

  // This node's key and the first read (the node keys and the state), in one transaction; where
  // no state is stored yet (the first job of the run id: generation 0), this node's join goes in
  // it too. The agent that finds itself the lowest then reads every key, to write the state.
  void first_contact() {
    const std::string key = base64_encode(space_.state());
    json compare = {
        {"key", key}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
    auto put = [this](const std::string& k, const std::string& value) {
      return json{{"request_put",
                   {{"key", base64_encode(k)},
                    {"value", base64_encode(value)},
                    {"lease", std::to_string(*lease_.id())}}}};
    };
    const json node_key =
        put(space_.nodes() + node_id_, fmt::format("{} pid {}", host_name(), ::getpid()));
    const json range = {{"request_range", space_.nodes_and_state()}};
    json first = json::array({node_key}), otherwise = json::array({node_key, range});
    if (pending_join_) {
      NodeDescriptor node = *pending_join_;
      if (node.addr.empty()) node.addr = advertised_address();
      first.push_back(put(space_.joins() + node_id_, encode_join(EtcdJoin{0, join_seq_, node, 0})));
    }
    first.push_back(range);
    const std::uint64_t seq = join_seq_;
    call(
        "/v3/kv/txn",
        {{"compare", json::array({compare})}, {"success", first}, {"failure", otherwise}},
        [this, seq](const json& j) {
          const bool joined = j.value("succeeded", false) && first_join_fits(seq);
          if (joined) pending_join_.reset();
          lease_.keep_alive();
          json reply = j.at("responses").back().at("response_range");
          reply["header"] = j.at("header");
          Snapshot s;
          if (!take_snapshot(reply, s)) return;
          if (joined) check_later(false);
          if (lowest()) return read_and_watch();
          watch_after_read(s);
        },
        [this] { first_contact(); });
  }

  // Whether the join written with this node's key is its latest: join() was not called again
  // while the transaction was out.
  bool first_join_fits(std::uint64_t seq) const { return pending_join_ && join_seq_ == seq; }

  // ---- reading and watching ----

  // A range response as this node's view; false where the state is not one this version wrote
  // (the job stops on this node).
  bool take_snapshot(const json& j, Snapshot& s) {
    if (!parse_snapshot(j, s)) return false;
    if (!generation_) generation_ = round_.generation_to_join(s.state);
    keys_ = s.keys;
    stored_ = s.state;
    stored_mod_revision_ = s.state_mod_revision;
    return true;
  }

  bool parse_snapshot(const json& j, Snapshot& s) {
    try {
      s = space_.snapshot(j);
      return true;
    } catch (const std::exception& e) {
      fail(Stop{StopCause::rejected,
                fmt::format("the rendezvous state in etcd at {} under {} is not one this trainrun "
                            "wrote ({})",
                            endpoint(), space_.prefix(), e.what()),
                Refusal::foreign_state});
      return false;
    }
  }

  void read(std::function<void(const Snapshot&)> then) {
    call(
        "/v3/kv/range", space_.everything(),
        [this, then](const json& j) {
          Snapshot s;
          if (take_snapshot(j, s)) then(s);
        },
        [this, then] { read(then); });
  }

  void read_and_watch() {
    read([this](const Snapshot& s) { watch_after_read(s); });
  }

  void watch_after_read(const Snapshot& s) {
    if (s.state && s.state->generation >= *generation_) {
      react(*s.state, s.state_mod_revision);
    } else {
      // No state yet, or an earlier job's: what this node knows is its job's first state, so
      // that the summary of the write that takes the first joins is not news to it.
      known_ = round_.summary(std::nullopt, *round_.state_of(std::nullopt, *generation_));
    }
    if (finished_) return;
    if (pending_join_) submit_join();
    watch(s.revision + 1);
    consider();  // keys that came while the watch was down: once watch() has chosen what it sees
  }

  // The agent with the lowest live node id watches every key; the others only the node keys and
  // the state's summary, so that etcd sends each agent's join, answer and done, and each state,
  // to one agent, not to all.
  void watch(std::int64_t from) {
    watching_all_ = lowest();
    json request = watching_all_ ? space_.everything() : space_.nodes_and_round();
    json body = {{"create_request", std::move(request)}};
    body["create_request"]["start_revision"] = std::to_string(from);
    watch_from_ = from;
    calls_.client()->stream(
        "/v3/watch", body.dump(), [this](const std::string& line) { on_watch(line); },
        [this](EtcdReply r) {
          if (finished_) return;
          if (rewatch_) {
            rewatch_ = false;
            return read_and_watch();
          }
          // The stream ended: etcd restarted or went away. Read again, then watch
          // from where we were.
          unreachable(r, [this] { read_and_watch(); });
        });
  }

  void on_watch(const std::string& line) {
    if (finished_) return;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("result")) return;
    const json& result = j.at("result");
    calls_.reached();
    if (!result.contains("events")) return;
    bool node_gone = false;
    for (const json& ev : result.at("events")) {
      const json& kv = ev.at("kv");
      const std::string key = base64_decode(kv.at("key").get<std::string>());
      watch_from_ = std::max(watch_from_, etcd_int(kv, "mod_revision") + 1);
      const bool deleted = ev.value("type", "") == "DELETE";
      if (key == space_.round() && !deleted) {
        // The agents watching every key have the state itself.
        if (!watching_all_) take_summary(kv.value("value", ""), etcd_int(kv, "mod_revision"));
      } else if (key == space_.state() && !deleted) {
        const std::int64_t revision = etcd_int(kv, "mod_revision");
        // This agent's own write, or one it has read since: nothing new.
        if (revision <= stored_mod_revision_) continue;
        // Decoded once the lines already received are handled: of states that came one after
        // another, only the last (a read, too, finds only the latest).
        const bool posted = pending_state_.has_value();
        pending_state_ = std::make_pair(kv.value("value", ""), revision);
        if (!posted) {
          asio::post(io_, [this, alive = std::weak_ptr<int>(alive_)] {
            if (!alive.expired()) take_pending_state();
          });
        }
      } else {
        space_.note(keys_, key, deleted ? nullptr : &kv);
        node_gone = node_gone || (deleted && key.rfind(space_.nodes(), 0) == 0);
      }
      if (finished_) return;
    }
    if (watching_all_ && lowest()) {
      if (!pending_state_) consider();  // else once the state is taken
      return;
    }
    if (node_gone && lowest()) {
      // The lowest is gone and this agent comes next: it reads, and watches every key.
      rewatch_ = true;
      return calls_.client()->cancel_streams();
    }
    if (node_gone) check_later(true);
  }

  void take_pending_state() {
    if (!pending_state_ || finished_) return;
    auto [value, revision] = std::move(*pending_state_);
    pending_state_.reset();
    if (revision > stored_mod_revision_) {
      try {
        EtcdRoundState s = decode_state(base64_decode(value));
        stored_ = s;
        stored_mod_revision_ = revision;
        react(s, revision);
      } catch (const std::exception&) {
      }
    }
    if (!finished_ && watching_all_ && lowest()) consider();
  }

  // A summary of a change: the state is read only where the change concerns this node (it
  // decides nothing for the others: a join taken, a deadline moved), and where a round formed
  // or started with this node in it does not say all this node needs.
  void take_summary(const std::string& value, std::int64_t revision) {
    if (revision <= stored_mod_revision_ || revision <= seen_revision_) return;  // read since
    const std::optional<EtcdRoundSummary> m = decode_summary(base64_decode(value));
    if (!m) return read_state(revision);
    if (!take_round(*m) && concerns(*m, known_, node_id_)) return read_state(revision);
    if (finished_) return;
    // The state changes: the agent that writes it is at work (check_later()).
    seen_revision_ = revision;
    known_ = *m;
    arm_tick(m->deadline);
    if (joined_ && !assigned_ && (!stored_ || !join_taken(*stored_) || stored_->waiter(node_id_)))
      report_waiting(m->waiting);
  }

  // This node, joined and waiting for its round, in the running round the summary names: it
  // answers it (formed) or takes its assignment (started), as react() does from the state.
  bool take_round(const EtcdRoundSummary& m) {
    // The job's end, as react() takes it from the state.
    if (m.stop && generation_ && m.generation == *generation_) {
      fail(*m.stop);
      return true;
    }
    if (!joined_ || assigned_ || m.generation != *generation_ ||
        m.phase != EtcdRoundState::Phase::running)
      return false;
    const auto at = std::find(m.members.begin(), m.members.end(), node_id_);
    if (at == m.members.end()) return false;
    if (m.started) {
      if (m.assignments.empty()) return false;
      assigned_ = m.round;
      answering_.reset();
      if (events_.on_assignment) events_.on_assignment(m.assignments[at - m.members.begin()]);
      return true;
    }
    // Another round this node answered never started: the state says why.
    if (answering_) return *answering_ == m.round;
    answering_ = m.round;
    put_own(space_.answers(), std::to_string(m.round));
    return true;
  }

  // The state alone, at `revision` or later; one read at a time, again where a later summary
  // wants a later state than the one it read.
  void read_state(std::int64_t revision) {
    state_wanted_ = std::max(state_wanted_, revision);
    if (reading_state_) return;
    reading_state_ = true;
    call(
        "/v3/kv/range", space_.state_only(),
        [this](const json& j) {
          reading_state_ = false;
          Snapshot s;
          if (!parse_snapshot(j, s)) return;
          if (s.state && s.state_mod_revision > stored_mod_revision_) {
            stored_ = s.state;
            stored_mod_revision_ = s.state_mod_revision;
            react(*s.state, s.state_mod_revision);
          }
          if (!finished_ && state_wanted_ > s.revision) read_state(state_wanted_);
        },
        [this] {
          reading_state_ = false;
          read_state(state_wanted_);
        });
  }

  // ---- changing the state: read, apply, compare-and-set; again if another agent was first ----

  void enqueue(Change change, std::function<void(std::int64_t)> landed = nullptr) {
    changes_.push_back({std::move(change), std::move(landed)});
    run_next_change();
  }

  // The change every agent may make: take in the keys written since, and the timeouts. One
  // queued at a time is enough: it reads afresh when it runs.
  void enqueue_refresh() {
    if (!changes_.empty() && changes_.back().refresh && !(changing_ && changes_.size() == 1))
      return;
    changes_.push_back(
        {[this](EtcdRoundState& s, double now) { return round_.tick(s, now); }, nullptr, true});
    run_next_change();
  }

  // Whether the keys as watched (joins, answers, dones, what failed, a lease gone) or a deadline
  // change the state: then one agent writes the change, not every one (they would collide). The
  // agents watching every key (the lowest live node id) write at once; the others read and write
  // only what is still due after a pause that grows with their place, in case the lowest is gone
  // or slow: `always` for a lease gone or a deadline, else only while the state does not show
  // this agent's own keys. That pause is longer (the lowest may still be starting, and a lowest
  // gone is found by its lease), and both begin again while the state keeps changing (the
  // lowest is at work): 64 agents each writing what the lowest is about to write collide.
  void consider() {
    if (finished_ || !generation_ || !lease_.id()) return;
    if (watching_all_ && lowest() && is_due()) enqueue_refresh();
  }

  void check_later(bool always) {
    if (finished_ || !generation_ || !lease_.id()) return;
    if (watching_all_ && lowest()) return consider();
    fallback_always_ = fallback_always_ || always;
    const auto place = std::distance(keys_.live.begin(), keys_.live.lower_bound(node_id_));
    const auto due = Clock::now() + (always ? kFallbackPause : kOwnKeysPause) * (1 + place);
    if (fallback_due_ && *fallback_due_ <= due) return;
    fallback_due_ = due;
    after(due - Clock::now(), [this, due, seen = seen_revision_] {
      if (fallback_due_ != due) return;  // an earlier one was armed since
      fallback_due_.reset();
      const bool always = std::exchange(fallback_always_, false);
      if (!always && !own_keys_pending()) return;
      // The state changed meanwhile: the agent that writes it is at work; another pause.
      if (seen_revision_ != seen) return check_later(always);
      enqueue_refresh();
    });
  }

  bool lowest() const { return keys_.live.lower_bound(node_id_) == keys_.live.begin(); }

  // Whether the state does not yet show what this agent's own keys say.
  bool own_keys_pending() const {
    using Phase = EtcdRoundState::Phase;
    // Where this agent took changes in from their summaries since it read the state, what the
    // summary does not say (a join taken, a done) counts as not shown.
    if (answering_ && known_)
      return known_->round == *answering_ && known_->phase == Phase::running && !known_->started;
    if (stored_mod_revision_ < seen_revision_)
      return (joined_ && !assigned_) || done_round_.has_value() || ended_round_.has_value();
    if (!stored_ || stored_->generation != *generation_) return joined_ && !assigned_;
    const EtcdRoundState& s = *stored_;
    if (joined_ && !assigned_ && !join_taken(s)) return true;
    if (answering_ && s.round == *answering_ && s.phase == Phase::running && !s.started)
      return true;
    if (done_round_ && s.round == *done_round_ && s.phase == Phase::running &&
        !s.done.count(node_id_))
      return true;
    return ended_round_ && s.round == *ended_round_ && s.phase == Phase::concluding;
  }

  bool is_due() const {
    if (finished_ || !generation_) return false;
    const std::optional<EtcdRoundState> mine = round_.state_of(stored_, *generation_);
    if (!mine) return false;
    EtcdRoundState probe = *mine;
    return round_.apply(
        probe, keys_, [this](EtcdRoundState& s, double now) { return round_.tick(s, now); },
        unix_time());
  }

  // A key of this node's own, on its lease: its join, answer, done, what failed there.
  void put_own(const std::string& dir, const std::string& value) {
    json body = {{"key", base64_encode(dir + node_id_)},
                 {"value", base64_encode(value)},
                 {"lease", std::to_string(*lease_.id())}};
    call(
        "/v3/kv/put", body, [this](const json&) { check_later(false); },
        [this, dir, value] { put_own(dir, value); });
  }

  // This node's join: its own key, naming its job and which join it is; the agent that takes it
  // into the state writes there whether it was refused.
  void submit_join() {
    if (!pending_join_) return;
    NodeDescriptor node = *pending_join_;
    pending_join_.reset();
    if (node.addr.empty()) node.addr = advertised_address();
    put_own(space_.joins(), encode_join(EtcdJoin{*generation_, join_seq_, node, 0}));
  }

  // Whether the state has taken this node's latest join (so it is a member, a waiter, refused,
  // or dropped since).
  bool join_taken(const EtcdRoundState& s) const {
    auto it = s.joins_taken.find(node_id_);
    return !pending_join_ && it != s.joins_taken.end() && it->second >= join_seq_;
  }

  void run_next_change() {
    if (changing_ || changes_.empty() || finished_ || !lease_.id()) return;
    changing_ = true;
    // The agent watching every key has them as etcd had them moments ago: it writes from that
    // view; where the state moved on meanwhile, the compare fails, and it reads.
    if (watching_all_ && lowest() && !read_first_) return change_from(watched());
    read([this](const Snapshot& snap) { change_from(snap); });
  }

  Snapshot watched() const {
    Snapshot s;
    s.state = stored_;
    s.state_mod_revision = stored_ ? stored_mod_revision_ : 0;
    s.revision = watch_from_ - 1;
    s.keys = keys_;
    return s;
  }

  void change_from(const Snapshot& snap) {
    std::optional<EtcdRoundState> mine = round_.state_of(snap.state, *generation_);
    if (!mine) return fail(round_.superseded());
    EtcdRoundState& s = *mine;
    const double now = unix_time();
    if (!round_.apply(s, snap.keys, changes_.front().change, now)) {
      finish_change(snap.revision);
      if (snap.state) react(*snap.state, snap.state_mod_revision);
      return;
    }
    compare_and_set(snap, s);
  }

  // The transaction that writes `s` if the state is still at the revision `snap` read.
  json compare_and_set_body(const Snapshot& snap, const EtcdRoundState& s) const {
    const std::string key = base64_encode(space_.state());
    json compare = {{"key", key},
                    {"target", "MOD"},
                    {"result", "EQUAL"},
                    {"mod_revision", std::to_string(snap.state_mod_revision)}};
    json put = {{"request_put", {{"key", key}, {"value", base64_encode(encode_state(s))}}}};
    const EtcdRoundSummary summary = round_.summary(snap.state, s);
    json put_summary = {{"request_put",
                         {{"key", base64_encode(space_.round())},
                          {"value", base64_encode(encode_summary(summary))}}}};
    return {{"compare", json::array({compare})},
            {"success", json::array({put, std::move(put_summary)})}};
  }

  void compare_and_set(const Snapshot& snap, const EtcdRoundState& s) {
    call(
        "/v3/kv/txn", compare_and_set_body(snap, s),
        [this, written = s](const json& j) {
          if (!j.value("succeeded", false)) {
            // Another agent changed it first: again, after a short random pause, so that N
            // agents writing at once do not all collide again.
            ++conflicts_;
            read_first_ = true;
            const auto pause = std::chrono::microseconds(
                std::uniform_int_distribution<int>(0, 2000 * std::min(conflicts_, 10))(rng_));
            return after(pause, [this] {
              changing_ = false;
              run_next_change();
            });
          }
          conflicts_ = 0;
          // What this agent wrote is the state now: its next change starts from it, before the
          // watch brings it back.
          const std::int64_t revision = etcd_int(j.at("header"), "revision");
          if (revision > stored_mod_revision_) {
            stored_ = written;
            stored_mod_revision_ = revision;
          }
          finish_change(revision);
          react(written, revision);
        },
        [this] {
          changing_ = false;
          read_first_ = true;
          run_next_change();
        });
  }

  void finish_change(std::int64_t revision) {
    read_first_ = false;
    auto landed = std::move(changes_.front().landed);
    changes_.pop_front();
    changing_ = false;
    if (landed) landed(revision);
    run_next_change();
  }

  // ---- what the state means for this node ----

  void react(const EtcdRoundState& s, std::int64_t revision) {
    // An earlier job, over: this node's job begins with its join.
    if (finished_ || revision <= seen_revision_ || s.generation < *generation_) return;
    seen_revision_ = revision;
    known_ = round_.summary(std::nullopt, s);
    if (s.generation > *generation_) return fail(round_.superseded());
    if (s.stop) return fail(*s.stop);
    const EtcdMember* me = s.participant(node_id_);
    if (s.phase == EtcdRoundState::Phase::concluding && assigned_ && *assigned_ == s.round) {
      if (!me) return fail(round_.dropped(s));
      if (s.awaiting.count(node_id_) && halted_ != s.round) {
        halted_ = s.round;
        if (events_.on_halt) events_.on_halt(round_.halt(s));
        if (finished_) return;
      }
    }
    if (answering_ && *answering_ != s.round && !assigned_) {
      // The round this node answered never started (a member never answered, or one came).
      answering_.reset();
      if (s.restart) log(s.restart->reason);
    }
    if (assigned_ && (s.round != *assigned_ || !me)) {
      assigned_.reset();
      joined_ = false;
      Restart r = s.restart.value_or(
          Restart{RestartCause::node_lost, "the round ended", s.restart_count, std::nullopt});
      if (events_.on_restart) events_.on_restart(r);
      if (finished_) return;
    }
    if (joined_ && !assigned_ && join_taken(s)) {
      if (auto r = s.refused.find(node_id_); r != s.refused.end()) {
        return fail(Stop{
            StopCause::rejected,
            fmt::format("the rendezvous at {} dropped this node: {}", endpoint(), r->second.reason),
            r->second.kind});
      }
      if (!me && !s.waiter(node_id_)) return fail(round_.dropped(s));
    }
    if (joined_ && !assigned_ && me && s.phase == EtcdRoundState::Phase::running) {
      if (s.started) {
        assign(s);
      } else if (!answering_) {
        // This node takes its place in the round: a key of its own, naming the round.
        answering_ = s.round;
        put_own(space_.answers(), std::to_string(s.round));
      }
    } else if (joined_ && !assigned_ && s.waiter(node_id_)) {
      report_waiting(s.waiting.size());
    }
    arm_tick(round_.next_deadline(s));
  }

  void assign(const EtcdRoundState& s) {
    std::size_t mine = 0;
    while (s.participants[mine].id != node_id_) ++mine;
    const Assignment a = round_.assignments(s)[mine];
    assigned_ = s.round;
    answering_.reset();
    if (events_.on_assignment) events_.on_assignment(a);
  }

  void report_waiting(std::size_t waiting) {
    const auto now = Clock::now();
    const int joined = static_cast<int>(waiting);
    if (joined == last_waiting_count_ && now - last_waiting_log_ < options_.round.status_interval)
      return;
    last_waiting_count_ = joined;
    last_waiting_log_ = now;
    const auto& r = options_.round;
    log(fmt::format("waiting for nodes in etcd at {}: {}", endpoint(),
                    r.min_nodes == r.max_nodes ? fmt::format("{} of {} joined", joined, r.min_nodes)
                                               : fmt::format("{} joined ({} to {} wanted)", joined,
                                                             r.min_nodes, r.max_nodes)));
  }

  void arm_tick(const std::optional<double>& at) {
    tick_timer_.cancel();
    if (!at) return;
    const double wait = std::max(0.0, *at - unix_time()) + 0.05;
    tick_timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait)));
    tick_timer_.async_wait(
        [this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
          if (alive.expired() || ec || finished_) return;
          check_later(true);
        });
  }

  // shutdown(): the one blocking path, bounded: read, mark this node lost, compare-and-set.
  bool leave_now(const std::string& why) {
    EtcdReply r = calls_.client()->post_now("/v3/kv/range", space_.everything().dump(), 1s);
    if (!r.ok()) return true;  // etcd is not there: the lease will expire on its own
    try {
      Snapshot snap = space_.snapshot(json::parse(r.body));
      if (!snap.state || !generation_ || snap.state->generation != *generation_) return true;
      EtcdRoundState s = *snap.state;
      if (!round_.lost(s, node_id_, why, unix_time())) return true;
      EtcdReply t =
          calls_.client()->post_now("/v3/kv/txn", compare_and_set_body(snap, s).dump(), 1s);
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
  Clock::time_point started_at_;
  bool finished_ = false;
  bool joined_ = false;
  std::optional<NodeDescriptor> pending_join_;
  std::uint64_t join_seq_ = 0;               // this agent's joins so far
  std::optional<std::uint64_t> generation_;  // this node's job, known from the first read
  std::optional<std::uint64_t> assigned_;
  std::optional<std::uint64_t> answering_;  // the round this node answered, not started yet
  std::optional<EtcdRoundState> stored_;    // the state as last read, then watched
  std::int64_t stored_mod_revision_ = 0;
  // A state watched, not yet decoded (base64), and its revision.
  std::optional<std::pair<std::string, std::int64_t>> pending_state_;
  bool reading_state_ = false;  // read_state()'s read is out
  std::int64_t state_wanted_ = 0;
  std::optional<EtcdRoundSummary> known_;  // the summary of what this node last took in  // the
                                           // revision the last summary that concerned this node had
  EtcdKeys keys_;                          // the keys beside it, the same
  std::optional<Clock::time_point> fallback_due_;  // when check_later()'s pause ends
  bool fallback_always_ = false;
  bool watching_all_ = false;                 // every key, or the node keys and the state
  bool rewatch_ = false;                      // the watch ends, to watch every key
  std::optional<std::uint64_t> done_round_;   // the round this node's done key names
  std::optional<std::uint64_t> ended_round_;  // the round its ended key names
  static constexpr Clock::duration kFallbackPause = 100ms;
  static constexpr Clock::duration kOwnKeysPause = 1s;
  std::optional<std::uint64_t> halted_;  // the round whose halt this node was given
  std::int64_t seen_revision_ = 0;
  std::int64_t watch_from_ = 0;
  struct Pending {
    Change change;
    std::function<void(std::int64_t)> landed;
    bool refresh = false;  // enqueue_refresh()'s
  };
  std::deque<Pending> changes_;
  bool changing_ = false;
  bool read_first_ = false;  // the last compare-and-set failed: the next change reads
  int conflicts_ = 0;        // compare-and-sets lost in a row
  std::minstd_rand rng_{std::random_device{}()};
  int last_waiting_count_ = -1;
  Clock::time_point last_waiting_log_{};
  // A timer that had already fired when the handler was destroyed still runs its function,
  // whatever cancel() says: each checks this first.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  asio::steady_timer tick_timer_{io_};
  EtcdLease lease_{
      io_, options_.liveness,
      [this](const std::string& path, const json& body, std::function<void(const json&)> ok,
             std::function<void()> retry) { call(path, body, ok, retry); },
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
