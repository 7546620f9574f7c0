#include "exec_reports.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace trainrun::launch {

void ExecReports::watch(std::vector<Child>& children, Done done) {
  cancel();
  reports_.clear();
  ++generation_;
  for (Child& child : children) {
    if (child.exec_report < 0) continue;
    const int fd = std::exchange(child.exec_report, -1);
    // Read as far as it goes, never waited on: a report is one errno, or nothing at the exec.
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    reports_.push_back({child.pid, std::make_unique<boost::asio::posix::stream_descriptor>(io_, fd)});
  }
  open_ = reports_.size();
  done_ = std::move(done);
  if (open_ == 0) return finish(std::nullopt);
  for (std::size_t i = 0; i < reports_.size(); ++i) wait(i);
}

void ExecReports::wait(std::size_t index) {
  reports_[index].pipe->async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [this, index, generation = generation_](boost::system::error_code ec) {
        if (ec || generation != generation_ || !done_ || !reports_[index].pipe) return;
        if (!read(index)) wait(index);
      });
}

bool ExecReports::read(std::size_t index) {
  Report& report = reports_[index];
  int error = 0;
  ssize_t n;
  do {
    n = ::read(report.pipe->native_handle(), &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  report.pipe->close();
  report.pipe.reset();
  --open_;
  // The child writes its errno whole (4 bytes, one write to a pipe) before it exits.
  if (n == static_cast<ssize_t>(sizeof error)) {
    finish(ExecReports::Failure{report.pid, error});
  } else if (open_ == 0) {
    finish(std::nullopt);
  }
  return true;
}

void ExecReports::settle(pid_t pid) {
  for (std::size_t i = 0; i < reports_.size() && done_; ++i)
    if (reports_[i].pid == pid && reports_[i].pipe) read(i);
}

void ExecReports::finish(std::optional<Failure> failure) {
  Done done = std::exchange(done_, nullptr);
  cancel();
  if (done) done(failure);
}

void ExecReports::cancel() {
  done_ = nullptr;
  ++generation_;
  for (Report& report : reports_)
    if (report.pipe) report.pipe->close(), report.pipe.reset();
  open_ = 0;
}

}  // namespace trainrun::launch
