#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrun/launch/output/console.hpp"
#include "trainrun/launch/output/output_tail.hpp"

namespace trainrun::launch {

// Splits a byte stream into lines and prefixes each one; with `filters`, keeps only the lines
// that contain one of them (a substring, as torchrun matches). Pure: used by the tee reader and
// tests.
class LineSplitter {
 public:
  // Lines longer than this are emitted in pieces rather than held without bound.
  static constexpr size_t kMaxLine = 8u << 20;

  explicit LineSplitter(std::string prefix, std::vector<std::string> filters = {})
      : prefix_(std::move(prefix)), filters_(std::move(filters)) {}
  // Appends the prefixed complete lines in `data` to `out`; keeps a trailing partial line.
  void feed(const char* data, size_t size, std::string& out);
  // At end of stream: the pending partial line, prefixed and newline-terminated (or the newline
  // that ends a line whose start flush_partial() has shown).
  void finish(std::string& out);
  // Whether bytes of an unfinished line are held.
  bool holding() const { return !partial_.empty(); }
  // Shows the unfinished line's bytes now (a prompt that waits for its answer), prefixed unless
  // its start was shown already, without a newline: the rest of that line follows without a
  // second prefix. A splitter with filters keeps whole lines, and shows nothing early.
  void flush_partial(std::string& out);

 private:
  void emit(std::string_view line, bool add_newline, std::string& out) const;

  std::string prefix_;
  std::vector<std::string> filters_;
  std::string partial_;
  bool line_started_ = false;  // the current line's start (and its prefix) was shown early
};

// A file that the readers of one attempt append their duplicated lines to; closed with the last.
struct SharedLogFile {
  int fd = -1;
  bool ok = true;  // false after a failed write: reported once, then left alone
  explicit SharedLogFile(int f) : fd(f) {}
  SharedLogFile(const SharedLogFile&) = delete;
  SharedLogFile& operator=(const SharedLogFile&) = delete;
  ~SharedLogFile();
};

// Where a reader also writes the console lines that match `filters`.
struct Duplicate {
  std::shared_ptr<SharedLogFile> file;
  std::vector<std::string> filters;
};

// Reads one worker stream's pipe on the event loop: raw bytes to the log file, prefixed lines to
// the console (with `console_copy`; without, only once the log file cannot be written, so that
// no output is lost). Stops reading while the console is full (the worker then blocks in write)
// and resumes when it drains or closes. Calls `on_closed` once the pipe reaches end of file.
class TeeReader : public std::enable_shared_from_this<TeeReader> {
 public:
  // How long an unfinished console line waits for its end before it is shown as it is.
  static constexpr std::chrono::milliseconds kPromptQuiet{200};
  TeeReader(boost::asio::io_context& io, int pipe_fd, int file_fd, Console* console,
            std::string prefix, Duplicate duplicate = {}, bool console_copy = true);
  ~TeeReader();
  // Before start(): the console gets the bytes as they come, unsplit and unprefixed, as if the
  // worker wrote to it itself (a progress bar's '\r' updates included).
  void pass_through() { pass_through_ = true; }
  // Before start(): every byte read is also fed to `tail`.
  void keep_tail(std::shared_ptr<OutputTail> tail) { tail_ = std::move(tail); }
  // Before start(): called whenever bytes arrive (the hang watch's progress).
  void on_data(std::function<void()> seen) { on_data_ = std::move(seen); }
  void start(std::function<void()> on_closed);
  // The worker and all it started have ended: read the rest of the pipe whatever the console's
  // queue holds (no writer is left, so what remains is bounded), so the log file gets all of it.
  void drain();
  bool paused() const { return paused_; }

 private:
  void read_more();
  void resume();
  void on_read(const char* data, size_t n);
  void write_duplicate();
  // A console line left unfinished is shown after kPromptQuiet without more bytes, as a
  // terminal shows a prompt; not while the console is full and the worker waits for us.
  void watch_partial();

  boost::asio::posix::stream_descriptor pipe_;
  boost::asio::steady_timer partial_quiet_;
  int file_fd_;
  bool file_ok_ = true;
  Console* console_;
  bool to_console_;
  LineSplitter splitter_;
  std::shared_ptr<SharedLogFile> duplicate_file_;  // none without duplicate filters
  LineSplitter duplicate_splitter_;
  std::string duplicate_lines_;
  std::vector<char> buffer_;
  std::string lines_;
  std::function<void()> on_closed_;
  bool paused_ = false;
  bool draining_ = false;
  bool pass_through_ = false;
  std::shared_ptr<OutputTail> tail_;
  std::function<void()> on_data_;
};

}  // namespace trainrun::launch
