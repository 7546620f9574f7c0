#include "etcd_round.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "conclusion.hpp"
#include "message_json.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;
using Phase = EtcdRoundState::Phase;

namespace {

// EtcdRoundState::Phase's names, in its order.
const std::string_view kPhases[] = {"forming", "running", "concluding", "ended"};

// Times in the state are Unix seconds; the rules count whole nanoseconds.
RoundTime from_unix(double seconds) { return RoundTime(std::llround(seconds * 1e9)); }
double unix_seconds(RoundTime t) { return static_cast<double>(t.count()) / 1e9; }

// Members, restarts and stops are kept in the wire protocol's own JSON (messages.hpp).
json member_json(const EtcdMember& m) {
  return {{"id", m.id},
          {"joined_at", unix_seconds(m.joined_at)},
          {"node", json::parse(encode(ClientMessage{Join{m.node}}))}};
}

EtcdMember member_from(const json& j) {
  EtcdMember m;
  m.id = j.at("id").get<std::string>();
  m.joined_at = from_unix(j.at("joined_at").get<double>());
  m.node = decode_join_node(j.at("node"));
  return m;
}

template <class T>
std::optional<T> message_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  ServerMessage m = decode_server_message(j.at(key).dump());
  if (!std::holds_alternative<T>(m)) throw ProtocolError(fmt::format("state: bad \"{}\"", key));
  return std::get<T>(m);
}

std::optional<RoundTime> optional_time(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return from_unix(j.at(key).get<double>());
}

json optional_time_json(const std::optional<RoundTime>& t) {
  return t ? json(unix_seconds(*t)) : json(nullptr);
}

// A round's assignments differ only in each member's ranks: those, with the rest once (null when
// there are none).
json assigned_json(const std::vector<Assignment>& all) {
  if (all.empty()) return nullptr;
  const Assignment& a = all.front();
  json ranks = json::array();
  for (const auto& b : all) ranks.push_back({b.group_rank, b.base_rank, b.local_world_size});
  return {{"group_world_size", a.group_world_size},
          {"world_size", a.world_size},
          {"master_addr", a.master_addr},
          {"master_port", a.master_port},
          {"restart_count", a.restart_count},
          {"max_restarts", a.max_restarts},
          {"ranks", std::move(ranks)}};
}

std::vector<Assignment> assignments_from(const json& j) {
  std::vector<Assignment> all;
  if (j.is_null()) return all;
  Assignment a;
  a.group_world_size = j.at("group_world_size").get<int>();
  a.world_size = j.at("world_size").get<int>();
  a.master_addr = j.at("master_addr").get<std::string>();
  a.master_port = j.at("master_port").get<int>();
  a.restart_count = j.at("restart_count").get<int>();
  a.max_restarts = j.at("max_restarts").get<int>();
  for (const auto& r : j.at("ranks")) {
    a.group_rank = r.at(0).get<int>();
    a.base_rank = r.at(1).get<int>();
    a.local_world_size = r.at(2).get<int>();
    all.push_back(a);
  }
  return all;
}

// Drops the entries of nodes not in `live`; whether there were any.
template <class T>
bool forget_gone(std::map<std::string, T>& by_node, const std::set<std::string>& live) {
  const std::size_t before = by_node.size();
  for (auto it = by_node.begin(); it != by_node.end();) {
    it = live.count(it->first) ? std::next(it) : by_node.erase(it);
  }
  return by_node.size() != before;
}

}  // namespace

std::string encode_state(const EtcdRoundState& s) {
  json j = {{"layout", kEtcdStateLayout},
            {"generation", s.generation},
            {"phase", kPhases[static_cast<int>(s.phase)]},
            {"round", s.round},
            {"restart_count", s.restart_count},
            {"waiting", json::array()},
            {"participants", json::array()},
            {"started", s.started},
            {"done", s.done},
            {"expected", s.expected},
            {"forming_since", optional_time_json(s.forming_since)},
            {"min_reached_at", optional_time_json(s.min_reached_at)}};
  for (const auto& m : s.waiting) j["waiting"].push_back(member_json(m));
  for (const auto& m : s.participants) j["participants"].push_back(member_json(m));
  j["joins_taken"] = s.joins_taken;
  json refused = json::object();
  for (const auto& [id, r] : s.refused) refused[id] = json::parse(encode(ServerMessage{r}));
  j["refused"] = std::move(refused);
  if (s.restart) j["restart"] = json::parse(encode(ServerMessage{*s.restart}));
  if (s.stop) j["stop"] = json::parse(encode(ServerMessage{*s.stop}));
  if (s.phase == Phase::concluding) {
    json reports = json::object();
    for (const auto& [id, e] : s.reports) reports[id] = json::parse(encode(ClientMessage{e}));
    j["concluding"] = {{"since", optional_time_json(s.concluding_since)},
                       {"why", s.concluding_why},
                       {"awaiting", s.awaiting},
                       {"reports", std::move(reports)}};
  }
  return j.dump();
}

EtcdRoundState decode_state(const std::string& text) {
  try {
    json j = json::parse(text);
    const int layout = j.is_object() ? j.value("layout", 1) : 0;
    if (layout != kEtcdStateLayout) {
      throw StateLayoutError(
          fmt::format("state: layout {} was written by another version of trainrun (this one "
                      "reads layout {})",
                      layout, kEtcdStateLayout));
    }
    EtcdRoundState s;
    s.generation = j.at("generation").get<std::uint64_t>();
    const std::string phase = j.at("phase").get<std::string>();
    auto known = std::find(std::begin(kPhases), std::end(kPhases), phase);
    if (known == std::end(kPhases)) throw ProtocolError("state: unknown phase \"" + phase + "\"");
    s.phase = static_cast<Phase>(known - std::begin(kPhases));
    s.round = j.at("round").get<std::uint64_t>();
    s.restart_count = j.at("restart_count").get<int>();
    for (const auto& m : j.at("waiting")) s.waiting.push_back(member_from(m));
    for (const auto& m : j.at("participants")) s.participants.push_back(member_from(m));
    s.started = j.at("started").get<bool>();
    s.done = j.at("done").get<std::set<std::string>>();
    s.expected = j.at("expected").get<std::set<std::string>>();
    s.forming_since = optional_time(j, "forming_since");
    s.min_reached_at = optional_time(j, "min_reached_at");
    s.restart = message_from<Restart>(j, "restart");
    s.stop = message_from<Stop>(j, "stop");
    s.joins_taken = j.at("joins_taken").get<std::map<std::string, std::uint64_t>>();
    for (const auto& [id, r] : j.at("refused").items()) {
      ServerMessage m = decode_server_message(r.dump());
      if (!std::holds_alternative<Reject>(m)) throw ProtocolError("state: bad \"refused\"");
      s.refused[id] = std::get<Reject>(m);
    }
    if (s.phase == Phase::concluding) {
      const json& c = j.at("concluding");
      s.concluding_since = optional_time(c, "since");
      s.concluding_why = c.at("why").get<std::string>();
      s.awaiting = c.at("awaiting").get<std::set<std::string>>();
      for (const auto& [id, e] : c.at("reports").items()) {
        ClientMessage m = decode_client_message(e.dump());
        if (!std::holds_alternative<Ended>(m)) throw ProtocolError("state: bad \"reports\"");
        s.reports[id] = std::get<Ended>(m);
      }
    }
    return s;
  } catch (const json::exception& e) {
    throw ProtocolError(fmt::format("state: {}", e.what()));
  }
}

std::string encode_summary(const EtcdRoundSummary& m) {
  return json{{"layout", kEtcdStateLayout},
              {"generation", m.generation},
              {"phase", kPhases[static_cast<int>(m.phase)]},
              {"round", m.round},
              {"started", m.started},
              {"waiting", m.waiting},
              {"deadline", m.deadline ? json(*m.deadline) : json(nullptr)},
              {"refused", m.refused},
              {"left", m.left},
              {"members", m.members},
              {"assigned", assigned_json(m.assignments)},
              {"stop", m.stop ? json::parse(encode(ServerMessage{*m.stop})) : json(nullptr)}}
      .dump();
}

std::optional<EtcdRoundSummary> decode_summary(const std::string& text) {
  try {
    const json j = json::parse(text);
    if (j.value("layout", 0) != kEtcdStateLayout) return std::nullopt;
    EtcdRoundSummary m;
    m.generation = j.at("generation").get<std::uint64_t>();
    const std::string phase = j.at("phase").get<std::string>();
    auto known = std::find(std::begin(kPhases), std::end(kPhases), phase);
    if (known == std::end(kPhases)) return std::nullopt;
    m.phase = static_cast<Phase>(known - std::begin(kPhases));
    m.round = j.at("round").get<std::uint64_t>();
    m.started = j.at("started").get<bool>();
    m.waiting = j.at("waiting").get<std::size_t>();
    if (!j.at("deadline").is_null()) m.deadline = j.at("deadline").get<double>();
    m.refused = j.at("refused").get<std::set<std::string>>();
    m.left = j.at("left").get<std::set<std::string>>();
    m.members = j.at("members").get<std::vector<std::string>>();
    m.assignments = assignments_from(j.at("assigned"));
    if (!m.assignments.empty() && m.assignments.size() != m.members.size()) return std::nullopt;
    for (auto& a : m.assignments) a.round = m.round;
    m.stop = message_from<Stop>(j, "stop");
    return m;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool concerns(const EtcdRoundSummary& m, const std::optional<EtcdRoundSummary>& known,
              const std::string& id) {
  if (!known || known->generation != m.generation || known->phase != m.phase ||
      known->round != m.round || known->started != m.started)
    return true;
  return m.left.count(id) || (m.refused.count(id) && !known->refused.count(id));
}

std::string encode_join(const EtcdJoin& join) {
  return json{{"generation", join.generation},
              {"seq", join.seq},
              {"node", json::parse(encode(ClientMessage{Join{join.node}}))}}
      .dump();
}

std::string encode_done(const EtcdDone& done) {
  return json{{"generation", done.generation}, {"round", done.round}}.dump();
}

std::optional<EtcdJoin> decode_join(const std::string& text, std::int64_t revision) {
  try {
    const json j = json::parse(text);
    EtcdJoin join;
    join.generation = j.at("generation").get<std::uint64_t>();
    join.seq = j.at("seq").get<std::uint64_t>();
    join.node = decode_join_node(j.at("node"));
    join.revision = revision;
    return join;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<EtcdDone> decode_done(const std::string& text) {
  try {
    const json j = json::parse(text);
    return EtcdDone{j.at("generation").get<std::uint64_t>(), j.at("round").get<std::uint64_t>()};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::uint64_t EtcdRound::generation_to_join(const std::optional<EtcdRoundState>& stored) const {
  if (!stored) return 0;
  return stored->phase == Phase::ended ? stored->generation + 1 : stored->generation;
}

std::optional<EtcdRoundState> EtcdRound::state_of(const std::optional<EtcdRoundState>& stored,
                                                  std::uint64_t g) const {
  if (stored && stored->generation == g) return stored;
  if (stored && stored->generation > g) return std::nullopt;
  EtcdRoundState fresh;
  fresh.generation = g;
  return fresh;
}

bool EtcdRound::apply(EtcdRoundState& s, const EtcdKeys& keys, const Change& change,
                      double now) const {
  bool changed = prune(s, keys.live, now);
  changed = take_joins(s, keys, now) || changed;
  for (const auto& [id, d] : keys.done) {
    if (d.generation == s.generation) changed = done(s, id, d.round) || changed;
  }
  changed = start(s, keys.answers) || changed;
  // Before the change too: at the deadline, what the members said still counts.
  changed = conclude(s, keys.ended, now) || changed;
  changed = change(s, now) || changed;
  return conclude(s, keys.ended, now) || changed;
}

bool EtcdRound::take_joins(EtcdRoundState& s, const EtcdKeys& keys, double now) const {
  if (s.phase == Phase::ended) return false;
  std::vector<std::pair<std::string, const EtcdJoin*>> fresh;
  for (const auto& [id, j] : keys.joins) {
    auto taken = s.joins_taken.find(id);
    if (j.generation != s.generation || !keys.live.count(id)) continue;
    if (taken != s.joins_taken.end() && taken->second >= j.seq) continue;
    fresh.emplace_back(id, &j);
  }
  std::sort(fresh.begin(), fresh.end(),
            [](const auto& a, const auto& b) { return a.second->revision < b.second->revision; });
  for (const auto& [id, j] : fresh) {
    s.joins_taken[id] = j->seq;
    s.refused.erase(id);
    if (std::optional<Reject> r = refusal(s, id, j->node)) {
      s.refused[id] = *r;
    } else {
      join(s, id, j->node, now);
    }
  }
  return !fresh.empty();
}

std::optional<Reject> EtcdRound::refusal(const EtcdRoundState& s, const std::string& id,
                                         const NodeDescriptor& node) const {
  if (s.participant(id)) return std::nullopt;  // join() below: a retried write, not a new join
  return rules_.forming().refusal(s, id, node);
}

bool EtcdRound::join(EtcdRoundState& s, const std::string& id, const NodeDescriptor& node,
                     double now) const {
  // A participant's join is this agent's own write landing twice (a reply lost, the write
  // retried): nothing to do.
  if (s.participant(id)) return false;
  return rules_.forming().join(s, id, node, from_unix(now)).changed;
}

bool EtcdRound::start(EtcdRoundState& s,
                      const std::map<std::string, std::uint64_t>& answers) const {
  if (s.phase != Phase::running || s.started) return false;
  for (const auto& m : s.participants) {
    auto it = answers.find(m.id);
    if (it == answers.end() || it->second != s.round) return false;
  }
  return rules_.forming().start(s).changed;
}

bool EtcdRound::failure(EtcdRoundState& s, const std::string& id, const Failure& report,
                        double now) const {
  // While concluding, a node's ended key carries what failed there: the state keeps only the
  // failing node's list, so that it stays far under etcd's request limit.
  if (s.phase == Phase::concluding) return false;
  Failure stored = report;
  fit_failures(stored.failures, stored.not_relayed, kMaxStoredFailureBytes);
  return rules_.failure(s, id, stored, from_unix(now)).changed;
}

bool EtcdRound::abort(EtcdRoundState& s, const std::string& id, const Abort& report) const {
  return rules_.abort(s, id, report).changed;
}

bool EtcdRound::done(EtcdRoundState& s, const std::string& id, std::uint64_t round) const {
  return rules_.done(s, id, round).changed;
}

// What the members said lives in their own keys, not in the state: it is taken in only when it
// concludes the job (every awaited member said, or the deadline passed).
bool EtcdRound::conclude(EtcdRoundState& s, const std::map<std::string, Ended>& ended,
                         double now) const {
  if (s.phase != Phase::concluding) return false;
  EtcdRoundState t = s;
  for (const auto& [id, e] : ended) rules_.ended(t, id, e);
  if (t.phase != Phase::ended) rules_.tick(t, from_unix(now));
  if (t.phase != Phase::ended) return false;
  fit_failures(t.stop->failures, t.stop->not_relayed, kMaxStoredFailureBytes);
  s = std::move(t);
  return true;
}

bool EtcdRound::lost(EtcdRoundState& s, const std::string& id, const std::string& why,
                     double now) const {
  return rules_.lost(s, id, why, from_unix(now)).changed;
}

bool EtcdRound::prune(EtcdRoundState& s, const std::set<std::string>& live, double now) const {
  std::set<std::string> gone;
  for (const auto* list : {&s.participants, &s.waiting}) {
    for (const auto& m : *list) {
      if (!live.count(m.id)) gone.insert(m.id);
    }
  }
  // Survivors of the last round not back yet are waited for only while they live.
  for (const auto& id : s.expected) {
    if (!live.count(id)) gone.insert(id);
  }
  bool changed = false;
  const std::string why =
      fmt::format("its etcd lease expired: no keep-alive for {:.0f} s", heartbeat_timeout_s_);
  for (const auto& id : gone) changed = lost(s, id, why, now) || changed;
  // What the state keeps of a node's joins is for its agent to read; an agent whose key is gone
  // reads nothing more (node ids are per process), so the state does not grow with every agent
  // that ever joined.
  changed = forget_gone(s.joins_taken, live) || changed;
  changed = forget_gone(s.refused, live) || changed;
  return changed;
}

bool EtcdRound::tick(EtcdRoundState& s, double now) const {
  return rules_.tick(s, from_unix(now)).changed;
}

EtcdRoundSummary EtcdRound::summary(const std::optional<EtcdRoundState>& before,
                                    const EtcdRoundState& after) const {
  EtcdRoundSummary m;
  m.generation = after.generation;
  m.phase = after.phase;
  m.round = after.round;
  m.started = after.started;
  m.waiting = after.waiting.size();
  m.deadline = next_deadline(after);
  for (const auto& [id, r] : after.refused) m.refused.insert(id);
  if (before) {
    for (const auto* list : {&before->participants, &before->waiting}) {
      for (const auto& member : *list) {
        if (!after.participant(member.id) && !after.waiter(member.id)) m.left.insert(member.id);
      }
    }
  }
  if (after.phase == Phase::running) {
    for (const auto& member : after.participants) m.members.push_back(member.id);
    if (after.started) m.assignments = assignments(after);
  }
  // The job's end, where it is short (no failures to carry), so that no agent reads the state
  // to learn it.
  if (after.stop && !after.stop->failure) {
    const std::string stop = encode(ServerMessage{*after.stop});
    if (stop.size() <= kMaxSummaryStopBytes) m.stop = after.stop;
  }
  return m;
}

std::optional<double> EtcdRound::next_deadline(const EtcdRoundState& s) const {
  const std::optional<RoundTime> at = rules_.next_deadline(s);
  if (!at) return std::nullopt;
  return unix_seconds(*at);
}

Stop EtcdRound::dropped(const EtcdRoundState& s) const {
  if (s.phase == Phase::running || s.phase == Phase::concluding)
    return rules_.forming().full_job_stop();
  return Stop{StopCause::node_lost,
              fmt::format("this node was declared lost by the others: its etcd lease at {} "
                          "expired (no keep-alive for {:.0f} s)",
                          endpoint_, heartbeat_timeout_s_),
              1, std::nullopt};
}

Stop EtcdRound::superseded() const {
  return Stop{StopCause::node_lost,
              fmt::format("this node's job ended while it was out of touch with etcd at {}, and a "
                          "later job with the same run id has begun there",
                          endpoint_),
              1, std::nullopt};
}

}  // namespace trainrun::rendezvous
