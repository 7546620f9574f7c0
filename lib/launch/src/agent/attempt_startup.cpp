#include "attempt_startup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "trainrun/launch/core/log.hpp"

namespace trainrun::launch {

namespace {

using json = nlohmann::ordered_json;

// A c10d store client that arrives this much later than the median, and twice as late, is named.
constexpr double kMuchSlowerSeconds = 1.0;

std::string seconds(double s) { return fmt::format("{:.2f} s", s); }

json seconds_or_null(const std::optional<double>& s) { return s ? json(*s) : json(); }

// "; first report 3.10 s (slowest: rank 0, 3.10 s)", or "" where no worker reported.
std::string first_report_part(const AttemptStartup& s);

int first_rank(const AttemptStartup& s) { return s.topology.base_rank; }
int end_rank(const AttemptStartup& s) { return s.topology.base_rank + s.topology.local_world_size; }

std::string first_report_part(const AttemptStartup& s) {
  const auto report = slowest_of(s.first_report);
  if (!report) return "";
  return fmt::format("; first report {} (slowest: rank {}, {})", seconds(report->at_s),
                     report->rank, seconds(report->at_s));
}

}  // namespace

bool AttemptStartup::complete() const {
  if (!workers_s) return false;
  if (store != Store::here) return true;
  if (static_cast<int>(at_store.size()) >= topology.world_size) return true;
  for (int rank = topology.base_rank; rank < topology.base_rank + topology.local_world_size; ++rank)
    if (!at_store.count(rank)) return false;
  return !unnamed_why.empty();
}

int AttemptStartup::node(int rank) const {
  const auto it = node_of.find(rank);
  return it == node_of.end() ? topology.group_rank : it->second;
}

bool AttemptStartup::all_spoke() const {
  for (int rank = topology.base_rank; rank < topology.base_rank + topology.local_world_size; ++rank)
    if (!first_output.count(rank)) return false;
  return true;
}

std::optional<SlowestRank> slowest_rank(const AttemptStartup& s) { return slowest_of(s.at_store); }

std::optional<SlowestRank> slowest_of(const std::map<int, double>& at_s) {
  if (at_s.empty()) return std::nullopt;
  std::vector<double> times;
  SlowestRank slowest{at_s.begin()->first, at_s.begin()->second};
  for (const auto& [rank, at] : at_s) {
    times.push_back(at);
    if (at > slowest.at_s) slowest = SlowestRank{rank, at};
  }
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  slowest.median_s = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  slowest.much_slower =
      slowest.at_s > 2 * slowest.median_s && slowest.at_s - slowest.median_s > kMuchSlowerSeconds;
  return slowest;
}

namespace {

// "; from rank 1's exit": what a restart's seconds count from; "" for the first attempt's.
std::string origin_part(const AttemptStartup& s) {
  switch (s.origin) {
    case AttemptStartup::Origin::job_start:
      return "";
    case AttemptStartup::Origin::worker_exit:
      return fmt::format("; from rank {}'s exit", s.origin_rank);
    case AttemptStartup::Origin::stop:
      return "; from the stop of the last attempt";
    case AttemptStartup::Origin::attempt_end:
      return "; from the last attempt's end";
  }
  return "";
}

// The line without what its seconds count from.
std::string startup_steps(const AttemptStartup& s) {
  std::string line = fmt::format("attempt {}: round {}", s.topology.restart_count,
                                 s.round_s ? seconds(*s.round_s) : "not formed");
  line += ", workers started " + (s.workers_s ? seconds(*s.workers_s) : std::string("not yet"));
  if (s.store == AttemptStartup::Store::worker)
    return line + "; ranks at the store not seen (worker RANK 0 serves it)";
  if (s.store == AttemptStartup::Store::other_node)
    return line + "; ranks at the store are seen by node 0's agent";
  if (const auto slowest = slowest_rank(s)) {
    line += fmt::format(", ranks at the store {} (slowest: rank {} on node {}, {}",
                        seconds(slowest->at_s), slowest->rank, s.node(slowest->rank),
                        seconds(slowest->at_s));
    if (slowest->much_slower)
      line += fmt::format(", much slower than the median {}", seconds(slowest->median_s));
    line += ")";
  }
  // Another node's rank not named may be one of the connections not told apart.
  const bool all = s.unattributed == 0;
  for (int rank = all ? 0 : first_rank(s); rank < (all ? s.topology.world_size : end_rank(s));
       ++rank)
    if (!s.at_store.count(rank)) line += fmt::format("; rank {}: not seen at the store", rank);
  if (all || s.topology.group_world_size == 1) return line;
  line += fmt::format("; {} store connection{} not told apart", s.unattributed,
                      s.unattributed == 1 ? "" : "s");
  if (!s.unnamed_why.empty()) line += " (" + s.unnamed_why + ")";
  return line;
}

}  // namespace

std::string startup_line(const AttemptStartup& s) { return startup_steps(s) + origin_part(s); }

std::string first_output_line(const AttemptStartup& s) {
  std::string line = fmt::format("attempt {}: first output", s.topology.restart_count);
  const auto slowest = slowest_of(s.first_output);
  if (!slowest) return line + " not seen" + first_report_part(s);
  line += fmt::format(" {} (slowest: rank {}, {}", seconds(slowest->at_s), slowest->rank,
                      seconds(slowest->at_s));
  if (slowest->much_slower)
    line += fmt::format(", much slower than the median {}", seconds(slowest->median_s));
  line += ")";
  for (int rank = first_rank(s); rank < end_rank(s); ++rank)
    if (!s.first_output.count(rank)) line += fmt::format("; rank {}: no output seen", rank);
  return line + first_report_part(s);
}

json startup_json(const AttemptStartup& s) {
  static const char* const kStore[] = {"this node", "node 0", "worker rank 0"};
  static const char* const kOrigin[] = {"job start", "worker exit", "stop", "attempt end"};
  json ranks = json::array();
  for (int rank = 0; rank < std::max(s.topology.world_size, end_rank(s)); ++rank) {
    const auto it = s.at_store.find(rank);
    const auto spoke = s.first_output.find(rank);
    const auto reported = s.first_report.find(rank);
    const auto started = s.started.find(rank);
    const bool here = rank >= first_rank(s) && rank < end_rank(s);
    // Another node's rank is listed once that node named it: when it started is that node's.
    if (!here && !s.node_of.count(rank)) continue;
    ranks.push_back(
        {{"rank", rank},
         {"local_rank", here ? json(rank - first_rank(s)) : json()},
         {"node_rank", s.node(rank)},
         {"started_s", started == s.started.end() ? json() : json(started->second)},
         {"at_store_s", it == s.at_store.end() ? json() : json(it->second)},
         {"first_output_s", spoke == s.first_output.end() ? json() : json(spoke->second)},
         {"first_report_s", reported == s.first_report.end() ? json() : json(reported->second)}});
  }
  json slowest;
  if (const auto r = slowest_rank(s); r && s.store == AttemptStartup::Store::here)
    slowest = {{"rank", r->rank},
               {"node_rank", s.node(r->rank)},
               {"at_store_s", r->at_s},
               {"median_s", r->median_s},
               {"much_slower", r->much_slower}};
  json first_output_slowest;
  if (const auto r = slowest_of(s.first_output))
    first_output_slowest = {{"rank", r->rank},
                            {"first_output_s", r->at_s},
                            {"median_s", r->median_s},
                            {"much_slower", r->much_slower}};
  const bool exit = s.origin == AttemptStartup::Origin::worker_exit;
  return {{"counted_from",
           {{"event", kOrigin[static_cast<int>(s.origin)]},
            {"rank", exit ? json(s.origin_rank) : json()},
            {"at", iso_time(s.origin_at)}}},
          {"round_s", seconds_or_null(s.round_s)},
          {"workers_started_s", seconds_or_null(s.workers_s)},
          {"store", kStore[static_cast<int>(s.store)]},
          {"ranks", ranks},
          {"unattributed_store_connections", s.unattributed},
          {"unattributed_why", s.unnamed_why.empty() ? json() : json(s.unnamed_why)},
          {"slowest", slowest},
          {"first_output_slowest", first_output_slowest}};
}

}  // namespace trainrun::launch
