#include "stacks_requests.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <utility>

namespace trainrun::rendezvous {

std::uint64_t StacksRequests::open(StacksDone done, Clock::duration bound) {
  const std::uint64_t id = next_id_++;
  Request& request = requests_[id];
  request.done = std::move(done);
  request.timer = std::make_shared<boost::asio::steady_timer>(io_, bound);
  request.timer->async_wait(
      [this, alive = std::weak_ptr<int>(alive_), id](boost::system::error_code ec) {
        if (!alive.expired() && !ec) finish(id, {}, std::string(kStacksNoEnd));
      });
  return id;
}

void StacksRequests::answer(const StacksAnswer& answer) {
  auto it = requests_.find(answer.id);
  if (it != requests_.end()) it->second.answers.push_back(answer.answer);
}

void StacksRequests::finish(std::uint64_t id, const std::vector<StacksMissing>& missing,
                            const std::string& error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request request = std::move(it->second);
  requests_.erase(it);
  request.timer->cancel();
  request.done(std::move(request.answers), missing, error);
}

void StacksRequests::abandon() {
  for (auto& [id, request] : std::exchange(requests_, {})) {
    request.timer->cancel();
    boost::asio::post(io_, [done = std::move(request.done), answers = std::move(request.answers)] {
      done(answers, {}, "the connection to the rendezvous host ended before the answers");
    });
  }
}

}  // namespace trainrun::rendezvous
