#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
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

// A console stream shared by every worker's tee: lines are written whole, and once the reader
// has gone (EPIPE) console output is dropped while log files are still written. A pipe whose
// reader stops reading is given kStallSeconds to take more; after that it is treated as gone too,
// so that a stalled reader cannot freeze the event loop (and with it the job's supervision).
class Console {
 public:
  static constexpr int kStallSeconds = 5;

  explicit Console(int fd) : fd_(fd) {}
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  void write(const char* data, size_t size);
  bool closed() const { return closed_; }

 private:
  void open_nonblocking();

  int fd_;
  int nonblocking_fd_ = -1;  // the same pipe opened anew with O_NONBLOCK, when fd_ is a pipe
  bool probed_ = false;
  bool closed_ = false;
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
// the console. Calls `on_closed` once the pipe reaches end of file.
class TeeReader : public std::enable_shared_from_this<TeeReader> {
 public:
  TeeReader(boost::asio::io_context& io, int pipe_fd, int file_fd, Console* console,
            std::string prefix);
  ~TeeReader();
  void start(std::function<void()> on_closed);

 private:
  void read_more();

  boost::asio::posix::stream_descriptor pipe_;
  int file_fd_;
  bool file_ok_ = true;
  Console* console_;
  LineSplitter splitter_;
  std::vector<char> buffer_;
  std::string lines_;
  std::function<void()> on_closed_;
};

// Writes all of `data` to `fd`, retrying on EINTR and waiting out EAGAIN. False on error.
bool write_all(int fd, const char* data, size_t size);

}  // namespace trainrun::launch
