#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace trainrun {

// Work taken off an event loop: a thread of the object's own, started with the first job, runs
// the jobs one after another, and hands each result back to the loop through `post` (which the
// owner gives: asio::post on its io_context), where `done` runs. The loop goes on meanwhile.
// Destroying it drops the jobs not started and waits for the one running (a job that may take
// long has its own way to be told to stop); a result handed back after that is dropped.
class OffLoop {
 public:
  using Post = std::function<void(std::function<void()>)>;

  explicit OffLoop(Post post) : post_(std::move(post)) {}
  ~OffLoop();
  OffLoop(const OffLoop&) = delete;
  OffLoop& operator=(const OffLoop&) = delete;

  // work() on the thread, then done(its result) on the loop (never from within this call).
  template <class Work, class Done>
  void run(Work work, Done done) {
    enqueue([work = std::move(work), done = std::move(done)]() mutable -> std::function<void()> {
      return [done = std::move(done), result = work()]() mutable { done(std::move(result)); };
    });
  }

 private:
  using Job = std::function<std::function<void()>()>;
  void enqueue(Job job);
  void serve();

  Post post_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  bool stop_ = false;
  // Read and cleared on the loop only: a result handed back after the end is dropped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::thread thread_;
};

}  // namespace trainrun
