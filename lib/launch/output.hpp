#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"

namespace trainrun::launch {

// Where one stream (stdout or stderr) of one worker goes.
enum class StreamRoute {
  inherit,  // straight to trainrun's own stream: no copying
  file,     // straight to the log file
  tee,      // through a pipe: to the log file and, prefixed, to the console
};

struct StreamPlan {
  StreamRoute route = StreamRoute::inherit;
  std::string file;  // log file path for file and tee
};

struct OutputPlan {
  StreamPlan out;
  StreamPlan err;
};

// Decides the routes of one worker's streams from --redirects, --tee and --local-ranks-filter.
// A rank outside the filter never reaches the console, so its output goes to its log files.
OutputPlan plan_output(const LaunchConfig& config, int local_rank, const std::string& rank_dir);

// The console prefix: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${role_name}, ${rank} and
// ${local_rank} (also $name; $$ is $; other names stay as written), or "[<role><local_rank>]:".
std::string line_prefix(const std::optional<std::string>& templ, const std::string& role,
                        int rank, int local_rank);

// A console stream (trainrun's stdout or stderr) shared by every worker's tee and by trainrun's
// own messages. Writes never block the event loop when the console is a pipe or a terminal: what
// the descriptor does not take now is queued, in order, and written when it becomes writable.
// Each write() is queued whole, so lines written whole never mix. While more than kQueueLimit is
// queued the console is full(): tee readers stop reading, so a reader that pauses (`| less`, ^S)
// blocks the workers in write(), as it would if they wrote to the console themselves. Once the
// reader has gone (EPIPE) the console is closed: output to it is dropped and nobody waits on it.
// A file, a socket, or a pipe that cannot be opened anew is written with plain blocking writes.
class Console {
 public:
  static constexpr size_t kQueueLimit = 4u << 20;
  // At the end of the job, how long a console may take nothing before its queue is given up.
  static constexpr int kFlushSeconds = 5;

  Console(boost::asio::io_context& io, int fd);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  void write(const char* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  bool closed() const { return closed_; }
  // More than kQueueLimit is waiting for the reader (never true once closed).
  bool full() const { return !closed_ && queued() > kQueueLimit; }
  size_t queued() const { return queue_.size() - head_; }
  // When the reader last took some output (construction counts).
  std::chrono::steady_clock::time_point last_progress() const { return last_progress_; }
  // Calls `f` on the event loop once at most half of kQueueLimit is queued, or the console closed.
  void when_not_full(std::function<void()> f);
  // Calls `f` on the event loop once nothing is queued, or the console closed.
  void when_flushed(std::function<void()> f);
  // Gives up on the reader: drops what is queued and all later output. Returns the bytes dropped.
  size_t abandon();
  // One attempt to write `text` now, without queueing or waiting (for the note that says output
  // was given up: it may go to this very console). Starts on a new line if the console is not at
  // the start of one.
  void write_now(const std::string& text);
  // True when descriptors `a` and `b` are the same file (`2>&1`): they need one Console, or a line
  // half-written to one could be split by a line written to the other.
  static bool same_file(int a, int b);

 private:
  size_t write_some(const char* data, size_t size);
  void arm();
  void on_writable();
  void close();
  void notify(std::vector<std::function<void()>>& waiters);

  boost::asio::io_context& io_;
  int fd_;
  // The same pipe or terminal opened anew with O_NONBLOCK, when that works; owns the descriptor.
  boost::asio::posix::stream_descriptor nonblocking_;
  bool waiting_ = false;
  bool closed_ = false;
  bool at_line_start_ = true;
  std::string queue_;
  size_t head_ = 0;  // queue_[0, head_) has been written
  std::chrono::steady_clock::time_point last_progress_;
  std::vector<std::function<void()>> not_full_waiters_;
  std::vector<std::function<void()>> flushed_waiters_;
};

// Splits a byte stream into lines and prefixes each one. Pure: used by the tee reader and tests.
class LineSplitter {
 public:
  // Lines longer than this are emitted in pieces rather than held without bound.
  static constexpr size_t kMaxLine = 8u << 20;

  explicit LineSplitter(std::string prefix) : prefix_(std::move(prefix)) {}
  // Appends the prefixed complete lines in `data` to `out`; keeps a trailing partial line.
  void feed(const char* data, size_t size, std::string& out);
  // At end of stream: the pending partial line, prefixed and newline-terminated.
  void finish(std::string& out);

 private:
  std::string prefix_;
  std::string partial_;
};

// Reads one worker stream's pipe on the event loop: raw bytes to the log file, prefixed lines to
// the console. Stops reading while the console is full (the worker then blocks in write) and
// resumes when it drains or closes. Calls `on_closed` once the pipe reaches end of file.
class TeeReader : public std::enable_shared_from_this<TeeReader> {
 public:
  TeeReader(boost::asio::io_context& io, int pipe_fd, int file_fd, Console* console,
            std::string prefix);
  ~TeeReader();
  void start(std::function<void()> on_closed);
  // The worker and all it started have ended: read the rest of the pipe whatever the console's
  // queue holds (no writer is left, so what remains is bounded), so the log file gets all of it.
  void drain();
  bool paused() const { return paused_; }

 private:
  void read_more();
  void resume();

  boost::asio::posix::stream_descriptor pipe_;
  int file_fd_;
  bool file_ok_ = true;
  Console* console_;
  LineSplitter splitter_;
  std::vector<char> buffer_;
  std::string lines_;
  std::function<void()> on_closed_;
  bool paused_ = false;
  bool draining_ = false;
};

// Writes all of `data` to `fd`, retrying on EINTR and waiting out EAGAIN. False on error.
bool write_all(int fd, const char* data, size_t size);

}  // namespace trainrun::launch
