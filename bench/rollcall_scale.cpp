// The hang watch's verdict at scale: N simulated nodes of 8 ranks each, one rank behind in a
// collective, from the ask to the report that names it. The real rendezvous server relays the
// roll call (stacks_request, a stacks_ask to every node, their stacks_answer back); the asking
// agent is node 0, with the server on its loop as in the hosting agent; the other nodes are
// protocol clients in a child process, each answering with its node's answer as an agent sends
// it (node_answer of py-spy-like stacks and flight-recorder dumps, fit_node_answer), made before
// the ask: collecting the stacks is each node's own work, in parallel on real nodes (measured in
// bench/hang_watch.py). The verdict is the real one: judge_first on the first roll call,
// judge_second on a second (the watch takes it kHangConfirmGap later; here at once, the gap is a
// constant), hang_report on it. Prints one JSON object: the times and the report's size.
//
//   rollcall_scale [--nodes 1024] [--ranks-per-node 8] [--print-report]

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rendezvous/round_counts.hpp"
#include "trainrun/launch/rollcall/hang_watch.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/server.hpp"

using namespace trainrun::rendezvous;
using namespace trainrun::launch;
namespace asio = boost::asio;
namespace stacks = trainrun::stacks;
using SteadyClock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

constexpr double kTimeout = 600;  // --hang-timeout; every node has been quiet longer
constexpr int kSeq = 42;          // the collective every rank but one waits in

struct Job {
  int nodes = 1024;
  int ranks_per_node = 8;
  int behind = -1;  // the rank that never entered collective #kSeq
  std::string host(int node) const { return fmt::format("gpu-node-{:05d}", node); }
};

double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

std::string agent_address(int i) {
  return fmt::format("127.{}.{}.{}", 1 + i / 62500, (i / 250) % 250 + 1, i % 250 + 1);
}

stacks::Frame py(const std::string& function, const std::string& file, int line) {
  return {function, file, line, "", stacks::FrameKind::python};
}

// A training loop's main thread as py-spy gives it: in an all_reduce of the backward pass, or
// (the rank behind) in its data loading. Three more threads as torch starts them.
stacks::Stack stack_of(int pid, bool behind) {
  const std::string torch = "/opt/venv/lib/python3.11/site-packages/torch/";
  stacks::Stack s;
  s.pid = pid;
  s.tool = "py-spy";
  s.cpu_s = 1234.5;
  s.read_at = 5000;
  stacks::Thread main;
  main.tid = pid;
  main.name = "python";
  main.state = "S (sleeping)";
  main.syscall = "futex";
  if (behind) {
    main.frames = {py("_next_data", torch + "utils/data/dataloader.py", 1328),
                   py("__next__", torch + "utils/data/dataloader.py", 631),
                   py("load_batch", "/work/train/data.py", 88)};
  } else {
    main.frames = {py("all_reduce", torch + "distributed/distributed_c10d.py", 2501),
                   py("wrapper", torch + "distributed/c10d_logger.py", 81),
                   py("_allreduce_fut", torch + "distributed/algorithms/ddp_comm_hooks.py", 34),
                   py("backward", torch + "autograd/__init__.py", 266),
                   py("backward", torch + "_tensor.py", 581),
                   py("train_step", "/work/train/step.py", 57)};
  }
  for (const auto& f :
       {py("train_epoch", "/work/train/loop.py", 120), py("fit", "/work/train/loop.py", 40),
        py("main", "/work/train/train.py", 211), py("<module>", "/work/train/train.py", 230)})
    main.frames.push_back(f);
  s.threads.push_back(main);
  for (int t = 1; t <= 3; ++t) {
    stacks::Thread other;
    other.tid = pid + t;
    other.name = t == 1 ? "pt_autograd_0" : t == 2 ? "pt_nccl_watchdg" : "pin_memory";
    other.state = "S (sleeping)";
    other.syscall = "futex";
    other.frames = {py("wait", "/usr/lib/python3.11/threading.py", 327),
                    py("get", "/usr/lib/python3.11/queue.py", 180),
                    py("_run", torch + "utils/data/_utils/pin_memory.py", 49),
                    py("run", "/usr/lib/python3.11/threading.py", 982),
                    py("_bootstrap_inner", "/usr/lib/python3.11/threading.py", 1045)};
    s.threads.push_back(other);
  }
  return s;
}

json entry(const std::string& group, const std::string& desc, int seq, const std::string& op,
           bool pending) {
  return {{"process_group", {group, desc}},
          {"collective_seq_id", seq},
          {"p2p_seq_id", 0},
          {"is_p2p", false},
          {"profiling_name", "nccl:" + op},
          {"input_sizes", {{25557032}}},
          {"output_sizes", {{25557032}}},
          {"input_dtypes", {"BFloat16"}},
          {"output_dtypes", {"BFloat16"}},
          {"state", pending ? "started" : "completed"},
          {"retired", !pending}};
}

// A rank's flight recorder: the default group's last all_reduces, and its node's tensor-parallel
// group (a group of its own per node: a thousand groups at a thousand nodes).
json recorder_of(const Job& job, int rank) {
  const int node = rank / job.ranks_per_node;
  const std::string tp = std::to_string(node + 1);
  json entries = json::array();
  for (int seq = 1; seq <= 6; ++seq)
    entries.push_back(entry(tp, "tp", 100 + seq, "all_gather", false));
  const int last = rank == job.behind ? kSeq - 1 : kSeq;
  for (int seq = kSeq - 5; seq <= last; ++seq)
    entries.push_back(entry("0", "default_pg", seq, "all_reduce", seq == kSeq));
  return {{"version", "2.10"}, {"entries", std::move(entries)}};
}

std::string answer_of(const Job& job, int node) {
  NodeWorkers workers;
  workers.node = node;
  workers.nodes = job.nodes;
  workers.host = job.host(node);
  workers.run_dir = "/var/log/trainrun/job-42";
  workers.quiet_s = kTimeout + 30;
  std::vector<stacks::Stack> rank_stacks;
  std::vector<json> recorders;
  for (int l = 0; l < job.ranks_per_node; ++l) {
    const int rank = node * job.ranks_per_node + l;
    const int pid = 40000 + l * 10;
    workers.workers.push_back({rank, l, pid, -1});
    rank_stacks.push_back(stack_of(pid, rank == job.behind));
    recorders.push_back(recorder_of(job, rank));
  }
  return fit_node_answer(node_answer(workers, rank_stacks, recorders,
                                     workers.run_dir + "/stacks/20260101-120000.000", ""),
                         kMaxStacksAnswerBytes);
}

ServerOptions server_options(int nodes) {
  ServerOptions so;
  so.credentials.run_id = "bench";
  so.round.min_nodes = so.round.max_nodes = nodes;
  so.endpoint = "127.0.0.1";
  so.limits.max_pending = static_cast<std::size_t>(nodes) + 16;
  so.limits.max_admitted = static_cast<std::size_t>(nodes) + 16;
  return so;
}

ClientOptions client_options(int i, int port) {
  ClientOptions co;
  co.endpoint = HostPort{agent_address(i), port};
  co.credentials.run_id = "bench";
  co.deadline = std::chrono::seconds(120);
  return co;
}

NodeDescriptor node_of(const Job& job, int i) {
  NodeDescriptor node;
  node.host = job.host(i);
  node.pid = 1000 + i;
  node.nproc = job.ranks_per_node;
  node.master_port = 29500;
  node.at_endpoint = i == 0;
  return node;
}

// Nodes 1..N-1, each answering every ask with its answer, until the parent closes `quit`.
void run_nodes(const Job& job, int port, int quit) {
  std::vector<std::string> answers(static_cast<std::size_t>(job.nodes));
  for (int i = 1; i < job.nodes; ++i) answers[static_cast<std::size_t>(i)] = answer_of(job, i);
  asio::io_context io;
  bench::RoundCounts counts;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 1; i < job.nodes; ++i) {
    ClientEvents e = counts.events("rollcall_scale: a node stopped");
    const std::string& answer = answers[static_cast<std::size_t>(i)];
    e.on_stacks_ask = [&answer](std::string, std::function<void(std::string)> reply) {
      reply(answer);
    };
    clients.push_back(std::make_unique<RendezvousClient>(io, client_options(i, port), e));
    clients.back()->start();
    clients.back()->join(node_of(job, i));
  }
  asio::posix::stream_descriptor parent(io, quit);
  char byte = 0;
  parent.async_read_some(asio::buffer(&byte, 1),
                         [&](boost::system::error_code, std::size_t) { io.stop(); });
  io.run();
  _exit(0);
}

// The asking agent's side of one roll call (AgentRendezvous::ask_others, RollCall::job_reply):
// the others' answers parsed, its own first.
json roll_call(asio::io_context& io, RendezvousClient& client, const std::string& own) {
  std::optional<json> reply;
  client.request_stacks(
      [&](std::vector<std::string> answers, std::vector<StacksMissing> missing, std::string error) {
        json nodes = json::array(), absent = json::array();
        nodes.push_back(json::parse(own));
        for (const auto& a : answers) nodes.push_back(json::parse(a));
        for (const auto& m : missing) absent.push_back({{"host", m.host}, {"reason", m.reason}});
        reply = json{{"run_id", "bench"},
                     {"nodes", std::move(nodes)},
                     {"missing", std::move(absent)},
                     {"not_asked", std::move(error)}};
      });
  while (!reply) io.run_one();
  return *reply;
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

int main(int argc, char** argv) {
  Job job;
  bool print_report = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--nodes" && i + 1 < argc) {
      job.nodes = std::stoi(argv[++i]);
    } else if (arg == "--ranks-per-node" && i + 1 < argc) {
      job.ranks_per_node = std::stoi(argv[++i]);
    } else if (arg == "--print-report") {
      print_report = true;
    } else {
      std::fprintf(stderr,
                   "usage: rollcall_scale [--nodes 1024] [--ranks-per-node 8] [--print-report]\n");
      return 2;
    }
  }
  if (job.nodes < 2 || job.ranks_per_node < 1) {
    std::fprintf(stderr, "rollcall_scale: --nodes must be at least 2, --ranks-per-node 1\n");
    return 2;
  }
  // A rank in the middle of a node in the middle of the job.
  job.behind = (job.nodes / 2 + 7) % job.nodes * job.ranks_per_node + job.ranks_per_node / 2;
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  const auto want = static_cast<rlim_t>(job.nodes + 256);
  if (lim.rlim_cur < want) {
    rlimit raised{want, std::max(lim.rlim_max, want)};
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      std::fprintf(stderr, "rollcall_scale: %d nodes need %llu file descriptors (ulimit -n)\n",
                   job.nodes, static_cast<unsigned long long>(want));
      return 1;
    }
  }

  asio::io_context io;
  RendezvousServer server(io, server_options(job.nodes));
  server.listen(asio::ip::tcp::endpoint(asio::ip::address_v4::any(), 0));
  const int port = server.local_endpoint().port();
  int quit[2];
  if (::pipe(quit) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(quit[1]);
    run_nodes(job, port, quit[0]);
  }
  ::close(quit[0]);

  const std::string own = answer_of(job, 0);
  bench::RoundCounts counts;
  RendezvousClient asker(io, client_options(0, port), counts.events("rollcall_scale: node 0"));
  asker.start();
  asker.join(node_of(job, 0));
  // Every node is admitted and in the round: as in a running job.
  const auto limit = SteadyClock::now() + std::chrono::seconds(300);
  while (counts.assigned == 0 && counts.failed == 0 && SteadyClock::now() < limit)
    io.run_one_for(std::chrono::seconds(1));

  json result = {{"nodes", job.nodes}, {"ranks", job.nodes * job.ranks_per_node}, {"ok", false}};
  if (counts.assigned == 1) {
    auto t = SteadyClock::now();
    const json first = roll_call(io, asker, own);
    const double first_s = since(t);
    t = SteadyClock::now();
    const HangVerdict quiet = judge_first(first, kTimeout);
    const double judge_first_s = since(t);
    t = SteadyClock::now();
    const json second = roll_call(io, asker, own);
    const double second_s = since(t);
    t = SteadyClock::now();
    const HangVerdict hung = judge_second(first, second, kTimeout);
    const double judge_second_s = since(t);
    t = SteadyClock::now();
    const HangReport report = hang_report(second, kTimeout + 30);
    const double report_s = since(t);
    std::size_t answer_bytes = 0;
    for (const auto& node : second.at("nodes")) answer_bytes += node.dump().size();
    const int behind_node = job.behind / job.ranks_per_node;
    const bool named = report.rank == job.behind &&
                       report.line.find(job.host(behind_node)) != std::string::npos &&
                       report.line.find(fmt::format("#{}", kSeq)) != std::string::npos &&
                       report.line.find("all_reduce") != std::string::npos &&
                       report.line.find("group 0") != std::string::npos;
    result["roll_call_s"] = {first_s, second_s};
    result["judge_s"] = judge_first_s + judge_second_s;
    result["report_s"] = report_s;
    result["ask_to_verdict_s"] = first_s + judge_first_s + second_s + judge_second_s + report_s;
    result["confirm_gap_s"] = kHangConfirmGap.count();
    // The verdict's longest piece (judge_second and hang_report run back to back), which the
    // watch runs on a thread of its own: the agent's loop does not wait for it.
    result["longest_stall_s"] = std::max(judge_first_s, judge_second_s + report_s);
    result["answers_bytes"] = answer_bytes;
    result["missing"] = second.at("missing").size();
    result["first_verdict"] = quiet.kind == HangVerdict::Kind::quiet ? "quiet" : quiet.why;
    result["second_verdict"] = hung.kind == HangVerdict::Kind::hung ? "hung" : hung.why;
    result["line"] = report.line;
    result["report_bytes"] = report.text.size();
    result["report_lines"] = count_lines(report.text);
    result["report_json_bytes"] = report.json.dump().size();
    result["named"] = named;
    result["ok"] = named && quiet.kind == HangVerdict::Kind::quiet &&
                   hung.kind == HangVerdict::Kind::hung && second.at("missing").empty();
    if (print_report) std::fputs(report.text.c_str(), stderr);
  }
  ::close(quit[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::puts(result.dump().c_str());
  return result["ok"].get<bool>() ? 0 : 1;
}
