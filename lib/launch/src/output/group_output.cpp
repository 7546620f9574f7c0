#include "trainrun/launch/output/group_output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

namespace {

int open_log(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | flags, 0644);
  if (fd < 0)
    throw SpawnError(fmt::format("cannot open log file {}: {}", path, std::strerror(errno)));
  return fd;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A stream bound for a log file reaches it through us, also without --tee: a worker writing the
// file itself on a full disk loses its output unseen (a C++ program ignores the error), while a
// reader of ours says so and moves the stream to the console.
GroupOutput::Ends open_stream(const StreamPlan& plan) {
  GroupOutput::Ends fds;
  if (plan.route == StreamRoute::inherit) return fds;
  int file = plan.route == StreamRoute::console ? -1 : open_log(plan.file, 0);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    if (file >= 0) ::close(file);
    throw SpawnError(fmt::format("cannot create an output pipe: {}", std::strerror(errno)));
  }
  fds.child = p[1];
  fds.keep_pipe = p[0];
  fds.keep_file = file;
  return fds;
}

}  // namespace

GroupOutput::GroupOutput(boost::asio::io_context& io, Console& out, Console& err,
                         std::function<void()> closed)
    : io_(io), out_(out), err_(err), closed_(std::move(closed)) {}

void GroupOutput::reset() {
  open_readers_ = 0;
  ++generation_;
  readers_.clear();
  duplicate_files_.clear();
  stderr_tails_.clear();
  spoke_.clear();
}

GroupOutput::Streams GroupOutput::open(const OutputPlan& plan) {
  Streams s;
  try {
    s.out_duplicate = duplicate_for(plan.out);
    s.err_duplicate = duplicate_for(plan.err);
    s.out = open_stream(plan.out);
    s.err = open_stream(plan.err);
  } catch (const SpawnError&) {
    close_fd(s.out.child), close_fd(s.out.keep_file), close_fd(s.out.keep_pipe);
    throw;
  }
  return s;
}

void GroupOutput::start(Streams& s, const OutputPlan& plan, int local_rank,
                        const std::string& prefix) {
  close_fd(s.out.child);
  close_fd(s.err.child);
  if (s.out.keep_pipe >= 0)
    tee(s.out.keep_pipe, s.out.keep_file, out_, prefix, std::move(s.out_duplicate), plan.out.route,
        nullptr, local_rank);
  if (s.err.keep_pipe >= 0) {
    auto& tail = stderr_tails_[local_rank];
    tail = std::make_shared<OutputTail>();
    tee(s.err.keep_pipe, s.err.keep_file, err_, prefix, std::move(s.err_duplicate), plan.err.route,
        tail, local_rank);
  }
}

void GroupOutput::drain() {
  for (const auto& r : readers_)
    if (auto reader = r.lock()) reader->drain();
}

void GroupOutput::give_up() {
  open_readers_ = 0;
  ++generation_;
}

std::string GroupOutput::stderr_tail(int local_rank) const {
  const auto it = stderr_tails_.find(local_rank);
  return it == stderr_tails_.end() ? std::string() : it->second->text();
}

Duplicate GroupOutput::duplicate_for(const StreamPlan& plan) {
  if (plan.duplicate_file.empty()) return {};
  auto& file = duplicate_files_[plan.duplicate_file];
  if (!file) file = std::make_shared<SharedLogFile>(open_log(plan.duplicate_file, O_TRUNC));
  return {file, plan.filters};
}

void GroupOutput::tee(int pipe_fd, int file_fd, Console& console, const std::string& prefix,
                      Duplicate duplicate, StreamRoute route, std::shared_ptr<OutputTail> tail,
                      int local_rank) {
  const bool console_copy = route == StreamRoute::tee || route == StreamRoute::console;
  auto reader = std::make_shared<TeeReader>(io_, pipe_fd, file_fd, &console, prefix,
                                            std::move(duplicate), console_copy);
  if (route == StreamRoute::console) reader->pass_through();
  if (tail) reader->keep_tail(std::move(tail));
  reader->on_data([this, local_rank, generation = generation_] {
    if (generation != generation_) return;
    if (progress_) progress_();
    if (first_output_ && spoke_.insert(local_rank).second) first_output_(local_rank);
  });
  ++open_readers_;
  readers_.push_back(reader);
  reader->start([this, generation = generation_] {
    if (generation != generation_) return;
    --open_readers_;
    closed_();
  });
}

}  // namespace trainrun::launch
