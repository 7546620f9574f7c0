#include "etcd_watch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "etcd_client.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;

EtcdSnapshot EtcdView::snapshot() const {
  EtcdSnapshot s;
  s.state = stored;
  s.state_mod_revision = stored ? stored_mod_revision : 0;
  s.revision = watch_from - 1;
  s.keys = keys;
  return s;
}

bool EtcdWatch::take(const json& j, EtcdSnapshot& s) {
  if (!parse(j, s)) return false;
  if (!view_.generation) view_.generation = round_.generation_to_join(s.state);
  view_.keys = s.keys;
  view_.stored = s.state;
  view_.stored_mod_revision = s.state_mod_revision;
  return true;
}

bool EtcdWatch::parse(const json& j, EtcdSnapshot& s) {
  try {
    s = space_.snapshot(j);
    return true;
  } catch (const std::exception& e) {
    // What the user can do differs: run one version, or (both) choose another run id.
    const bool other_version = dynamic_cast<const StateLayoutError*>(&e) != nullptr;
    hooks_.fail(Stop{StopCause::rejected,
                     fmt::format("the rendezvous state in etcd at {} under {} is not one this "
                                 "trainrun wrote ({})",
                                 endpoint_, space_.prefix(), e.what()),
                     other_version ? Refusal::state_version : Refusal::foreign_state});
    return false;
  }
}

void EtcdWatch::read(std::function<void(const EtcdSnapshot&)> then) {
  calls_.call(
      "/v3/kv/range", space_.everything(),
      [this, then](const json& j) {
        EtcdSnapshot s;
        if (take(j, s)) then(s);
      },
      [this, then] { read(then); });
}

void EtcdWatch::read_state(std::int64_t revision) {
  state_wanted_ = std::max(state_wanted_, revision);
  if (reading_state_) return;
  reading_state_ = true;
  calls_.call(
      "/v3/kv/range", space_.state_only(),
      [this](const json& j) {
        reading_state_ = false;
        EtcdSnapshot s;
        if (!parse(j, s)) return;
        if (s.state && s.state_mod_revision > view_.stored_mod_revision) {
          view_.stored = s.state;
          view_.stored_mod_revision = s.state_mod_revision;
          hooks_.state(*s.state, s.state_mod_revision);
        }
        if (!hooks_.finished() && state_wanted_ > s.revision) read_state(state_wanted_);
      },
      [this] {
        reading_state_ = false;
        read_state(state_wanted_);
      });
}

void EtcdWatch::watch(std::int64_t from) {
  view_.watching_all = lowest();
  json request = view_.watching_all ? space_.everything() : space_.nodes_and_round();
  json body = {{"create_request", std::move(request)}};
  body["create_request"]["start_revision"] = std::to_string(from);
  view_.watch_from = from;
  calls_.client()->stream(
      "/v3/watch", body.dump(), [this](const std::string& line) { on_watch(line); },
      [this](EtcdReply r) {
        if (hooks_.finished()) return;
        if (rewatch_) {
          rewatch_ = false;
          return hooks_.lost();
        }
        // The stream ended: etcd restarted or went away. Read again, then watch from where we
        // were.
        calls_.unreachable(r, [this] { hooks_.lost(); });
      });
}

void EtcdWatch::watch_everything() {
  rewatch_ = true;
  calls_.client()->cancel_streams();
}

void EtcdWatch::wrote(const EtcdRoundState& s, std::int64_t revision) {
  if (revision <= view_.stored_mod_revision) return;
  view_.stored = s;
  view_.stored_mod_revision = revision;
}

void EtcdWatch::on_watch(const std::string& line) {
  if (hooks_.finished()) return;
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.contains("result")) return;
  const json& result = j.at("result");
  calls_.reached();
  if (!result.contains("events")) return;
  bool node_gone = false;
  for (const json& ev : result.at("events")) {
    const json& kv = ev.at("kv");
    const std::string key = base64_decode(kv.at("key").get<std::string>());
    view_.watch_from = std::max(view_.watch_from, etcd_int(kv, "mod_revision") + 1);
    const bool deleted = ev.value("type", "") == "DELETE";
    if (key == space_.round() && !deleted) {
      // The agents watching every key have the state itself.
      if (!view_.watching_all) hooks_.summary(kv.value("value", ""), etcd_int(kv, "mod_revision"));
    } else if (key == space_.state() && !deleted) {
      const std::int64_t revision = etcd_int(kv, "mod_revision");
      // This agent's own write, or one it has read since: nothing new.
      if (revision <= view_.stored_mod_revision) continue;
      // Decoded once the lines already received are handled: of states that came one after
      // another, only the last (a read, too, finds only the latest).
      const bool posted = pending_state_.has_value();
      pending_state_ = std::make_pair(kv.value("value", ""), revision);
      if (!posted) {
        boost::asio::post(io_, [this, alive = std::weak_ptr<int>(alive_)] {
          if (!alive.expired()) take_pending_state();
        });
      }
    } else {
      space_.note(view_.keys, key, deleted ? nullptr : &kv);
      node_gone = node_gone || (deleted && key.rfind(space_.nodes(), 0) == 0);
    }
    if (hooks_.finished()) return;
  }
  hooks_.taken(node_gone);
}

void EtcdWatch::take_pending_state() {
  if (!pending_state_ || hooks_.finished()) return;
  auto [value, revision] = std::move(*pending_state_);
  pending_state_.reset();
  if (revision > view_.stored_mod_revision) {
    try {
      EtcdRoundState s = decode_state(base64_decode(value));
      view_.stored = s;
      view_.stored_mod_revision = revision;
      hooks_.state(s, revision);
    } catch (const std::exception&) {
    }
  }
  if (!hooks_.finished()) hooks_.taken(false);
}

}  // namespace trainrun::rendezvous
