#include "etcd_state_writer.hpp"

#include <algorithm>
#include <chrono>

#include "etcd_client.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;

void EtcdStateWriter::enqueue(EtcdRound::Change change) {
  changes_.push_back({std::move(change)});
  run_next();
}

void EtcdStateWriter::enqueue_refresh() {
  if (!changes_.empty() && changes_.back().refresh && !(changing_ && changes_.size() == 1)) return;
  changes_.push_back({[this](EtcdRoundState& s, double now) { return round_.tick(s, now); }, true});
  run_next();
}

void EtcdStateWriter::run_next() {
  if (changing_ || changes_.empty() || !hooks_.ready()) return;
  changing_ = true;
  // The agent watching every key has them as etcd had them moments ago: it writes from that
  // view; where the state moved on meanwhile, the compare fails, and it reads.
  if (!read_first_) {
    if (std::optional<EtcdSnapshot> watched = hooks_.watched()) return change_from(*watched);
  }
  hooks_.read([this](const EtcdSnapshot& snap) { change_from(snap); });
}

void EtcdStateWriter::change_from(const EtcdSnapshot& snap) {
  std::optional<EtcdRoundState> mine = round_.state_of(snap.state, hooks_.generation());
  if (!mine) return hooks_.fail(round_.superseded());
  EtcdRoundState& s = *mine;
  if (!round_.apply(s, snap.keys, changes_.front().change, unix_time())) {
    finish();
    if (snap.state) hooks_.state(*snap.state, snap.state_mod_revision);
    return;
  }
  compare_and_set(snap, s);
}

json EtcdStateWriter::compare_and_set_body(const EtcdSnapshot& snap,
                                           const EtcdRoundState& s) const {
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

void EtcdStateWriter::compare_and_set(const EtcdSnapshot& snap, const EtcdRoundState& s) {
  calls_.call(
      "/v3/kv/txn", compare_and_set_body(snap, s),
      [this, written = s](const json& j) {
        if (!j.value("succeeded", false)) {
          // Another agent changed it first: again, after a short random pause.
          ++conflicts_;
          read_first_ = true;
          const auto pause = std::chrono::microseconds(
              std::uniform_int_distribution<int>(0, 2000 * std::min(conflicts_, 10))(rng_));
          return calls_.after(pause, [this] {
            changing_ = false;
            run_next();
          });
        }
        conflicts_ = 0;
        // What this agent wrote is the state now: its next change starts from it.
        const std::int64_t revision = etcd_int(j.at("header"), "revision");
        hooks_.wrote(written, revision);
        finish();
        hooks_.state(written, revision);
      },
      [this] {
        changing_ = false;
        read_first_ = true;
        run_next();
      });
}

void EtcdStateWriter::finish() {
  read_first_ = false;
  changes_.pop_front();
  changing_ = false;
  run_next();
}

}  // namespace trainrun::rendezvous
