#include "trainrun/launch/rollcall/hang_watch.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <map>
#include <utility>

#include "collectives.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"
#include "trainrun/stacks/groups.hpp"

namespace trainrun::launch {

namespace {

std::map<int, std::vector<stacks::Frame>> positions(const nlohmann::json& reply) {
  std::map<int, std::vector<stacks::Frame>> out;
  for (const auto& r : roll_call_ranks(reply)) out[r.rank] = stacks::signature(r.stack, true);
  return out;
}

bool same_place(const std::vector<stacks::Frame>& a, const std::vector<stacks::Frame>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const stacks::Frame& x, const stacks::Frame& y) {
                      return x.function == y.function && x.file == y.file && x.line == y.line &&
                             x.module == y.module && x.kind == y.kind;
                    });
}

HangVerdict progressing(double recheck_s, std::string why, bool stack_moved = false) {
  return {HangVerdict::Kind::progress, recheck_s, std::move(why), stack_moved};
}

// Why a reply cannot show the whole job (a node not asked, or not answering), else "": its
// progress is unknown, so no hang is found on it.
std::string incomplete(const nlohmann::json& reply) {
  const std::string not_asked = reply.value("not_asked", "");
  if (!not_asked.empty()) return "the other nodes could not be asked: " + not_asked;
  const auto missing = reply.value("missing", nlohmann::json::array());
  if (!missing.empty())
    return fmt::format("{} did not answer", missing.front().value("host", "a node"));
  return "";
}

bool in_pdb(const stacks::Stack& stack) {
  const stacks::Thread* main = stack.main_thread();
  if (!main) return false;
  return std::any_of(main->frames.begin(), main->frames.end(), [](const stacks::Frame& f) {
    const std::string name = f.file.substr(f.file.find_last_of('/') + 1);
    return f.kind == stacks::FrameKind::python && (name == "pdb.py" || name == "bdb.py");
  });
}

}  // namespace

std::string waiting_for_input(const nlohmann::json& reply) {
  std::vector<std::string> who;
  for (const auto& r : roll_call_ranks(reply)) {
    const bool pdb = in_pdb(r.stack);
    if (r.stack.terminal.empty() && !pdb) continue;
    if (r.stack.terminal.empty())
      who.push_back(fmt::format("rank {} is in pdb", r.rank));
    else
      who.push_back(fmt::format("rank {} waits for input at {}{}", r.rank, r.stack.terminal,
                                pdb ? " (in pdb)" : ""));
  }
  std::string out;
  for (const auto& w : who) out += (out.empty() ? "" : "; ") + w;
  return out;
}

bool collective_waiting(const nlohmann::json& reply) {
  const auto pending = [](const nlohmann::json& ops) {
    if (!ops.is_array()) return false;
    return std::any_of(ops.begin(), ops.end(), [](const nlohmann::json& op) {
      return op.is_object() && op.value("state", "") == "pending";
    });
  };
  for (const auto& node : json_list(reply, "nodes"))
    for (const auto& rank : json_list(node, "ranks")) {
      const auto c = rank.find("collectives");
      if (c == rank.end() || !c->is_object()) continue;
      const auto groups = c->find("groups");
      if (groups == c->end() || !groups->is_object()) continue;
      for (const auto& group : *groups) {
        if (!group.is_object()) continue;
        const auto ops = group.find("collectives");
        const auto p2p = group.find("p2p");
        if ((ops != group.end() && pending(*ops)) || (p2p != group.end() && pending(*p2p)))
          return true;
      }
    }
  return false;
}

std::string computing(const nlohmann::json& first, const nlohmann::json& second) {
  if (collective_waiting(first) || collective_waiting(second)) return "";
  std::map<int, stacks::Stack> before;
  for (auto& r : roll_call_ranks(first)) before[r.rank] = std::move(r.stack);
  const auto ranks = roll_call_ranks(second);
  if (ranks.empty()) return "";
  double least = 1e9, most = 0;
  std::vector<int> busy;
  for (const auto& r : ranks) {
    const auto it = before.find(r.rank);
    if (it == before.end() || it->second.pid != r.stack.pid) return "";
    const stacks::Stack& a = it->second;
    const stacks::Stack& b = r.stack;
    const double wall = b.read_at - a.read_at;
    if (a.cpu_s < 0 || b.cpu_s < 0 || wall <= 0) return "";
    const double share = (b.cpu_s - a.cpu_s) / wall;
    if (share < kComputingCpuShare) return "";
    least = std::min(least, share);
    most = std::max(most, share);
    busy.push_back(r.rank);
  }
  const auto percent = [](double share) { return static_cast<int>(share * 100 + 0.5); };
  return fmt::format("{} {} used {}% of a CPU with no collective waiting",
                     busy.size() == 1 ? "rank" : "ranks", stacks::rank_ranges(busy),
                     percent(least) == percent(most)
                         ? std::to_string(percent(least))
                         : fmt::format("{}-{}", percent(least), percent(most)));
}

std::optional<double> job_quiet_s(const nlohmann::json& reply) {
  std::optional<double> least;
  for (const auto& node : json_list(reply, "nodes")) {
    const auto it = node.find("quiet_s");
    if (it == node.end() || !it->is_number()) continue;
    const double q = it->get<double>();
    if (!least || q < *least) least = q;
  }
  return least;
}

std::vector<int> moved_ranks(const nlohmann::json& first, const nlohmann::json& second) {
  const auto before = positions(first);
  std::vector<int> moved;
  for (const auto& [rank, frames] : positions(second)) {
    const auto it = before.find(rank);
    if (it != before.end() && !same_place(it->second, frames)) moved.push_back(rank);
  }
  return moved;
}

HangVerdict judge_first(const nlohmann::json& reply, double timeout_s) {
  if (const std::string why = incomplete(reply); !why.empty())
    return progressing(kHangConfirmGap.count(), why);
  const double quiet = job_quiet_s(reply).value_or(timeout_s);
  if (quiet < timeout_s)
    return progressing(timeout_s - quiet,
                       fmt::format("a node's workers made progress {:.1f} s ago", quiet));
  if (std::string who = waiting_for_input(reply); !who.empty())
    return {HangVerdict::Kind::progress, timeout_s, std::move(who), false, true};
  return {HangVerdict::Kind::quiet, 0, ""};
}

HangVerdict judge_second(const nlohmann::json& first, const nlohmann::json& second,
                         double timeout_s) {
  if (const std::string why = incomplete(second); !why.empty())
    return progressing(kHangConfirmGap.count(), why);
  const double quiet = job_quiet_s(second).value_or(timeout_s);
  if (quiet < timeout_s)
    return progressing(timeout_s - quiet,
                       fmt::format("a node's workers made progress {:.1f} s ago", quiet));
  if (roll_call_ranks(second).empty()) return progressing(timeout_s, "no worker is running");
  if (std::string who = waiting_for_input(second); !who.empty())
    return {HangVerdict::Kind::progress, timeout_s, std::move(who), false, true};
  const auto moved = moved_ranks(first, second);
  if (!moved.empty())
    return progressing(timeout_s,
                       fmt::format("the stack of {} {} moved", moved.size() == 1 ? "rank" : "ranks",
                                   stacks::rank_ranges(moved)),
                       true);
  // Busy in its own code on every rank, none in a collective: a long silent computation. (A rank
  // spinning inside a collective that another never entered leaves that collective pending.)
  if (std::string busy = computing(first, second); !busy.empty())
    return progressing(timeout_s, std::move(busy), true);
  return {HangVerdict::Kind::hung, 0, ""};
}

HangReport hang_report(const nlohmann::json& reply, double quiet_s) {
  HangReport report;
  const auto ranks = roll_call_ranks(reply);
  const auto groups = stacks::group_stacks(ranks);
  const auto suspects = stacks::odd_ranks(groups, ranks);
  report.line = stacks::describe_suspects(suspects, groups);
  if (report.line.empty()) {
    // Every rank waits with others: the groups say where.
    std::string where;
    for (const auto& g : groups)
      where += fmt::format("{}{} {} in {}", where.empty() ? "" : "; ",
                           g.ranks.size() == 1 ? "rank" : "ranks", stacks::rank_ranges(g.ranks),
                           g.frames.empty() ? "?" : g.frames.front().function);
    report.line = "no rank stands out: " + where;
  }
  // The collectives say which rank is behind, where stacks alone cannot (two ranks, each in a
  // place of its own): that rank is the hang's cause.
  const CollectivesVerdict verdict = collectives_verdict(reply);
  if (!verdict.behind.empty() ||
      (suspects.empty() && !verdict.lines.empty() && verdict.lines.front().rfind("note:", 0) != 0))
    report.line = verdict.lines.front();
  // The report begins with its line (hang_text): the roll call below it does not repeat it.
  report.text = format_roll_call(reply, report.line);
  nlohmann::json suspects_json = nlohmann::json::array();
  for (const auto& s : suspects)
    suspects_json.push_back({{"rank", s.rank}, {"host", s.host}, {"where", s.where}});
  report.json = {{"quiet_s", quiet_s},
                 {"line", report.line},
                 {"suspects", std::move(suspects_json)},
                 {"groups", stacks::groups_json(groups)}};
  if (!verdict.json.is_null()) report.json["collectives"] = verdict.json;
  if (!verdict.behind.empty()) {
    report.rank = verdict.behind.front();
    for (const auto& rs : ranks)
      if (rs.rank == report.rank) report.host = rs.host;
  } else if (!suspects.empty()) {
    report.rank = suspects.front().rank;
    report.host = suspects.front().host;
  } else if (!groups.empty() && !groups.front().ranks.empty()) {
    report.rank = groups.front().ranks.front();
    report.host = groups.front().hosts.empty() ? "" : groups.front().hosts.front();
  }
  for (const auto& node : reply.at("nodes"))
    for (const auto& r : json_list(node, "ranks"))
      if (r.value("rank", -2) == report.rank) {
        report.local_rank = r.value("local_rank", -1);
        report.pid = r.value("pid", 0);
      }
  return report;
}

HangWatch::HangWatch(boost::asio::io_context& io, double timeout_s, std::string heartbeat_file,
                     Hooks hooks)
    : timer_(io),
      timeout_s_(timeout_s),
      heartbeat_file_(std::move(heartbeat_file)),
      hooks_(std::move(hooks)),
      off_loop_([&io](std::function<void()> f) { boost::asio::post(io, std::move(f)); }) {}

void HangWatch::start() {
  stop();
  confirmed_ = false;
  progress();
  stage_ = Stage::waiting;
  arm(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_)));
}

void HangWatch::stop() {
  ++generation_;
  stage_ = Stage::idle;
  first_.reset();
  timer_.cancel();
}

double HangWatch::quiet_s() const {
  double quiet = std::chrono::duration<double>(Clock::now() - last_progress_).count();
  struct stat st {};
  if (!heartbeat_file_.empty() && ::stat(heartbeat_file_.c_str(), &st) == 0) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const double age = static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) +
                       static_cast<double>(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
    quiet = std::min(quiet, std::max(age, 0.0));
  }
  return quiet;
}

bool HangWatch::suspected() const {
  return confirmed_ || (stage_ != Stage::idle && quiet_s() >= timeout_s_);
}

// Never sooner than a second from now: at most one wake-up a second, whatever the timeout.
void HangWatch::arm(Clock::duration after) {
  timer_.expires_after(std::max<Clock::duration>(after, std::chrono::seconds(1)));
  timer_.async_wait([this, generation = generation_](boost::system::error_code ec) {
    if (ec || generation != generation_) return;
    if (stage_ == Stage::waiting)
      check();
    else if (stage_ == Stage::gap)
      sample();
  });
}

void HangWatch::check() {
  const double quiet = quiet_s();
  if (quiet < timeout_s_) {
    pause_said_ = false;
    arm(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(timeout_s_ - quiet)));
    return;
  }
  hooks_.say(fmt::format("hang watch: no progress on this node for {:.0f} s; taking the job's "
                         "stacks to see whether it is hung",
                         quiet),
             Level::debug);
  stage_ = Stage::first;
  sample();
}

void HangWatch::sample() {
  if (stage_ == Stage::gap) stage_ = Stage::second;
  hooks_.roll_call([this, generation = generation_](nlohmann::json reply) {
    if (generation == generation_) sampled(std::move(reply));
  });
}

struct HangWatch::Judged {
  HangVerdict verdict;
  std::optional<HangReport> report;  // hung: the report
};

void HangWatch::sampled(nlohmann::json reply) {
  auto second = std::make_shared<const nlohmann::json>(std::move(reply));
  off_loop_.run(
      [first = stage_ == Stage::first ? nullptr : first_, second, timeout_s = timeout_s_,
       quiet = quiet_s()] {
        Judged j;
        try {
          j.verdict = first ? judge_second(*first, *second, timeout_s)
                            : judge_first(*second, timeout_s);
          if (j.verdict.kind == HangVerdict::Kind::hung) j.report = hang_report(*second, quiet);
        } catch (const std::exception& e) {  // off the loop: nothing may leave the thread
          j.verdict = progressing(
              timeout_s, fmt::format("the roll call's reply could not be read: {}", e.what()));
          j.report.reset();
        }
        return j;
      },
      [this, generation = generation_, second](Judged j) {
        if (generation == generation_) judged(std::move(j), second);
      });
}

void HangWatch::judged(Judged judged, std::shared_ptr<const nlohmann::json> reply) {
  const HangVerdict& verdict = judged.verdict;
  switch (verdict.kind) {
    case HangVerdict::Kind::progress:
      if (verdict.paused && !std::exchange(pause_said_, true))
        hooks_.say(fmt::format("hang watch: paused: {}; the --hang-timeout of {:g} s counts again "
                               "from when it goes on",
                               verdict.why, timeout_s_),
                   Level::info);
      else
        hooks_.say("hang watch: not hung: " + verdict.why, Level::debug);
      if (verdict.paused) progress();
      // A stack that moved is this node's progress too: the next look is a timeout away.
      if (verdict.stack_moved) progress();
      first_.reset();
      stage_ = Stage::waiting;
      arm(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(verdict.recheck_s)));
      return;
    case HangVerdict::Kind::quiet:
      first_ = std::move(reply);
      stage_ = Stage::gap;
      arm(kHangConfirmGap);
      return;
    case HangVerdict::Kind::hung:
      break;
  }
  stop();
  confirmed_ = true;
  hooks_.hung(*judged.report);
}

}  // namespace trainrun::launch
