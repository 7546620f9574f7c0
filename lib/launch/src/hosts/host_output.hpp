#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "line_dedup.hpp"

namespace trainrun::launch {

// What comes back over each host's ssh, line by line: the agent's ready line, taken and not
// shown; ssh's (or the remote shell's) last stderr line, kept to say why an agent did not start;
// every other line shown, a worker's as its agent prefixed it, any other after its host's name;
// with --dedup, the same line of many ranks as one (LineDedup). Pure: bytes and the time go in,
// the lines to write come out.
class HostOutput {
 public:
  using Clock = LineDedup::Clock;
  using Lines = std::vector<LineDedup::Out>;

  HostOutput(bool dedup, Clock::duration window) : dedup_(dedup), held_(window) {}

  // A host as listed (the ssh destination, perhaps user@host); its index is the next one.
  void add_host(const std::string& host);
  // `bytes` that host `i` wrote on `stream` (1 stdout, 2 stderr).
  Lines feed(size_t i, int stream, std::string_view bytes, Clock::time_point now);
  // The stream has ended: what is left of its last line is a line.
  Lines close(size_t i, int stream, Clock::time_point now);

  // The held lines whose window has ended; every held line; when the next one is due.
  Lines due(Clock::time_point now) { return held_.due(now); }
  Lines flush_all() { return held_.flush_all(); }
  std::optional<Clock::time_point> next_due() const { return held_.next_due(); }

  // The launcher stops every host for the user's signal: from now on an agent's line that a node
  // or the rendezvous server is lost, or that the job cannot continue, is not shown. Each node
  // leaves because the launcher stopped it; the launcher said so once.
  void stopping_every_host() { stopping_every_host_ = true; }

  // Whether host `i`'s agent said it has started.
  bool ready(size_t i) const { return hosts_[i].ready; }
  // Host `i`'s last stderr line, empty when it wrote none; once its agent started, the last one
  // that is not the agent's nor a worker's (ssh's own).
  const std::string& last_error(size_t i) const { return hosts_[i].last_error; }

 private:
  struct Host {
    std::string name;
    std::string address;  // without user@, as in the workers' prefix
    std::string partial[3];
    bool ready = false;
    std::string last_error;
  };
  void line(Lines& out, size_t i, int stream, std::string text, Clock::time_point now);
  // A trainrun line that another host's agent printed word for word says what every agent says
  // (the job's stop, its reason): shown once, from the first host that said it.
  bool first_to_say(size_t i, const std::string& text);
  // The agents' own lines remembered (they are few: a job's long output is its workers').
  static constexpr size_t kMaxSaidLines = 4096;

  bool dedup_;
  bool stopping_every_host_ = false;
  LineDedup held_;
  std::vector<Host> hosts_;
  std::map<std::string, size_t> said_;  // agents' trainrun lines, by the first host to say each
};

}  // namespace trainrun::launch
