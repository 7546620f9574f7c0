#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// "0-3,8,10-11": sorted, distinct ranks as ranges.
std::string rank_ranges(const std::vector<int>& ranks);

// --dedup: the same line printed by many ranks within `window` becomes one line naming the ranks
// ("[0-15]:UserWarning: ..."). Every line is held up to `window` and lines leave in the order
// they came, so each rank's lines on a stream keep their order: a rank's line joins an earlier
// line of the same text only if nothing this rank printed since on that stream waits ahead of it
// (stdout and stderr are two streams, ordered apart as --tee's files are). Pure: the time goes in,
// lines come out.
class LineDedup {
 public:
  using Clock = std::chrono::steady_clock;
  struct Out {
    int stream;  // 1 stdout, 2 stderr
    std::string line;
  };

  explicit LineDedup(Clock::duration window) : window_(window) {}

  // `whole` is the line as received (its prefix included); `rank` and `body` are the worker's
  // global rank and its text after the prefix, or nothing for a line of no worker (kept alone).
  void add(Clock::time_point now, int stream, std::optional<int> rank, std::string body,
           std::string whole);
  // The lines whose window has ended, in order.
  std::vector<Out> due(Clock::time_point now);
  std::vector<Out> flush_all();
  // When the first held line is due; nothing when none is held.
  std::optional<Clock::time_point> next_due() const;

 private:
  struct Group {
    Clock::time_point due;
    int stream;
    std::string body;
    std::string whole;  // shown when one rank printed it
    std::vector<int> ranks;
    bool ranked;
  };
  Out render(const Group& group) const;

  Clock::duration window_;
  long first_seq_ = 0;                                // the sequence number of groups_.front()
  std::vector<Group> groups_;                         // in order of arrival, not yet out
  std::map<std::pair<int, std::string>, long> open_;  // (stream, body) -> its latest group
  std::map<std::pair<int, int>, long> last_of_rank_;  // (stream, rank) -> its latest group
};

}  // namespace trainrun::launch
