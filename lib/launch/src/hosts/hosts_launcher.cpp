#include "trainrun/launch/hosts/hosts_launcher.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "host_output.hpp"
#include "hosts_outcome.hpp"
#include "hosts_plan.hpp"
#include "ssh_process.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/base/reaper.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/launch/workers/python_exec.hpp"

namespace trainrun::launch {

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// How long --dedup holds a line to find the same one from other ranks.
constexpr auto kDedupWindow = std::chrono::milliseconds(1000);
// After one agent ends with a failure, how long the others have to end on their own (the
// rendezvous stops them) before the launcher stops them.
constexpr auto kFailureGrace = std::chrono::seconds(10);

std::string own_executable() {
  std::string path = self_exe();
  if (path.empty()) throw SetupError("cannot find trainrun's own path (/proc/self/exe)");
  return path;
}

std::string working_directory() {
  char buffer[PATH_MAX];
  if (!::getcwd(buffer, sizeof(buffer)))
    throw SetupError(fmt::format("cannot read the working directory: {}", std::strerror(errno)));
  return buffer;
}

// One host's ssh, its launcher's ends of ssh's standard streams on the loop, and how it ended.
struct Remote {
  explicit Remote(asio::io_context& io) : in(io), out(io), err(io) {}
  pid_t pid = -1;
  asio::posix::stream_descriptor in, out, err;
  std::optional<int> status;  // exit status once reaped (the shell's code for a killed ssh)
  int killed_by = 0;          // the signal that ended ssh itself, if one did
};

std::vector<std::string> names_of(const std::vector<PlannedHost>& hosts) {
  std::vector<std::string> names;
  for (const PlannedHost& h : hosts) names.push_back(h.name);
  return names;
}

// The launcher's side of the job on one event loop, as the agent's: each ssh's output, SIGCHLD
// and the stop signals (signal_set), the heartbeat, the --dedup window and the graces (timers).
class HostsRun {
 public:
  HostsRun(const HostsOptions& options, std::vector<PlannedHost> hosts, std::string self)
      : options_(options),
        hosts_(std::move(hosts)),
        self_(std::move(self)),
        output_(options.dedup, kDedupWindow),
        outcome_(names_of(hosts_), self_) {}

  int run(const std::map<std::string, std::string>& forwarded,
          const std::map<std::string, std::string>& env) {
    // Before the first ssh starts: an ssh that ends at once is reaped on the loop, a signal that
    // comes while they start is taken there.
    watch_signals();
    heartbeat_.expires_after(std::chrono::seconds(kHeartbeatSeconds));
    const std::string cwd = working_directory();
    const std::string token = random_hex(64);
    // The agents run the interpreter chosen here, where it exists on their host.
    const std::string python = handed_python(env, self_, cwd);
    say(fmt::format("starting {} agents over ssh: {}", hosts_.size(), host_names()));
    remotes_.reserve(hosts_.size());
    for (size_t i = 0; i < hosts_.size(); ++i) {
      Handover handover{token, forwarded, python};
      if (!hosts_[i].devices.empty()) {
        std::string list;
        for (int d : hosts_[i].devices) list += (list.empty() ? "" : ",") + std::to_string(d);
        handover.env["CUDA_VISIBLE_DEVICES"] = list;
      }
      const std::string command =
          remote_command(cwd, self_, kVersion, agent_arguments(options_, hosts_, i));
      output_.add_host(hosts_[i].name);
      const SshProcess ssh =
          start_ssh(ssh_command(options_.ssh, hosts_[i].name, command), encode_handover(handover));
      Remote& remote = remotes_.emplace_back(io_);
      remote.pid = ssh.pid;
      remote.in.assign(ssh.in);
      remote.out.assign(ssh.out);
      remote.err.assign(ssh.err);
    }
    for (size_t i = 0; i < remotes_.size(); ++i)
      for (int stream : {1, 2}) wait_for_output(i, stream);
    wait_for_heartbeat();
    if (running()) io_.run();
    emit(output_.flush_all());
    return finish();
  }

 private:
  std::string host_names() const {
    std::string out;
    for (size_t i = 0; i < hosts_.size(); ++i)
      out += fmt::format("{}{} (node rank {})", i ? ", " : "", hosts_[i].name, i);
    return out;
  }

  void watch_signals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) signals_.add(sig);
    ::signal(SIGPIPE, SIG_IGN);
    wait_for_signal();
  }

  void wait_for_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD)
        reap();
      else
        stop_signal(sig);
      wait_for_signal();
    });
  }

  bool running() const {
    for (const Remote& r : remotes_)
      if (!r.status || r.out.is_open() || r.err.is_open()) return true;
    return false;
  }

  // Every ssh has been reaped and its output read to the end.
  void end_if_over() {
    if (running()) return;
    signals_.cancel();
    for (asio::steady_timer* t : {&heartbeat_, &dedup_, &failure_grace_, &kill_grace_}) t->cancel();
    io_.stop();
  }

  void stop_signal(int sig) {
    if (!interrupted_) {
      interrupted_ = sig;
      output_.stopping_every_host();
      stop_all(fmt::format("received {}: stopping every host ({:g} s grace)", signal_name(sig),
                           options_.shutdown_timeout));
    } else {
      say(fmt::format("received {} again; cutting the ssh connections (each agent still stops "
                      "its workers)",
                      signal_name(sig)),
          Level::warning);
      kill_ssh(SIGTERM);
    }
  }

  // Closing an agent's standard input stops it (remote_agent.hpp), on every host at once; with
  // the signal the launcher received first, so that each agent stops as for that signal.
  void stop_all(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    say(why);
    for (Remote& r : remotes_) {
      if (!r.in.is_open()) continue;
      if (interrupted_) send(r, stop_line(interrupted_));
      close(r.in);
    }
    kill_grace_.expires_after(std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options_.shutdown_timeout)) +
                              std::chrono::seconds(15));
    kill_grace_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      say("agents still running after the grace; cutting their ssh connections", Level::warning);
      kill_ssh(SIGKILL);
    });
  }

  // A line to an agent's standard input, written now or not at all: the loop never waits on an
  // ssh that stopped reading, and a line held back would hold back the close that stops the
  // agent. A pipe that is full already holds a heartbeat; one whose ssh has ended takes nothing
  // (SIGPIPE is ignored). The lines are shorter than PIPE_BUF: none is written in part.
  static void send(Remote& r, const std::string& line) {
    ssize_t n;
    do n = ::write(r.in.native_handle(), line.data(), line.size());
    while (n < 0 && errno == EINTR);
  }

  // Every agent hears from the launcher within its timeout (hosts_plan.hpp).
  void wait_for_heartbeat() {
    heartbeat_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      for (Remote& r : remotes_)
        if (r.in.is_open()) send(r, "\n");
      heartbeat_.expires_after(std::chrono::seconds(kHeartbeatSeconds));
      wait_for_heartbeat();
    });
  }

  void kill_ssh(int sig) {
    for (Remote& r : remotes_)
      if (!r.status) ::kill(-r.pid, sig);
  }

  static asio::posix::stream_descriptor& stream_of(Remote& r, int stream) {
    return stream == 1 ? r.out : r.err;
  }

  static void close(asio::posix::stream_descriptor& d) {
    boost::system::error_code ignored;
    d.close(ignored);
  }

  // Readiness, then the reads here (as the file timer's FIFO): no bytes are in flight in a read
  // of asio's when an ssh is reaped, so that reap() takes all it left before saying how it ended.
  void wait_for_output(size_t i, int stream) {
    stream_of(remotes_[i], stream)
        .async_wait(asio::posix::stream_descriptor::wait_read,
                    [this, i, stream](boost::system::error_code ec) {
                      auto& d = stream_of(remotes_[i], stream);
                      if (ec || !d.is_open()) return;
                      if (drain(i, stream)) wait_for_output(i, stream);
                      end_if_over();
                    });
  }

  // Reads what host `i`'s `stream` holds now; at its end, closes it. Whether it is still open.
  bool drain(size_t i, int stream) {
    auto& d = stream_of(remotes_[i], stream);
    if (!d.is_open()) return false;
    for (;;) {
      const ssize_t n = ::read(d.native_handle(), buffer_, sizeof(buffer_));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) {
        emit(output_.close(i, stream, Clock::now()));
        emit_due();
        close(d);
        return false;
      }
      emit(
          output_.feed(i, stream, std::string_view(buffer_, static_cast<size_t>(n)), Clock::now()));
      emit_due();
    }
  }

  static void emit(const std::vector<LineDedup::Out>& lines) {
    for (const auto& l : lines) {
      const std::string text = l.line + "\n";
      write_all(l.stream, text.data(), text.size());
    }
  }

  // --dedup: the held lines whose window has ended, and a timer for the next one.
  void emit_due() {
    emit(output_.due(Clock::now()));
    const auto next = output_.next_due();
    if (!next || next == dedup_due_) return;
    dedup_due_ = next;
    dedup_.expires_at(*next);
    dedup_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      dedup_due_.reset();
      emit_due();
    });
  }

  // SIGCHLD: every ssh that has ended (one signal may stand for several).
  void reap() {
    for (size_t i = 0; i < remotes_.size(); ++i) {
      Remote& r = remotes_[i];
      if (r.status) continue;
      // Its starter's to reap (this loop's), through the one reaper.
      const reaper::Reaped reaped = reaper::try_reap(r.pid);
      if (reaped.state != reaper::Reaped::State::ended) continue;
      const ExitStatus end = reaped.status;
      r.status = end.shell_code();
      r.killed_by = end.signal;
      // What the agent still wrote stays readable; its standard input is of no use any more.
      close(r.in);
      // Its output first: its last error line may be why it ended.
      for (int stream : {1, 2}) drain(i, stream);
      ended(i);
    }
    end_if_over();
  }

  void ended(size_t i) {
    const Remote& r = remotes_[i];
    const HostVerdict v =
        outcome_.ended(i, HostEnd{*r.status, r.killed_by, output_.ready(i), output_.last_error(i)},
                       stopping_, interrupted_ != 0);
    for (const auto& [line, level] : v.lines) say(line, level);
    if (v.stop) stop_all(*v.stop);
    if (v.failure_grace) {
      failure_grace_.expires_after(kFailureGrace);
      failure_grace_.async_wait([this](boost::system::error_code ec) {
        if (!ec) stop_all("the other agents did not end after the failure; stopping them");
      });
    }
  }

  int finish() {
    std::vector<bool> ready;
    for (size_t i = 0; i < remotes_.size(); ++i) ready.push_back(output_.ready(i));
    const auto [line, level] = outcome_.summary(ready);
    say(line, level);
    return outcome_.exit_code(interrupted_);
  }

  const HostsOptions& options_;
  std::vector<PlannedHost> hosts_;
  std::string self_;  // this trainrun, as each host is to run it
  HostOutput output_;
  HostsOutcome outcome_;
  asio::io_context io_;
  asio::signal_set signals_{io_};
  asio::steady_timer heartbeat_{io_}, dedup_{io_}, failure_grace_{io_}, kill_grace_{io_};
  std::optional<Clock::time_point> dedup_due_;  // when the dedup timer fires, while it waits
  std::vector<Remote> remotes_;  // after io_: their descriptors are closed before it goes
  char buffer_[65536];
  int interrupted_ = 0;
  bool stopping_ = false;
};

std::vector<HostEntry> read_host_list(const HostsOptions& options) {
  if (!options.hosts.empty()) return parse_host_option(options.hosts, "--hosts=" + options.hosts);
  const auto text = read_file(options.hostfile);
  if (!text)
    throw UsageError(
        fmt::format("--hostfile={}: cannot read it: {}", options.hostfile, std::strerror(errno)));
  return parse_host_file(*text, options.hostfile);
}

// ~/.trainrun_env, then ./.trainrun_env (the working directory's wins), as DeepSpeed reads its
// .deepspeed_env.
std::vector<std::map<std::string, std::string>> env_files(
    const std::map<std::string, std::string>& env) {
  std::vector<std::map<std::string, std::string>> out;
  std::vector<std::string> paths;
  if (auto home = env.find("HOME"); home != env.end() && !home->second.empty())
    paths.push_back(home->second + "/" + kEnvFileName);
  paths.push_back(kEnvFileName);
  for (const std::string& path : paths)
    if (auto text = read_file(path)) out.push_back(parse_env_file(*text, path));
  return out;
}

// Where the first host's agent is to host the rendezvous, by the agents' own rule; nothing with
// etcd (served elsewhere), or a layout the agents refuse themselves.
std::optional<rendezvous::HostPort> hosted_rendezvous(LaunchConfig config,
                                                      const HostsOptions& options,
                                                      const std::vector<PlannedHost>& hosts) {
  if (is_etcd(config.rdzv_backend) || hosts.empty()) return std::nullopt;
  if (!options.master_addr_given) config.master_addr = host_address(hosts.front().name);
  config.min_nodes = config.max_nodes = static_cast<int>(hosts.size());
  config.node_rank = 0;
  try {
    return rendezvous_options(config, {}).endpoint;
  } catch (const LaunchError&) {
    return std::nullopt;
  }
}

// Whether something accepts a connection at `at` within a few seconds. No answer (a firewall, a
// name only the hosts resolve) proves nothing: the agents find out themselves.
bool answers(const rendezvous::HostPort& at) {
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  asio::ip::tcp::socket socket(io);
  // Resolved here, not on asio's resolver thread: nothing else runs yet.
  boost::system::error_code ec;
  const auto addresses = resolver.resolve(at.host, std::to_string(at.port), ec);
  if (ec) return false;
  bool connected = false;
  asio::async_connect(socket, addresses, [&](auto error, auto) { connected = !error; });
  io.run_for(std::chrono::seconds(3));
  return connected;
}

}  // namespace

int run_hosts(const HostsOptions& options, const LaunchConfig& config,
              const std::map<std::string, std::string>& env) {
  std::vector<PlannedHost> hosts =
      filter_hosts(read_host_list(options), options.include, options.exclude);
  // The first host's agent could not host the rendezvous: it would join the one already there
  // and be refused for its token.
  if (auto at = hosted_rendezvous(config, options, hosts); at && answers(*at))
    throw SetupError(fmt::format(
        "another job's rendezvous already listens on port {} on {}: give this job another "
        "--master-port (the rendezvous takes MASTER_PORT + 1) or --rdzv-conf rdzv_port=N, or "
        "wait for that job to end",
        at->port, at->host));
  const auto forwarded = forwarded_environment(env_files(env), options.forward_env, env);
  HostsRun run(options, std::move(hosts), own_executable());
  return run.run(forwarded, env);
}

}  // namespace trainrun::launch
