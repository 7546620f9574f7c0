#include "store_asker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace trainrun::launch {

namespace {

// The first of the unnamed connections waits this long for the others before they are asked
// about; a node answers within kStoreAnswerTimeout or leaves its connections unnamed.
constexpr std::chrono::seconds kStoreAskAfter{5};
constexpr std::chrono::seconds kStoreAnswerTimeout{5};
// Each call after the first asks about connections that came later (a slow rank, a stranger): a
// stranger that keeps connecting costs at most this many calls per attempt.
constexpr int kMaxStoreAsks = 8;

}  // namespace

StoreAsker::StoreAsker(boost::asio::io_context& io, Ask ask, RaiseEvent raise)
    : ask_(std::move(ask)), raise_(std::move(raise)), timer_(io) {}

void StoreAsker::attempt_started(const Topology& topology) {
  attempt_over();
  if (topology.group_world_size > 1) topology_ = topology;
}

void StoreAsker::attempt_over() {
  ++generation_;
  topology_.reset();
  timer_.cancel();
  pending_.clear();
  seen_ = 0;
  asks_ = 0;
  asking_ = false;
}

void StoreAsker::unnamed(const StoreConnection& connection, double at_s) {
  if (!topology_) return;
  ++seen_;
  if (asks_ >= kMaxStoreAsks) return;
  pending_.push_back({connection, at_s});
  if (pending_.size() == 1 && !asking_) {
    timer_.expires_after(kStoreAskAfter);
    timer_.async_wait([this, generation = generation_](boost::system::error_code ec) {
      if (!ec && generation == generation_ && !asking_ && !pending_.empty()) ask_now();
    });
  }
  consider();
}

// Asked at once when as many connections came as the other nodes have ranks.
void StoreAsker::consider() {
  if (asking_ || pending_.empty()) return;
  if (seen_ >= topology_->world_size - topology_->local_world_size) ask_now();
}

void StoreAsker::ask_now() {
  timer_.cancel();
  asking_ = true;
  ++asks_;
  const std::size_t n = std::min(pending_.size(), kMaxStoreQuestionConnections);
  std::vector<Pending> asked(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  StoreOwnersQuestion question{topology_->restart_count, {}};
  for (const auto& p : asked) question.connections.push_back(p.connection);
  ask_(store_owners_question(question).dump(), kStoreAnswerTimeout,
       [this, generation = generation_, asked](std::vector<std::string> answers,
                                               std::vector<rendezvous::StacksMissing> missing,
                                               std::string error) {
         if (generation == generation_) answered(asked, answers, missing, error);
       });
}

void StoreAsker::answered(const std::vector<Pending>& asked,
                          const std::vector<std::string>& answers,
                          const std::vector<rendezvous::StacksMissing>& missing,
                          const std::string& error) {
  asking_ = false;
  StoreOwnersQuestion question{topology_->restart_count, {}};
  for (const auto& p : asked) question.connections.push_back(p.connection);
  event::StoreOwnersNamed named;
  named.restart_count = topology_->restart_count;
  std::map<std::size_t, StoreOwner> owners;  // one owner per connection: the first to name it
  for (const std::string& text : answers) {
    try {
      for (const StoreOwner& o :
           parse_store_owners_answer(nlohmann::json::parse(text), question,
                                     topology_->group_world_size, topology_->world_size))
        if (o.node != topology_->group_rank) owners.emplace(o.connection, o);
    } catch (const std::exception& e) {
      if (named.why.empty()) named.why = fmt::format("a node's answer was not read: {}", e.what());
    }
  }
  for (const auto& [i, o] : owners) named.ranks.push_back({o.rank, o.node, asked[i].at_s});
  named.unnamed = static_cast<int>(asked.size() - owners.size());
  if (!missing.empty())
    named.why = fmt::format("{} did not answer: {}", missing.front().host, missing.front().reason);
  if (!error.empty())
    named.why =
        error == rendezvous::kStacksNoEnd
            ? fmt::format("not every node answered within {} s", kStoreAnswerTimeout.count())
            : error;
  raise_(std::move(named));
  // Connections that came during the call wait for the next (at once, if all have come now).
  if (!topology_ || pending_.empty()) return;
  timer_.expires_after(kStoreAskAfter);
  timer_.async_wait([this, generation = generation_](boost::system::error_code ec) {
    if (!ec && generation == generation_ && !asking_ && !pending_.empty()) ask_now();
  });
  consider();
}

}  // namespace trainrun::launch
