#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace trainrun::launch {

// The agent's end of one worker's diagnosis channel (diagnosis.hpp), read on the event loop
// alone: a notice of the worker's (a line whose id is 0) goes to `notice`, and every other line
// passes on to asker(), the end the roll call's collector asks on as it would on the worker's own
// (rollcall/worker_diagnosis.hpp); what is written there passes on to the worker. One reader of
// the worker's socket, however many ask: a notice is never taken by a collector that skips it.
class DiagnosisRelay : public std::enable_shared_from_this<DiagnosisRelay> {
 public:
  // The text of a notice, after its id.
  using Notice = std::function<void(const std::string& text)>;
  // Takes `channel` (ours, of the worker's channel); nullptr when no socket pair can be made
  // (`channel` is then closed).
  static std::shared_ptr<DiagnosisRelay> open(boost::asio::io_context& io, int channel,
                                              Notice notice);
  ~DiagnosisRelay();
  DiagnosisRelay(const DiagnosisRelay&) = delete;
  DiagnosisRelay& operator=(const DiagnosisRelay&) = delete;

  // Ours, close-on-exec: duplicate it to ask on it.
  int asker() const { return asker_; }
  // Takes at once what the worker has written (its notice before its end is seen, which the
  // wait on the loop may not have yet); false once its channel has ended.
  bool drain();
  // No notice from now on; both sockets closed.
  void close();

  // The most that waits to reach the asker: a stale answer beyond it (the asker gave up and asks
  // no more) is dropped whole, line by line.
  static constexpr std::size_t kMaxQueued = std::size_t{64} << 20;
  // The longest notice; a longer line with id 0 passes on as any other.
  static constexpr std::size_t kMaxNotice = 4096;

 private:
  DiagnosisRelay(boost::asio::io_context& io, int channel, int inner, int asker, Notice notice);
  void read_worker();
  void read_asker();
  // Splits what the worker wrote into notices and lines to pass on.
  void take(const char* data, std::size_t size);
  void pass(const char* data, std::size_t size);
  void write_asker();
  void write_worker();
  // The worker is gone and what it wrote has passed on: the asker reads the end.
  void end_asker();

  // Sockets, not descriptors: what is written to one whose peer is gone fails without SIGPIPE.
  boost::asio::local::stream_protocol::socket channel_;  // the worker's channel
  boost::asio::local::stream_protocol::socket inner_;    // our end of the asker's socket pair
  int asker_ = -1;
  Notice notice_;
  bool closed_ = false;
  enum class Line { start, passing, dropping, notice } line_ = Line::start;
  std::string head_;  // the start of a line not yet known to be a notice, or a notice
  std::string to_asker_, asker_writing_;
  std::string to_worker_, worker_writing_;
  bool worker_ended_ = false;
  char worker_buffer_[65536];
  char asker_buffer_[4096];
};

}  // namespace trainrun::launch
