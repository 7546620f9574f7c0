#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/rollcall/job_registry.hpp"
#include "trainrun/launch/rollcall/stack_collector.hpp"
#include "trainrun/stacks/collect.hpp"
#include "trainrun/stacks/groups.hpp"
#include "trainrun/stacks/stack.hpp"

namespace trainrun::launch {

struct CollectivesVerdict;  // collectives.hpp, private to the wing

// The workers of this node as the roll call names them.
struct NodeWorkers {
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = 0;
    // The agent's end of its diagnosis channel (workers/diagnosis.hpp), -1: none. Owned by the
    // supervisor: a collection asks on a duplicate of its own.
    int diagnosis = -1;
  };
  int node = -1;
  int nodes = 1;  // the job's nodes in this attempt
  std::string host;
  std::string run_dir;  // the dumps go to <run_dir>/stacks/<time>/
  std::vector<Worker> workers;
  // Seconds since this node's workers last made progress (--hang-timeout); none without it.
  std::optional<double> quiet_s;
};

// One node's answer: {"node", "nodes", "host", "dumps", "ranks": [{"rank", "local_rank", "pid",
// "stack", "collectives"}], "error"}, and "quiet_s" where the node has it; the stacks without the
// tools' raw output, which stays in the dumps; "collectives" (compact_collectives of the rank's
// flight recorder, `recorders[i]`) only for a rank whose recorder was asked for.
nlohmann::json node_answer(const NodeWorkers& node, const std::vector<stacks::Stack>& stacks,
                           const std::vector<nlohmann::json>& recorders, const std::string& dumps,
                           const std::string& error);

// `answer` (a node_answer) as JSON text of at most `max_bytes`: when longer, the stacks of the
// ranks are left out, the last rank first, until it fits, and its "error" says how many (they are
// in the node's dumps). Pure.
std::string fit_node_answer(nlohmann::json answer, std::size_t max_bytes);

// The environment variable that bounds each stack tool's run in the roll call, in seconds.
inline constexpr const char* kStackToolTimeoutVariable = "TRAINRUN_STACK_TOOL_TIMEOUT";

// The stack tools' timeout given `value` of that variable: the collector's default for none or
// an empty one. Pure; throws SetupError for anything but a number of seconds from 0.1 to 600.
std::chrono::milliseconds stack_tool_timeout(const char* value);

// The report `trainrun --stacks` prints for a reply {"run_id", "nodes": [node answers],
// "missing": [{"host", "reason"}], "not_asked"}: the groups, smallest first, the odd rank(s)
// named, the notes of the tools, where the dumps are, the nodes that did not answer, and why the
// others were not asked (`not_asked`, empty when they were). Pure; throws nlohmann::json::exception
// for a reply of another shape. A finding equal to `said` (the line a hang report begins with)
// is not said again.
std::string format_roll_call(const nlohmann::json& reply, const std::string& said = {});

// The ranks' flight recorders of such a reply compared (judge_collectives): those with
// "collectives" in it (Python workers of torch 2.x). Empty when no rank has them. Pure; throws
// nlohmann::json::exception for a reply of another shape.
CollectivesVerdict collectives_verdict(const nlohmann::json& reply);

// `object[key]` where it is an array, else an empty one; never a copy: a reply of a thousand
// nodes is tens of megabytes, and each judgement reads it several times. Pure.
const nlohmann::json& json_list(const nlohmann::json& object, const char* key);

// The ranks of such a reply, by rank, each named by its host ("host (node N)" on a job of several
// nodes). Pure; throws nlohmann::json::exception for a reply of another shape.
std::vector<stacks::RankStack> roll_call_ranks(const nlohmann::json& reply);

// An agent's side of `trainrun --stacks`: its registration in the runtime directory, the Unix
// socket there, and the collection of its workers' stacks off the event loop (StackCollector).
// Requests that come while a collection runs get its result.
class RollCall {
 public:
  using Workers = std::function<NodeWorkers()>;
  using Answer = std::function<void(nlohmann::json)>;
  // Asks the other nodes (a multi-node job); `done` gets their answers, the missing, and why
  // they could not be asked (empty when they were).
  using AskOthers = std::function<void(
      std::function<void(nlohmann::json nodes, nlohmann::json missing, std::string error)>)>;

  // Registers and listens; the tools' timeout from $TRAINRUN_STACK_TOOL_TIMEOUT. Throws
  // SetupError when it cannot, or for a bad timeout (the agent goes on without it).
  RollCall(boost::asio::io_context& io, const std::string& dir, JobEntry entry, Workers workers);
  // Unregisters; a collection still running is stopped, its tools killed.
  ~RollCall();
  RollCall(const RollCall&) = delete;
  RollCall& operator=(const RollCall&) = delete;

  void set_node_rank(int node_rank) { registration_.update(node_rank); }
  // Stops listening: once the job has ended, a pending accept must not keep the event loop
  // (which still delivers the rendezvous' last messages) from running out of work.
  void close();
  void set_ask_others(AskOthers ask) { ask_others_ = std::move(ask); }
  // This node's answer (node_answer), on the event loop. `for_user`: a person asked (the
  // socket's `trainrun --stacks`), not the hang watch or another node.
  void answer(Answer done, bool for_user = false);
  // The whole job's reply, as `trainrun --stacks` gets it (format_roll_call), on the event loop.
  void job_reply(Answer done, bool for_user = false);
  // The dumps written for the hang watch or another node alone, no person among the askers: a
  // job that succeeds keeps none of them (JobLogs::end).
  const std::vector<std::string>& unasked_dumps() const { return unasked_dumps_; }
  // A hang was found: every dump written so far is kept.
  void keep_dumps() { unasked_dumps_.clear(); }

 private:
  void accept();
  void serve(std::shared_ptr<boost::asio::local::stream_protocol::socket> peer);
  void collected(std::vector<stacks::Stack> stacks, std::vector<nlohmann::json> recorders);

  boost::asio::io_context& io_;
  JobRegistration registration_;
  Workers workers_;
  AskOthers ask_others_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  StackCollector collector_;
  NodeWorkers collecting_;
  std::vector<Answer> waiting_;
  bool user_waiting_ = false;  // a person is among `waiting_`
  std::vector<std::string> unasked_dumps_;
};

}  // namespace trainrun::launch
