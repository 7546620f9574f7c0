#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainrun/launch/output/console.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/output/output_tail.hpp"
#include "trainrun/launch/output/tee_reader.hpp"

namespace trainrun::launch {

// The output of one group of workers. A stream bound for a log file or the console reaches it
// through a pipe that a TeeReader of ours reads on the event loop; the files for lines duplicated
// by --duplicate-std*-filters are opened once per group; the end of each worker's stderr is kept
// for its failure.
class GroupOutput {
 public:
  // One worker's two streams, from their opening to the start of their readers.
  struct Ends {
    int child = -1;      // dup2'ed onto 1 or 2 in the child; -1 to inherit
    int keep_file = -1;  // the log file we write
    int keep_pipe = -1;  // the read end we watch
  };
  struct Streams {
    Ends out, err;
    Duplicate out_duplicate, err_duplicate;
  };

  // `closed` is called on the event loop each time a reader of the current group is done.
  GroupOutput(boost::asio::io_context& io, Console& out, Console& err,
              std::function<void()> closed);

  // Called whenever a worker's output arrives (the hang watch's progress).
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }
  // Called once per worker of a group, when its first output arrives (its start-up's first step).
  void set_first_output(std::function<void(int local_rank)> first) {
    first_output_ = std::move(first);
  }
  // A new group: the last one's readers no longer count; its files and tails are forgotten.
  void reset();
  // Opens the pipes and log files of a worker's `plan`. Throws SpawnError, closing what it opened.
  Streams open(const OutputPlan& plan);
  // After the fork: closes the child's ends and reads the rest, lines prefixed with `prefix`.
  void start(Streams& streams, const OutputPlan& plan, int local_rank, const std::string& prefix);
  // Readers of this group not yet at end of file.
  size_t open_readers() const { return open_readers_; }
  // No writer of ours is left: what the pipes hold is bounded, so read it all, even while the
  // console is paused.
  void drain();
  // Stops waiting for the readers left (a pipe held open by a process outside our tree).
  void give_up();
  // The group has ended: its readers are let go; the tails stay.
  void release() { readers_.clear(); }
  // The last lines of worker `local_rank`'s stderr ("" when it did not pass through us).
  std::string stderr_tail(int local_rank) const;

 private:
  void tee(int pipe_fd, int file_fd, Console& console, const std::string& prefix,
           Duplicate duplicate, StreamRoute route, std::shared_ptr<OutputTail> tail,
           int local_rank);
  Duplicate duplicate_for(const StreamPlan& plan);

  boost::asio::io_context& io_;
  Console& out_;
  Console& err_;
  std::function<void()> closed_;
  size_t open_readers_ = 0;
  // Bumped when a group starts or its remaining readers are given up on: a late reader's close
  // then no longer counts.
  unsigned generation_ = 0;
  std::vector<std::weak_ptr<TeeReader>> readers_;
  std::map<std::string, std::shared_ptr<SharedLogFile>> duplicate_files_;
  std::map<int, std::shared_ptr<OutputTail>> stderr_tails_;
  std::function<void()> progress_;
  std::function<void(int)> first_output_;
  std::set<int> spoke_;  // the workers of the group whose first output has come
};

}  // namespace trainrun::launch
