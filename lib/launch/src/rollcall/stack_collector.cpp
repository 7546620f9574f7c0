#include "trainrun/launch/rollcall/stack_collector.hpp"

#include <boost/asio/post.hpp>
#include <utility>

namespace trainrun::launch {

namespace asio = boost::asio;

StackCollector::StackCollector(asio::io_context& io, stacks::CollectOptions options)
    : io_(io), options_(std::move(options)) {
  options_.stop = &stop_;
}

StackCollector::~StackCollector() {
  *alive_ = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  // Bounded: the running tool is killed within moments of the stop.
  if (thread_.joinable()) thread_.join();
}

void StackCollector::collect(std::vector<pid_t> pids, Done done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(pids), std::move(done)});
  }
  wake_.notify_one();
  // The tools are this thread's children: the supervisor reaps only its own (__WNOTHREAD).
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void StackCollector::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Collection c = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    auto stacks = stacks::collect_stacks(c.pids, options_);
    asio::post(io_,
               [alive = alive_, done = std::move(c.done), stacks = std::move(stacks)]() mutable {
                 if (*alive) done(std::move(stacks));
               });
    lock.lock();
  }
}

}  // namespace trainrun::launch
