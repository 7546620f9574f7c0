#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/base/off_loop.hpp"
#include "trainrun/launch/core/log.hpp"

namespace trainrun::launch {

// trainrun's exit status when it stopped a job it found hung (--hang-timeout); docs/cli.md.
inline constexpr int kHangExitCode = 124;
// How far apart the two roll calls that confirm a hang are taken.
inline constexpr std::chrono::seconds kHangConfirmGap{3};

// The fewest seconds any node of a roll-call reply (format_roll_call's shape) says its workers
// have been quiet ("quiet_s"); nullopt when no node says. Pure.
std::optional<double> job_quiet_s(const nlohmann::json& reply);

// The ranks in both replies whose main thread is somewhere else in the second: another function,
// file or line (stacks::signature with lines). Pure.
std::vector<int> moved_ranks(const nlohmann::json& first, const nlohmann::json& second);

// What the watch makes of one roll call.
struct HangVerdict {
  enum class Kind { progress, quiet, hung };
  Kind kind = Kind::progress;
  double recheck_s = 0;      // progress: when this node looks again, from now
  std::string why;           // progress: what moved, for a debug line
  bool stack_moved = false;  // progress seen in a stack, not in a node's quiet time
  bool paused = false;       // progress: a rank waits for a person (`why` says who and where)
};

// The least share of one CPU each rank must have used between the two roll calls for a quiet
// job to be computing rather than hung (where no collective waits).
inline constexpr double kComputingCpuShare = 0.1;

// The ranks of a reply that wait for a person: a main thread blocked reading a terminal, or in
// pdb. "rank 0 waits for input at /dev/pts/3 (in pdb)"; empty when none does. Pure.
std::string waiting_for_input(const nlohmann::json& reply);

// Whether any rank's flight recorder shows a collective (or a point-to-point operation) started
// and not completed. Pure.
bool collective_waiting(const nlohmann::json& reply);

// Where no collective waits and every rank used at least kComputingCpuShare of a CPU from the
// first reply to the second (each rank's CPU time and its time of reading, by rank): "ranks 0-1
// used 98-100% of a CPU"; empty otherwise, and where a rank's CPU time is unknown. Pure.
std::string computing(const nlohmann::json& first, const nlohmann::json& second);

// After the first roll call: `quiet` when every node that says has been quiet for `timeout_s`
// (the second roll call follows), else progress, looked at again when the least quiet node
// reaches the timeout; paused progress, looked at again a timeout later, while a rank waits for
// input (waiting_for_input). A reply without every node (one not asked: too many roll calls at
// once; one that did not answer) is progress, looked at again kHangConfirmGap later. Pure.
HangVerdict judge_first(const nlohmann::json& reply, double timeout_s);
// After the second, kHangConfirmGap later: hung when every node is still quiet, no rank waits for
// input, no rank's stack moved, and the job is not computing (a collective waits, or a rank used
// less CPU than kComputingCpuShare); a reply without ranks (the workers ended) is not a hang.
// Pure.
HangVerdict judge_second(const nlohmann::json& first, const nlohmann::json& second,
                         double timeout_s);

// A confirmed hang, as the agent reports it.
struct HangReport {
  std::string line;     // "rank 2 on node1 is in stuck_here() (train.py:41) while ..."
  std::string text;     // the roll call as trainrun --stacks prints it
  nlohmann::json json;  // {"quiet_s", "line", "suspects": [{rank, host, where}], "groups"}
  // The first suspect (else the first rank of the smallest group): the failure's rank.
  int rank = -1;
  int local_rank = -1;
  pid_t pid = 0;
  std::string host;
};
// The report of a reply that confirmed a hang after `quiet_s` seconds without progress. Pure.
HangReport hang_report(const nlohmann::json& reply, double quiet_s);

// --hang-timeout on one node: when this node's workers have made no progress (output, a
// heartbeat file touched, a file-timer request) for the timeout, takes the job's roll call; when
// every node has been as quiet, takes it again kHangConfirmGap later, and a job where still no
// node made progress and no rank's stack moved is hung. Between attempts, and without progress
// to wait for, it sleeps: one timer, at most one wake-up a second. The replies are judged, and the
// report written, off the loop (a thousand nodes' reply takes seconds to read, which the job's
// store and the rendezvous' heartbeats on the loop do not wait for).
class HangWatch {
 public:
  using Clock = std::chrono::steady_clock;
  using Reply = std::function<void(nlohmann::json)>;
  struct Hooks {
    std::function<void(Reply)> roll_call;         // the job's reply (RollCall::job_reply)
    std::function<void(const HangReport&)> hung;  // confirmed
    std::function<void(const std::string&, Level)> say;
  };

  HangWatch(boost::asio::io_context& io, double timeout_s, std::string heartbeat_file, Hooks hooks);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // A worker wrote output or asked the file timer: a clock read, no wake-up.
  void progress() { last_progress_ = Clock::now(); }
  // A group started (counts as progress) / none runs any more.
  void start();
  void stop();
  // Seconds since this node's last progress, the heartbeat file's time included.
  double quiet_s() const;
  // This node's workers have been quiet for the timeout, or their hang was confirmed: a stop
  // for a failure then begins with SIGABRT (faulthandler's tracebacks).
  bool suspected() const;
  double timeout_s() const { return timeout_s_; }

 private:
  enum class Stage { idle, waiting, first, gap, second };
  void arm(Clock::duration after);
  void check();
  void sample();
  void sampled(nlohmann::json reply);
  struct Judged;
  void judged(Judged judged, std::shared_ptr<const nlohmann::json> reply);

  boost::asio::steady_timer timer_;
  double timeout_s_;
  std::string heartbeat_file_;
  Hooks hooks_;
  Clock::time_point last_progress_ = Clock::now();
  Stage stage_ = Stage::idle;
  std::shared_ptr<const nlohmann::json> first_;
  unsigned generation_ = 0;  // a roll call's reply from before stop() is dropped
  bool confirmed_ = false;
  bool pause_said_ = false;  // said once a pause, until progress
  // Last: destroyed first, so that a judgement running ends before what it reads goes.
  OffLoop off_loop_;
};

}  // namespace trainrun::launch
