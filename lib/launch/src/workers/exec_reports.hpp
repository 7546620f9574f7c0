#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// The exec reports of a group just forked (Child::exec_report), read as events on the loop
// instead of waited for: `done` runs once, with nothing when every child runs its program, or
// with the first child whose start failed and its errno. A child killed before its exec has
// failed nothing (its report ends empty); what ended it is its exit status.
class ExecReports {
 public:
  using Failure = std::pair<pid_t, int>;  // pid, errno
  using Done = std::function<void(std::optional<Failure>)>;

  explicit ExecReports(boost::asio::io_context& io) : io_(io) {}
  ~ExecReports() { cancel(); }
  ExecReports(const ExecReports&) = delete;
  ExecReports& operator=(const ExecReports&) = delete;

  // Takes each child's report (the descriptors are ours from now on, their fields set to -1).
  // `done` runs later, on the loop, or at once where there is no report to read.
  void watch(std::vector<Child>& children, Done done);
  // Reads `pid`'s report now, where it is complete (the child ended: nothing more will come);
  // `done` may run from here.
  void settle(pid_t pid);
  // Closes every report: `done` never runs.
  void cancel();
  // Whether `done` is still to run.
  bool pending() const { return static_cast<bool>(done_); }

 private:
  struct Report {
    pid_t pid = -1;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pipe;  // null once read
  };
  void wait(std::size_t index);
  // Reads report `index` if it is complete; false where it is not yet.
  bool read(std::size_t index);
  void finish(std::optional<Failure> failure);

  boost::asio::io_context& io_;
  std::vector<Report> reports_;
  std::size_t open_ = 0;
  Done done_;
  unsigned generation_ = 0;  // a wait on an earlier group's report is dropped
};

}  // namespace trainrun::launch
