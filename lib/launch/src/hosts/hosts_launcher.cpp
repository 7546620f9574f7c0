#include "trainrun/launch/hosts/hosts_launcher.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "trainrun/base/process.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/hosts/host_output.hpp"
#include "trainrun/launch/hosts/hosts_outcome.hpp"
#include "trainrun/launch/hosts/hosts_plan.hpp"
#include "trainrun/launch/hosts/ssh_process.hpp"
#include "trainrun/launch/rendezvous/rendezvous_options.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/launch/workers/failure.hpp"
#include "trainrun/launch/workers/python_exec.hpp"

namespace trainrun::launch {

namespace {

using Clock = std::chrono::steady_clock;

// How long --dedup holds a line to find the same one from other ranks.
constexpr auto kDedupWindow = std::chrono::milliseconds(1000);
// After one agent ends with a failure, how long the others have to end on their own (the
// rendezvous stops them) before the launcher stops them.
constexpr auto kFailureGrace = std::chrono::seconds(10);

volatile sig_atomic_t g_signal_count = 0;
volatile sig_atomic_t g_last_signal = 0;
void on_stop_signal(int sig) {
  g_last_signal = sig;
  g_signal_count = g_signal_count + 1;
}
void on_child(int) {}

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

// One host's ssh and how it ended.
struct Remote : SshProcess {
  std::optional<int> status;  // exit status once reaped (the shell's code for a killed ssh)
  int killed_by = 0;          // the signal that ended ssh itself, if one did
};

std::vector<std::string> names_of(const std::vector<PlannedHost>& hosts) {
  std::vector<std::string> names;
  for (const PlannedHost& h : hosts) names.push_back(h.name);
  return names;
}

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
    install_signals();
    const std::string cwd = working_directory();
    const std::string token = random_hex(64);
    // The agents run the interpreter chosen here, where it exists on their host.
    const std::string python = handed_python(env, self_, cwd);
    say(fmt::format("starting {} agents over ssh: {}", hosts_.size(), host_names()));
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
      Remote remote;
      static_cast<SshProcess&>(remote) =
          start_ssh(ssh_command(options_.ssh, hosts_[i].name, command), encode_handover(handover));
      remotes_.push_back(std::move(remote));
    }
    loop();
    return finish();
  }

 private:
  std::string host_names() const {
    std::string out;
    for (size_t i = 0; i < hosts_.size(); ++i)
      out += fmt::format("{}{} (node rank {})", i ? ", " : "", hosts_[i].name, i);
    return out;
  }

  void install_signals() {
    sigset_t block;
    sigemptyset(&block);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      ::sigaction(sig, &sa, nullptr);
      sigaddset(&block, sig);
    }
    sa.sa_handler = on_child;
    ::sigaction(SIGCHLD, &sa, nullptr);
    sigaddset(&block, SIGCHLD);
    ::signal(SIGPIPE, SIG_IGN);
    // Signals arrive only inside ppoll, which waits with the original mask.
    ::sigprocmask(SIG_BLOCK, &block, &wait_mask_);
    sigdelset(&wait_mask_, SIGINT);
    sigdelset(&wait_mask_, SIGTERM);
    sigdelset(&wait_mask_, SIGHUP);
    sigdelset(&wait_mask_, SIGQUIT);
    sigdelset(&wait_mask_, SIGCHLD);
  }

  bool running() const {
    for (const Remote& r : remotes_)
      if (!r.status || r.out >= 0 || r.err >= 0) return true;
    return false;
  }

  void loop() {
    while (running()) {
      std::vector<pollfd> fds;
      std::vector<std::pair<size_t, int>> which;
      for (size_t i = 0; i < remotes_.size(); ++i) {
        for (int stream : {1, 2}) {
          const int fd = stream == 1 ? remotes_[i].out : remotes_[i].err;
          if (fd < 0) continue;
          fds.push_back({fd, POLLIN, 0});
          which.emplace_back(i, stream);
        }
      }
      timespec wait = timeout();
      const int n = ::ppoll(fds.data(), fds.size(), &wait, &wait_mask_);
      if (n < 0 && errno != EINTR) break;
      handle_signals();
      for (size_t k = 0; n > 0 && k < fds.size(); ++k)
        if (fds[k].revents) drain(which[k].first, which[k].second);
      reap();
      emit(output_.due(Clock::now()));
      check_deadlines();
      heartbeat();
    }
    emit(output_.flush_all());
  }

  timespec timeout() const {
    // Children are also checked every second: a SIGCHLD that came before ppoll is not lost.
    auto until = Clock::now() + std::chrono::seconds(1);
    if (auto due = output_.next_due()) until = std::min(until, *due);
    for (const auto& d : {failure_deadline_, kill_deadline_})
      if (d) until = std::min(until, *d);
    until = std::min(until, next_heartbeat_);
    const auto left = std::max(Clock::duration::zero(), until - Clock::now());
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  }

  void handle_signals() {
    const int count = g_signal_count;
    if (count == seen_signals_) return;
    seen_signals_ = count;
    if (!interrupted_) {
      interrupted_ = g_last_signal;
      output_.stopping_every_host();
      stop_all(fmt::format("received {}: stopping every host ({:g} s grace)",
                           signal_name(g_last_signal), options_.shutdown_timeout));
    } else {
      say(fmt::format("received {} again; cutting the ssh connections (each agent still stops "
                      "its workers)",
                      signal_name(g_last_signal)),
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
      if (r.in < 0) continue;
      if (interrupted_) send(r, stop_line(interrupted_));
      ::close(r.in);
      r.in = -1;
    }
    kill_deadline_ = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.shutdown_timeout)) +
                     std::chrono::seconds(15);
  }

  // A line to an agent's standard input. A pipe that is full already holds a heartbeat; one
  // whose ssh has ended takes nothing (SIGPIPE is ignored).
  static void send(const Remote& r, const std::string& line) {
    ssize_t n;
    do n = ::write(r.in, line.data(), line.size());
    while (n < 0 && errno == EINTR);
  }

  // Every agent hears from the launcher within its timeout (hosts_plan.hpp).
  void heartbeat() {
    const auto now = Clock::now();
    if (now < next_heartbeat_) return;
    next_heartbeat_ = now + std::chrono::seconds(kHeartbeatSeconds);
    for (const Remote& r : remotes_)
      if (r.in >= 0) send(r, "\n");
  }

  void kill_ssh(int sig) {
    for (Remote& r : remotes_)
      if (!r.status) ::kill(-r.pid, sig);
  }

  void check_deadlines() {
    const auto now = Clock::now();
    if (failure_deadline_ && now >= *failure_deadline_) {
      failure_deadline_.reset();
      stop_all("the other agents did not end after the failure; stopping them");
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      say("agents still running after the grace; cutting their ssh connections", Level::warning);
      kill_ssh(SIGKILL);
      kill_deadline_.reset();
    }
  }

  void drain(size_t i, int stream) {
    Remote& r = remotes_[i];
    int& fd = stream == 1 ? r.out : r.err;
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        emit(output_.close(i, stream, Clock::now()));
        ::close(fd);
        fd = -1;
        return;
      }
      emit(output_.feed(i, stream, std::string_view(buffer, static_cast<size_t>(n)), Clock::now()));
    }
  }

  static void emit(const std::vector<LineDedup::Out>& lines) {
    for (const auto& l : lines) {
      const std::string text = l.line + "\n";
      write_all(l.stream, text.data(), text.size());
    }
  }

  void reap() {
    for (size_t i = 0; i < remotes_.size(); ++i) {
      Remote& r = remotes_[i];
      if (r.status) continue;
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) continue;
      const ExitStatus end = ExitStatus::from_wait(status);
      r.status = end.shell_code();
      r.killed_by = end.signal;
      // What the agent still wrote stays readable; its standard input is of no use any more.
      if (r.in >= 0) ::close(r.in), r.in = -1;
      ended(i);
    }
  }

  void ended(size_t i) {
    const Remote& r = remotes_[i];
    const HostVerdict v =
        outcome_.ended(i, HostEnd{*r.status, r.killed_by, output_.ready(i), output_.last_error(i)},
                       stopping_, interrupted_ != 0);
    for (const auto& [line, level] : v.lines) say(line, level);
    if (v.stop) stop_all(*v.stop);
    if (v.failure_grace) failure_deadline_ = Clock::now() + kFailureGrace;
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
  std::vector<Remote> remotes_;
  HostOutput output_;
  HostsOutcome outcome_;
  sigset_t wait_mask_{};
  int seen_signals_ = 0;
  int interrupted_ = 0;
  bool stopping_ = false;
  std::optional<Clock::time_point> failure_deadline_, kill_deadline_;
  Clock::time_point next_heartbeat_ = Clock::now() + std::chrono::seconds(kHeartbeatSeconds);
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
  namespace asio = boost::asio;
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
