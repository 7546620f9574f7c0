#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace trainrun::launch {

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

}  // namespace trainrun::launch
