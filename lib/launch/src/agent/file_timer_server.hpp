#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent_consoles.hpp"
#include "file_timer.hpp"
#include "job_logs.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/rollcall/stack_collector.hpp"

namespace trainrun::launch {

// torchrun's FileTimerServer on the agent's event loop: reads the workers' requests from a FIFO,
// and when a scope expires takes that worker's stack off the loop (StackCollector; the scopes
// that expire together, together), then, on the loop, writes it (terminal and log directory) and
// sends the worker the signal its request asked for, if it is still that worker; the job goes on
// as after any worker failure. Requests for a process that is not one of this node's running
// workers (or in a worker's process group) and lines that are not requests are said and ignored.
// Idle, it costs nothing: the FIFO is waited on, and a timer runs only while a scope is armed
// (waking at most once a second).
class FileTimerServer {
 public:
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    int attempt = 0;  // a pid of another attempt is another worker
  };
  struct Hooks {
    // The running worker `pid` is, or whose process group it is in.
    std::function<std::optional<Worker>(pid_t)> find_worker;
    // A worker's valid request (the hang watch's progress); may be empty.
    std::function<void()> request;
  };

  // Makes the FIFO at `path` (replacing a file there, as torchrun does) and starts reading it.
  // Its lines go to `consoles`, the stacks it takes to timer_expired/ in the attempt's directory
  // of `logs`. Throws SetupError naming the path when it cannot.
  FileTimerServer(boost::asio::io_context& io, std::string path, const JobLogs& logs,
                  AgentConsoles& consoles, Hooks hooks);
  // Removes the FIFO; stacks still being taken are dropped, their tools killed, and each such
  // expired scope said in a line (the job ended first: no signal is sent).
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  void wait_for_requests();
  void read_requests();
  void take_line(const std::string& line);
  void ignore(const std::string& why);
  void arm();
  void check();
  // An expired scope whose worker asked for a signal, and that worker then.
  struct Reaping {
    FileTimers::Expired expired;
    Worker worker;
  };
  void reap(const Reaping& r, stacks::Stack stack);

  std::string path_;
  const JobLogs& logs_;
  AgentConsoles& consoles_;
  Hooks hooks_;
  boost::asio::posix::stream_descriptor fifo_;
  int keep_open_ = -1;  // our own writer: the read end never sees end of file
  boost::asio::steady_timer timer_;
  FileTimers timers_;
  std::string pending_;    // the start of a line not yet ended
  bool skipping_ = false;  // inside a line over kMaxTimerRequest, dropped up to its newline
  int ignored_ = 0;
  // The expirations whose stacks are being taken, by collection.
  std::map<int, std::vector<Reaping>> reaping_;
  int collections_ = 0;
  StackCollector collector_;
};

}  // namespace trainrun::launch
