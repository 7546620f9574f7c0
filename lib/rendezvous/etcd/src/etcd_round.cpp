#include "trainrun/rendezvous/etcd_round.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/conclusion.hpp"
#include "trainrun/rendezvous/rank_assignment.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;
using Phase = EtcdRoundState::Phase;

namespace {

// EtcdRoundState::Phase's names, in its order.
const std::string_view kPhases[] = {"forming", "running", "concluding", "ended"};

const EtcdMember* find(const std::vector<EtcdMember>& v, const std::string& id) {
  auto it = std::find_if(v.begin(), v.end(), [&](const EtcdMember& m) { return m.id == id; });
  return it == v.end() ? nullptr : &*it;
}

bool erase(std::vector<EtcdMember>& v, const std::string& id) {
  auto it = std::remove_if(v.begin(), v.end(), [&](const EtcdMember& m) { return m.id == id; });
  bool found = it != v.end();
  v.erase(it, v.end());
  return found;
}

std::string describe(const EtcdMember& m) {
  return fmt::format("{} ({}, pid {})", m.node.host, m.node.addr, m.node.pid);
}

// Members, restarts and stops are kept in the wire protocol's own JSON (messages.hpp).
json member_json(const EtcdMember& m) {
  return {{"id", m.id},
          {"joined_at", m.joined_at},
          {"node", json::parse(encode(ClientMessage{Join{m.node}}))}};
}

EtcdMember member_from(const json& j) {
  EtcdMember m;
  m.id = j.at("id").get<std::string>();
  m.joined_at = j.at("joined_at").get<double>();
  m.node = std::get<Join>(decode_client_message(j.at("node").dump())).node;
  return m;
}

template <class T>
std::optional<T> message_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  ServerMessage m = decode_server_message(j.at(key).dump());
  if (!std::holds_alternative<T>(m)) throw ProtocolError(fmt::format("state: bad \"{}\"", key));
  return std::get<T>(m);
}

std::optional<double> optional_time(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<double>();
}

json optional_time_json(const std::optional<double>& t) { return t ? json(*t) : json(nullptr); }

}  // namespace

const EtcdMember* EtcdRoundState::participant(const std::string& id) const {
  return find(participants, id);
}
const EtcdMember* EtcdRoundState::waiter(const std::string& id) const { return find(waiting, id); }

std::string encode_state(const EtcdRoundState& s) {
  json j = {{"generation", s.generation},
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
    EtcdRoundState s;
    s.generation = j.value("generation", std::uint64_t{0});
    const std::string phase = j.at("phase").get<std::string>();
    auto known = std::find(std::begin(kPhases), std::end(kPhases), phase);
    if (known == std::end(kPhases)) throw ProtocolError("state: unknown phase \"" + phase + "\"");
    s.phase = static_cast<Phase>(known - std::begin(kPhases));
    s.round = j.at("round").get<std::uint64_t>();
    s.restart_count = j.at("restart_count").get<int>();
    for (const auto& m : j.at("waiting")) s.waiting.push_back(member_from(m));
    for (const auto& m : j.at("participants")) s.participants.push_back(member_from(m));
    // A state written before members answered: a running round had started.
    s.started = j.value("started", s.phase == Phase::running);
    s.done = j.at("done").get<std::set<std::string>>();
    s.expected = j.at("expected").get<std::set<std::string>>();
    s.forming_since = optional_time(j, "forming_since");
    s.min_reached_at = optional_time(j, "min_reached_at");
    s.restart = message_from<Restart>(j, "restart");
    s.stop = message_from<Stop>(j, "stop");
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

bool EtcdRound::join(EtcdRoundState& s, const std::string& id, const NodeDescriptor& node,
                     double now) const {
  if (s.phase == Phase::ended || s.participant(id)) return false;
  if (const EtcdMember* w = s.waiter(id)) {
    if (w->node.master_port == node.master_port && w->node.nproc == node.nproc) return false;
    erase(s.waiting, id);
  }
  EtcdMember me{id, node, now};
  s.waiting.push_back(me);
  if (s.phase == Phase::forming) {
    if (!s.forming_since) s.forming_since = now;
    maybe_complete(s, now);
    return true;
  }
  // Concluding: it waits, and gets the job's stop.
  if (s.phase == Phase::concluding) return true;
  const bool can_grow =
      static_cast<int>(s.participants.size()) < options_.max_nodes && s.done.empty();
  if (can_grow && !s.started) {
    // Nobody runs workers yet: take the newcomer in without a restart.
    form_again(s, now,
               Restart{RestartCause::scale_up,
                       fmt::format("node {} joined before round {} started: forming it again",
                                   describe(me), s.round),
                       s.restart_count, std::nullopt});
  } else if (can_grow) {
    begin_forming(s, now,
                  Restart{RestartCause::scale_up,
                          fmt::format("node {} joined: scaling up from {}", describe(me),
                                      count_of(static_cast<long long>(s.participants.size()),
                                               "node")),
                          s.restart_count, std::nullopt});
  }
  return true;
}

bool EtcdRound::start(EtcdRoundState& s,
                      const std::map<std::string, std::uint64_t>& answers) const {
  if (s.phase != Phase::running || s.started) return false;
  for (const auto& m : s.participants) {
    auto it = answers.find(m.id);
    if (it == answers.end() || it->second != s.round) return false;
  }
  s.started = true;
  return true;
}

bool EtcdRound::failure(EtcdRoundState& s, const std::string& id, const Failure& report,
                        double now) const {
  if (s.phase != Phase::running || report.round != s.round || !s.participant(id)) return false;
  const FailureReport& f = report.failure;
  const std::string reason =
      fmt::format("worker failed on {}: rank {} (local rank {}) exited with code {}", f.host,
                  f.rank, f.local_rank, f.exit_code);
  if (s.restart_count < options_.max_restarts) {
    ++s.restart_count;
    begin_forming(s, now,
                  Restart{RestartCause::worker_failed,
                          fmt::format("{}; restarting ({} of {})", reason, s.restart_count,
                                      count_of(options_.max_restarts, "restart")),
                          s.restart_count, f});
    return true;
  }
  // The failing node's word stays in the state, so that it counts if the node is lost; members
  // not done stop their workers and say what failed (the handler's on_halt).
  Ended reported = reported_failures(report);
  fit_failures(reported.failures, reported.not_relayed, kMaxStoredFailureBytes);
  s.phase = Phase::concluding;
  s.reports = {{id, std::move(reported)}};
  s.concluding_since = now;
  s.concluding_why = no_restarts_left(options_.max_restarts, s.restart_count);
  s.awaiting.clear();
  for (const auto& m : s.participants) {
    if (!s.done.count(m.id)) s.awaiting.insert(m.id);
  }
  return true;
}

bool EtcdRound::done(EtcdRoundState& s, const std::string& id, std::uint64_t round) const {
  // Its workers all succeeded before it heard of the failure: it has nothing to add.
  if (s.phase == Phase::concluding) return round == s.round && s.awaiting.erase(id) > 0;
  if (s.phase != Phase::running || round != s.round || !s.participant(id)) return false;
  if (!s.done.insert(id).second) return false;
  if (s.done.size() == s.participants.size()) {
    end_job(s, Stop{StopCause::finished,
                    fmt::format("all {} nodes finished", s.participants.size()), 0, std::nullopt});
  }
  return true;
}

bool EtcdRound::all_answered(const EtcdRoundState& s,
                             const std::map<std::string, std::uint64_t>& answered) {
  return std::all_of(s.awaiting.begin(), s.awaiting.end(), [&](const std::string& id) {
    auto it = answered.find(id);
    return it != answered.end() && it->second == s.round;
  });
}

bool EtcdRound::conclude(EtcdRoundState& s, const std::map<std::string, Ended>& ended,
                         double now) const {
  if (s.phase != Phase::concluding) return false;
  std::map<std::string, std::uint64_t> answered;
  for (const auto& [id, e] : ended) answered[id] = e.round;
  const bool late = now - s.concluding_since.value_or(now) >= in_seconds(options_.join_timeout);
  if (!all_answered(s, answered) && !late) return false;
  std::map<std::string, Ended> reports = s.reports;
  for (const auto& [id, e] : ended) {
    if (e.round == s.round && s.participant(id)) take_report(reports, id, e);
  }
  Stop stop = concluded_stop(reports, s.concluding_why);
  fit_failures(stop.failures, stop.not_relayed, kMaxStoredFailureBytes);
  end_job(s, std::move(stop));
  return true;
}

bool EtcdRound::lost(EtcdRoundState& s, const std::string& id, const std::string& why,
                     double now) const {
  if (s.phase == Phase::ended) return false;
  if (s.phase == Phase::concluding) {
    // What it reported before it went still counts; it is not waited for.
    const bool member = erase(s.participants, id);
    s.awaiting.erase(id);
    s.done.erase(id);
    return erase(s.waiting, id) || member;
  }
  const EtcdMember* p = s.phase == Phase::running ? s.participant(id) : nullptr;
  if (!p) {
    if (!erase(s.waiting, id)) return false;
    s.expected.erase(id);
    if (s.phase == Phase::forming) {
      if (s.waiting.empty()) s.forming_since.reset();
      maybe_complete(s, now);
    }
    return true;
  }
  if (!s.started) {
    const std::string reason = fmt::format(
        "node {} lost before round {} started: it never answered ({}); forming the "
        "round again without it",
        describe(*p), s.round, why);
    erase(s.participants, id);
    form_again(s, now, Restart{RestartCause::node_lost, reason, s.restart_count, std::nullopt});
    return true;
  }
  const std::string reason = fmt::format("node {} lost ({})", describe(*p), why);
  erase(s.participants, id);
  s.done.erase(id);
  const int remaining = static_cast<int>(s.participants.size() + s.waiting.size());
  if (s.restart_count >= options_.max_restarts) {
    end_job(s, Stop{StopCause::node_lost,
                    fmt::format("{}; no restarts left ({} of {} used)", reason, s.restart_count,
                                count_of(options_.max_restarts, "restart")),
                    1, std::nullopt});
  } else if (remaining < options_.min_nodes) {
    end_job(s, Stop{StopCause::node_lost,
                    fmt::format("{}; {} {}, fewer than the minimum of {}", reason,
                                count_of(remaining, "node"), remaining == 1 ? "remains" : "remain",
                                options_.min_nodes),
                    1, std::nullopt});
  } else {
    ++s.restart_count;
    begin_forming(s, now,
                  Restart{RestartCause::node_lost,
                          fmt::format("{}; continuing with {} ({} of {})", reason,
                                      count_of(remaining, "node"), s.restart_count,
                                      count_of(options_.max_restarts, "restart")),
                          s.restart_count, std::nullopt});
  }
  return true;
}

bool EtcdRound::prune(EtcdRoundState& s, const std::set<std::string>& live, double now) const {
  std::vector<std::string> gone;
  for (const auto* list : {&s.participants, &s.waiting}) {
    for (const auto& m : *list) {
      if (!live.count(m.id)) gone.push_back(m.id);
    }
  }
  bool changed = false;
  const std::string why =
      fmt::format("its etcd lease expired: no keep-alive for {:.0f} s", heartbeat_timeout_s_);
  for (const auto& id : gone) changed = lost(s, id, why, now) || changed;
  return changed;
}

void EtcdRound::begin_forming(EtcdRoundState& s, double now, Restart restart) const {
  s.expected.clear();
  for (const auto& m : s.participants) s.expected.insert(m.id);
  for (const auto& m : s.waiting) s.expected.insert(m.id);
  s.participants.clear();  // they join the next round afresh
  next_round(s, now, std::move(restart));
}

// The round's members go back to the front of the waiting list, in their order: they need not
// join again, and the round forms at once when enough of them are there.
void EtcdRound::form_again(EtcdRoundState& s, double now, Restart why) const {
  s.waiting.insert(s.waiting.begin(), s.participants.begin(), s.participants.end());
  s.participants.clear();
  s.expected.clear();
  for (const auto& m : s.waiting) s.expected.insert(m.id);
  next_round(s, now, std::move(why));
}

// What every new round starts from, however its members were chosen.
void EtcdRound::next_round(EtcdRoundState& s, double now, Restart restart) const {
  s.started = false;
  s.done.clear();
  s.phase = Phase::forming;
  ++s.round;
  s.restart = std::move(restart);
  s.forming_since = now;
  s.min_reached_at.reset();
  maybe_complete(s, now);
}

void EtcdRound::maybe_complete(EtcdRoundState& s, double now) const {
  if (s.phase != Phase::forming) return;
  const int n = static_cast<int>(s.waiting.size());
  if (n < options_.min_nodes) {
    s.min_reached_at.reset();
    return;
  }
  if (!s.min_reached_at) s.min_reached_at = now;
  const bool all_expected_back =
      !s.expected.empty() &&
      std::all_of(s.expected.begin(), s.expected.end(),
                  [&](const std::string& e) { return s.waiter(e) != nullptr; });
  const bool full = n >= options_.max_nodes;
  if (!full && !all_expected_back &&
      now - *s.min_reached_at < in_seconds(options_.last_call_timeout)) {
    return;
  }
  const auto take = std::min<std::size_t>(s.waiting.size(), options_.max_nodes);
  s.participants.assign(s.waiting.begin(), s.waiting.begin() + static_cast<long>(take));
  s.waiting.erase(s.waiting.begin(), s.waiting.begin() + static_cast<long>(take));
  s.phase = Phase::running;
  s.started = false;
  s.done.clear();
  s.expected.clear();
  s.forming_since.reset();
  s.min_reached_at.reset();
}

void EtcdRound::end_job(EtcdRoundState& s, Stop stop) const {
  s.phase = Phase::ended;
  s.stop = std::move(stop);
  s.waiting.clear();
  s.participants.clear();
  s.started = false;
  s.expected.clear();
  s.done.clear();
  s.awaiting.clear();
  s.reports.clear();
  s.concluding_since.reset();
  s.concluding_why.clear();
}

bool EtcdRound::tick(EtcdRoundState& s, double now) const {
  if (s.phase == Phase::forming) {
    const Phase before = s.phase;
    maybe_complete(s, now);
    if (s.phase != before) return true;
    if (s.forming_since && now - *s.forming_since >= in_seconds(options_.join_timeout)) {
      const int need = options_.min_nodes;
      const int have = static_cast<int>(s.waiting.size());
      end_job(s, Stop{StopCause::join_timeout,
                      fmt::format("timed out after {:.0f} s waiting for nodes at {}: {} of {} "
                                  "joined, {} missing",
                                  in_seconds(options_.join_timeout), endpoint_, have, need,
                                  need - have),
                      1, std::nullopt});
      return true;
    }
    return false;
  }
  if (s.phase != Phase::running) return false;
  const auto before = s.waiting.size();
  s.waiting.erase(std::remove_if(s.waiting.begin(), s.waiting.end(),
                                 [&](const EtcdMember& m) {
                                   return now - m.joined_at >= in_seconds(options_.join_timeout);
                                 }),
                  s.waiting.end());
  return s.waiting.size() != before;
}

std::optional<double> EtcdRound::next_deadline(const EtcdRoundState& s) const {
  std::optional<double> best;
  auto keep = [&](double t) {
    if (!best || t < *best) best = t;
  };
  if (s.phase == Phase::forming) {
    if (s.min_reached_at) keep(*s.min_reached_at + in_seconds(options_.last_call_timeout));
    if (s.forming_since) keep(*s.forming_since + in_seconds(options_.join_timeout));
  } else if (s.phase == Phase::running) {
    for (const auto& m : s.waiting) keep(m.joined_at + in_seconds(options_.join_timeout));
  } else if (s.phase == Phase::concluding && s.concluding_since) {
    keep(*s.concluding_since + in_seconds(options_.join_timeout));  // conclude() then ends it
  }
  return best;
}

Stop EtcdRound::dropped(const EtcdRoundState& s) const {
  if (s.phase == Phase::running) {
    return Stop{StopCause::join_timeout,
                fmt::format("timed out after {:.0f} s: the job at {} is running with its maximum "
                            "of {} nodes",
                            in_seconds(options_.join_timeout), endpoint_, options_.max_nodes),
                1, std::nullopt};
  }
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
