#include "trainrun/base/off_loop.hpp"

namespace trainrun {

OffLoop::~OffLoop() {
  *alive_ = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OffLoop::enqueue(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
}

void OffLoop::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::function<void()> hand_back = job();
    job = nullptr;
    post_([alive = alive_, hand_back = std::move(hand_back)] {
      if (*alive) hand_back();
    });
    lock.lock();
  }
}

}  // namespace trainrun
