#include "trainrun/launch/rollcall/roll_call.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "collectives.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/stacks/collect.hpp"
#include "trainrun/stacks/groups.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

// A request is one short line; anything longer is not one.
constexpr std::size_t kMaxRequest = 256;
constexpr auto kRequestTimeout = std::chrono::seconds(10);

// "20250102-153012.345": the dumps of each roll call in a directory of their own.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{}.{:03}", buf, ms);
}

// Every text the roll call sends or keeps is valid UTF-8: thread names (cut by the kernel at 15
// bytes, maybe inside a character), the tools' output, paths and requests are only bytes.
std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool peer_is_allowed(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid() || cred.uid == 0;
}

}  // namespace

std::chrono::milliseconds stack_tool_timeout(const char* value) {
  if (!value || !*value) return stacks::CollectOptions{}.timeout;
  const auto seconds = parse_number(value);
  if (!seconds || *seconds < 0.1 || *seconds > 600)
    throw SetupError(
        fmt::format("{}={}: not a number of seconds from 0.1 to 600 (the stack tools' "
                    "timeout; unset it for the default of {} s)",
                    kStackToolTimeoutVariable, escape_control(value),
                    stacks::CollectOptions{}.timeout.count() / 1000));
  return std::chrono::milliseconds(static_cast<long long>(*seconds * 1000));
}

nlohmann::json node_answer(const NodeWorkers& node, const std::vector<stacks::Stack>& stacks,
                           const std::vector<nlohmann::json>& recorders, const std::string& dumps,
                           const std::string& error) {
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < node.workers.size() && i < stacks.size(); ++i) {
    nlohmann::json stack = stacks[i];
    stack["raw"] = "";  // in the dumps, not on the wire
    nlohmann::json rank = {{"rank", node.workers[i].rank},
                           {"local_rank", node.workers[i].local_rank},
                           {"pid", node.workers[i].pid},
                           {"stack", std::move(stack)}};
    // What crosses the network of the rank's flight recorder: its last collectives per group.
    if (i < recorders.size() && !recorders[i].is_null())
      rank["collectives"] = compact_collectives(recorders[i]);
    ranks.push_back(std::move(rank));
  }
  nlohmann::json answer = {{"node", node.node}, {"nodes", node.nodes},       {"host", node.host},
                           {"dumps", dumps},    {"ranks", std::move(ranks)}, {"error", error}};
  if (node.quiet_s) answer["quiet_s"] = *node.quiet_s;
  // Made valid once, here: the hang report and the job summary built from it are dumped too.
  return nlohmann::json::parse(json_text(answer));
}

std::string fit_node_answer(nlohmann::json answer, std::size_t max_bytes) {
  auto text = [&] { return json_text(answer); };
  std::string out = text();
  auto& ranks = answer["ranks"];
  std::size_t cut = 0;
  const std::string error = answer.value("error", "");
  for (std::size_t i = ranks.size(); i-- > 0 && out.size() > max_bytes;) {
    nlohmann::json& stack = ranks[i]["stack"];
    stack["threads"] = nlohmann::json::array();
    stack["notes"] = {"left out of this node's answer: it would be over the size a node may send"};
    ++cut;
    answer["error"] = fmt::format(
        "{}{}the stacks of {} of this node were left out to fit the {} bytes a node may send (they "
        "are in its dumps)",
        error, error.empty() ? "" : "; ", count_of(cut, "rank"), max_bytes);
    out = text();
  }
  if (out.size() > max_bytes) {
    // Not the stacks: what else there is (long names) goes too, the node still named.
    answer = {
        {"node", answer.value("node", -1)},
        {"nodes", answer.value("nodes", 1)},
        {"host", answer.value("host", "")},
        {"dumps", ""},
        {"ranks", nlohmann::json::array()},
        {"error", "this node's answer was left out: it would be over the size a node may send"}};
    out = text();
  }
  return out;
}

namespace {

// The reply's own answers, not copies: at a thousand nodes they are tens of megabytes, and each
// judgement of a roll call reads them several times.
std::vector<const nlohmann::json*> nodes_by_rank(const nlohmann::json& reply) {
  std::vector<const nlohmann::json*> nodes;
  for (const auto& node : reply.at("nodes")) nodes.push_back(&node);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const nlohmann::json* a, const nlohmann::json* b) {
                     return a->value("node", -1) < b->value("node", -1);
                   });
  return nodes;
}

// Another node's answer may be only {"error"} (one too long, or an agent that could not).
// Several nodes may share a host name (agents on one machine): the node rank tells them apart.
std::string node_name(const nlohmann::json& node, std::size_t nodes) {
  std::string host = escape_control(node.value("host", "a node"));
  if (nodes > 1 && node.value("node", -1) >= 0)
    host = fmt::format("{} (node {})", host, node.value("node", -1));
  return host;
}

}  // namespace

const nlohmann::json& json_list(const nlohmann::json& object, const char* key) {
  static const nlohmann::json empty = nlohmann::json::array();
  if (!object.is_object()) return empty;
  const auto it = object.find(key);
  return it != object.end() && it->is_array() ? *it : empty;
}

std::vector<stacks::RankStack> roll_call_ranks(const nlohmann::json& reply) {
  std::vector<stacks::RankStack> ranks;
  const auto nodes = nodes_by_rank(reply);
  for (const nlohmann::json* node : nodes) {
    const std::string host = node_name(*node, nodes.size());
    for (const auto& r : json_list(*node, "ranks"))
      ranks.push_back({r.at("rank").get<int>(), host, r.at("stack").get<stacks::Stack>()});
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return ranks;
}

CollectivesVerdict collectives_verdict(const nlohmann::json& reply) {
  std::map<int, nlohmann::json> compact;
  for (const auto& node : reply.at("nodes"))
    for (const auto& r : json_list(node, "ranks"))
      if (r.contains("collectives") && r.contains("rank"))
        compact[r.at("rank").get<int>()] = r.at("collectives");
  std::vector<RankCollectives> ranks;
  for (const auto& rs : roll_call_ranks(reply))
    if (const auto it = compact.find(rs.rank); it != compact.end())
      ranks.push_back({rs.rank, rs.host, it->second, stacks::where_is(rs.stack)});
  if (ranks.empty()) return {};
  return judge_collectives(ranks);
}

namespace {

// What a report lists of the nodes one by one (their dumps, their errors, those that did not
// answer), and of the stack groups: a job of a thousand nodes gets a report of a few dozen lines;
// the whole of it is in the dumps on each node and in the reply's JSON.
constexpr std::size_t kNodesListed = 8;
constexpr std::size_t kGroupsListed = 16;

// "a, b, c and 5 more": the first kNodesListed names.
std::string some_of(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < kNodesListed; ++i)
    out += (i ? ", " : "") + names[i];
  if (names.size() > kNodesListed) out += fmt::format(" and {} more", names.size() - kNodesListed);
  return out;
}

// Nodes that said the same thing, together: "node1, node2: text", the commonest last, at most
// kNodesListed texts.
void said_alike(const std::vector<std::pair<std::string, std::string>>& said,
                const std::string& verb, std::vector<std::string>& lines) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_text;
  for (const auto& [who, text] : said) {
    auto it = std::find_if(by_text.begin(), by_text.end(),
                           [&](const auto& entry) { return entry.first == text; });
    if (it == by_text.end())
      by_text.push_back({text, {who}});
    else
      it->second.push_back(who);
  }
  std::size_t others = 0;
  for (std::size_t i = 0; i < by_text.size(); ++i) {
    if (i < kNodesListed)
      lines.push_back(fmt::format("{}{}: {}", some_of(by_text[i].second), verb, by_text[i].first));
    else
      others += by_text[i].second.size();
  }
  if (others > 0)
    lines.push_back(fmt::format("{} more {}{}: other reasons, in the reply's JSON", others,
                                others == 1 ? "node" : "nodes", verb));
}

// The longest directory that every path begins with ("/logs/run/"), or "".
std::string common_directory(const std::vector<std::string>& paths) {
  if (paths.empty()) return "";
  std::string prefix = paths.front();
  for (const auto& p : paths) {
    std::size_t n = 0;
    while (n < prefix.size() && n < p.size() && prefix[n] == p[n]) ++n;
    prefix.resize(n);
  }
  return prefix.substr(0, prefix.rfind('/') + 1);
}

// Where the dumps are: those of the nodes named in the findings first, then the first others, at
// most kNodesListed; the rest in one line.
void dumps_lines(const std::vector<std::pair<std::string, std::string>>& dumps,
                 const std::set<std::string>& named, std::vector<std::string>& lines) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < dumps.size(); ++i)
    if (named.count(dumps[i].first)) order.push_back(i);
  for (std::size_t i = 0; i < dumps.size(); ++i)
    if (!named.count(dumps[i].first)) order.push_back(i);
  std::vector<std::string> rest;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto& [host, path] = dumps[order[k]];
    if (k < kNodesListed || order.size() == kNodesListed + 1)
      lines.push_back(fmt::format("dumps of {}: {}", host, path));
    else
      rest.push_back(path);
  }
  if (rest.empty()) return;
  const std::string dir = common_directory(rest);
  lines.push_back(fmt::format("dumps of {} more {}: on each node{}", rest.size(),
                              rest.size() == 1 ? "node" : "nodes",
                              dir.empty() ? "" : ", under " + dir));
}

// The smallest groups (the odd ones out) and the largest; the others counted.
std::string bounded_groups(const std::vector<stacks::Group>& groups) {
  if (groups.size() <= kGroupsListed) return stacks::format_groups(groups);
  std::vector<stacks::Group> shown(groups.begin(), groups.begin() + (kGroupsListed - 1));
  std::size_t ranks = 0;
  for (std::size_t i = kGroupsListed - 1; i + 1 < groups.size(); ++i)
    ranks += groups[i].ranks.size();
  std::string out = stacks::format_groups(shown);
  const std::size_t more = groups.size() - kGroupsListed;
  out += fmt::format("... {} more {}, {} in all (in the dumps)\n", more,
                     more == 1 ? "group" : "groups", count_of(ranks, "rank"));
  return out + stacks::format_groups({groups.back()});
}

}  // namespace

std::string format_roll_call(const nlohmann::json& reply, const std::string& said) {
  const std::vector<stacks::RankStack> ranks = roll_call_ranks(reply);
  std::set<std::string> notes;
  const auto nodes = nodes_by_rank(reply);
  for (const auto& rank : ranks)
    for (const auto& note : rank.stack.notes) notes.insert(escape_control(note));
  const auto groups = stacks::group_stacks(ranks);
  // A reply without the job's title (an agent of another version) is named by its run id.
  const std::string job = reply.contains("job") ? reply.at("job").get<std::string>()
                                                : "run " + reply.at("run_id").get<std::string>();
  std::string out = fmt::format("stacks of {}: {} on {}\n", escape_control(job),
                                count_of(ranks.size(), "rank"), count_of(nodes.size(), "node"));
  out += bounded_groups(groups);
  // A rank behind the others in their collectives is the finding; the stacks' odd rank only
  // where the collectives name none.
  const CollectivesVerdict verdict = collectives_verdict(reply);
  if (!verdict.table.empty()) {
    out += "collectives (flight recorder):\n";
    for (const auto& line : verdict.table) out += "  " + escape_control(line) + "\n";
  }
  for (const auto& line : verdict.lines)
    if (line != said) out += escape_control(line) + "\n";
  const auto odd = stacks::odd_ranks(groups, ranks);
  std::string suspects = stacks::describe_suspects(
      {odd.begin(), odd.begin() + static_cast<long>(std::min(odd.size(), kNodesListed))}, groups);
  if (odd.size() > kNodesListed) {
    const std::size_t at = suspects.find(" while ");
    suspects.insert(at == std::string::npos ? suspects.size() : at,
                    fmt::format("; and {} more ranks alone", odd.size() - kNodesListed));
  }
  if (!suspects.empty() && verdict.behind.empty() && suspects != said) out += suspects + "\n";
  for (const auto& note : notes) out += "note: " + note + "\n";

  // The nodes of the ranks found, whose dumps are looked at first.
  std::set<std::string> named;
  for (const auto& s : odd) named.insert(s.host);
  for (const auto& rs : ranks)
    if (std::binary_search(verdict.behind.begin(), verdict.behind.end(), rs.rank))
      named.insert(rs.host);
  std::vector<std::string> lines_after;
  std::vector<std::pair<std::string, std::string>> errors, dumps, missing;
  for (const nlohmann::json* node : nodes) {
    const std::string host = node_name(*node, nodes.size());
    const std::string error = node->value("error", "");
    if (!error.empty()) errors.emplace_back(host, escape_control(error));
    const std::string path = node->value("dumps", "");
    if (!path.empty()) dumps.emplace_back(host, escape_control(path));
  }
  said_alike(errors, "", lines_after);
  dumps_lines(dumps, named, lines_after);
  for (const auto& m : reply.at("missing"))
    missing.emplace_back(escape_control(m.at("host").get<std::string>()),
                         escape_control(m.at("reason").get<std::string>()));
  said_alike(missing, " did not answer", lines_after);
  const std::string not_asked = reply.value("not_asked", "");
  if (!not_asked.empty()) {
    int job_nodes = 1;
    for (const nlohmann::json* node : nodes)
      job_nodes = std::max(job_nodes, node->value("nodes", 1));
    lines_after.push_back(fmt::format(
        "the job has {}: only {} shown ({})", count_of(job_nodes, "node"),
        nodes.size() == 1 ? "this one's workers are" : "these are", escape_control(not_asked)));
  }
  for (const auto& line : lines_after) out += line + "\n";
  return out;
}

RollCall::RollCall(asio::io_context& io, const std::string& dir, JobEntry entry, Workers workers)
    : io_(io),
      registration_(dir, std::move(entry)),
      workers_(std::move(workers)),
      acceptor_(io),
      collector_(io, [] {
        stacks::CollectOptions options;
        options.timeout = stack_tool_timeout(std::getenv(kStackToolTimeoutVariable));
        return options;
      }()) {
  boost::system::error_code ec;
  acceptor_.open(local(), ec);
  // The workers, forked later, must not inherit the listening socket.
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.bind(local::endpoint(registration_.entry().socket), ec);
  if (!ec) acceptor_.listen(trainrun::kListenBacklog, ec);
  if (ec)
    throw SetupError(
        fmt::format("cannot listen on {}: {}", registration_.entry().socket, ec.message()));
  accept();
}

RollCall::~RollCall() { close(); }

void RollCall::close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

void RollCall::accept() {
  auto peer = std::make_shared<local::socket>(io_);
  acceptor_.async_accept(*peer, [this, peer](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) ::fcntl(peer->native_handle(), F_SETFD, FD_CLOEXEC);
    if (!ec && peer_is_allowed(peer->native_handle())) serve(peer);
    accept();
  });
}

void RollCall::serve(std::shared_ptr<local::socket> peer) {
  auto buffer = std::make_shared<asio::streambuf>(kMaxRequest);
  auto timer = std::make_shared<asio::steady_timer>(io_, kRequestTimeout);
  timer->async_wait([peer](boost::system::error_code ec) {
    if (!ec) peer->close(ec);
  });
  asio::async_read_until(
      *peer, *buffer, '\n', [this, peer, buffer, timer](boost::system::error_code ec, std::size_t) {
        timer->cancel();
        // The connection closes once the line is written (the last holder of `peer` goes).
        auto send = [peer](const nlohmann::json& reply) {
          auto text = std::make_shared<std::string>(json_text(reply) + "\n");
          asio::async_write(*peer, asio::buffer(*text),
                            [peer, text](boost::system::error_code, std::size_t) {});
        };
        if (ec == asio::error::not_found) {
          send({{"error", fmt::format("a request is one line of at most {} bytes", kMaxRequest)}});
          return;
        }
        std::string request(asio::buffers_begin(buffer->data()), asio::buffers_end(buffer->data()));
        // A last line without its newline is still a request, answered as any other.
        if (ec && !(ec == asio::error::eof && !request.empty())) return;
        request.resize(std::min(request.size(), request.find('\n')));
        if (request != "stacks") {
          send({{"error", "unknown request: " + escape_control(request)}});
          return;
        }
        job_reply(send, true);
      });
}

void RollCall::job_reply(Answer done, bool for_user) {
  // This node's stacks and the others' are collected at once: the reply waits for both.
  struct Parts {
    std::optional<nlohmann::json> mine;
    bool others_done = false;
    nlohmann::json nodes = nlohmann::json::array();
    nlohmann::json missing = nlohmann::json::array();
    std::string error;
  };
  auto parts = std::make_shared<Parts>();
  auto finish = [done, parts, entry = registration_.entry()] {
    if (!parts->mine || !parts->others_done) return;
    parts->nodes.insert(parts->nodes.begin(), std::move(*parts->mine));
    done({{"run_id", entry.run_id},
          {"job", job_title(entry)},
          {"nodes", std::move(parts->nodes)},
          {"missing", std::move(parts->missing)},
          {"not_asked", std::move(parts->error)}});
  };
  if (workers_().nodes <= 1) {
    parts->others_done = true;
  } else if (!ask_others_) {
    parts->others_done = true;
    parts->error =
        "this agent has no rendezvous to ask the other nodes through: run trainrun --stacks "
        "on each node";
  } else {
    ask_others_([parts, finish](nlohmann::json nodes, nlohmann::json missing, std::string error) {
      parts->nodes = std::move(nodes);
      parts->missing = std::move(missing);
      parts->error = std::move(error);
      parts->others_done = true;
      finish();
    });
  }
  answer(
      [parts, finish](nlohmann::json mine) {
        parts->mine = std::move(mine);
        finish();
      },
      for_user);
}

void RollCall::answer(Answer done, bool for_user) {
  waiting_.push_back(std::move(done));
  user_waiting_ = user_waiting_ || for_user;
  if (waiting_.size() > 1) return;  // a collection runs: its result is this request's too
  collecting_ = workers_();
  if (collecting_.workers.empty()) {
    collected({}, {});
    return;
  }
  std::vector<StackCollector::Target> targets;
  for (const auto& w : collecting_.workers)
    targets.push_back({w.pid, w.diagnosis >= 0 ? ::fcntl(w.diagnosis, F_DUPFD_CLOEXEC, 3) : -1});
  collector_.collect(std::move(targets), [this](StackCollector::Collected c) {
    collected(std::move(c.stacks), std::move(c.recorders));
  });
}

void RollCall::collected(std::vector<stacks::Stack> stacks, std::vector<nlohmann::json> recorders) {
  std::string dumps, error;
  if (collecting_.workers.empty()) {
    error = "no worker is running now (between attempts, or the job is ending)";
  } else {
    std::vector<stacks::RankStack> ranks;
    for (std::size_t i = 0; i < stacks.size(); ++i)
      ranks.push_back({collecting_.workers[i].rank, collecting_.host, stacks[i]});
    const std::string dir = collecting_.run_dir + "/stacks/" + timestamp();
    try {
      std::filesystem::create_directories(dir);
      stacks::write_dumps(dir, ranks);
      dumps = dir;
      if (!user_waiting_) unasked_dumps_.push_back(dir);
    } catch (const std::exception& e) {
      error = fmt::format("the dumps could not be written: {}", e.what());
    }
  }
  const nlohmann::json mine = node_answer(collecting_, stacks, recorders, dumps, error);
  user_waiting_ = false;
  for (auto& done : std::exchange(waiting_, {})) done(mine);
}

}  // namespace trainrun::launch
