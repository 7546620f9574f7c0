#include "line_dedup.hpp"

#include <algorithm>

namespace trainrun::launch {

std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

void LineDedup::add(Clock::time_point now, int stream, std::optional<int> rank, std::string body,
                    std::string whole) {
  const long next_seq = first_seq_ + static_cast<long>(groups_.size());
  if (rank) {
    auto open = open_.find({stream, body});
    auto last = last_of_rank_.find({stream, *rank});
    if (open != open_.end() && open->second >= first_seq_ &&
        (last == last_of_rank_.end() || open->second > last->second)) {
      groups_[static_cast<size_t>(open->second - first_seq_)].ranks.push_back(*rank);
      last_of_rank_[{stream, *rank}] = open->second;
      return;
    }
    open_[{stream, body}] = next_seq;
    last_of_rank_[{stream, *rank}] = next_seq;
  }
  groups_.push_back(Group{rank ? now + window_ : now, stream, std::move(body), std::move(whole),
                          rank ? std::vector<int>{*rank} : std::vector<int>{}, rank.has_value()});
}

LineDedup::Out LineDedup::render(const Group& group) const {
  if (!group.ranked || group.ranks.size() == 1) return {group.stream, group.whole};
  return {group.stream, "[" + rank_ranges(group.ranks) + "]:" + group.body};
}

std::vector<LineDedup::Out> LineDedup::due(Clock::time_point now) {
  std::vector<Out> out;
  size_t n = 0;
  while (n < groups_.size() && groups_[n].due <= now) out.push_back(render(groups_[n++]));
  for (size_t i = 0; i < n; ++i) {
    auto open = open_.find({groups_[i].stream, groups_[i].body});
    if (open != open_.end() && open->second == first_seq_ + static_cast<long>(i)) open_.erase(open);
  }
  groups_.erase(groups_.begin(), groups_.begin() + static_cast<std::ptrdiff_t>(n));
  first_seq_ += static_cast<long>(n);
  return out;
}

std::vector<LineDedup::Out> LineDedup::flush_all() { return due(Clock::time_point::max()); }

std::optional<LineDedup::Clock::time_point> LineDedup::next_due() const {
  if (groups_.empty()) return std::nullopt;
  return groups_.front().due;
}

}  // namespace trainrun::launch
