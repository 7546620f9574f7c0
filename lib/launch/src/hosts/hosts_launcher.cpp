#include "trainrun/launch/hosts/hosts_launcher.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/hosts/hosts_plan.hpp"
#include "trainrun/launch/hosts/line_dedup.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/launch/workers/failure.hpp"

namespace trainrun::launch {

namespace {

using Clock = std::chrono::steady_clock;

// How long --dedup holds a line to find the same one from other ranks.
constexpr auto kDedupWindow = std::chrono::milliseconds(1000);
// After one agent ends with a failure, how long the others have to end on their own (the
// rendezvous stops them) before the launcher stops them.
constexpr auto kFailureGrace = std::chrono::seconds(10);
// The agents' own lines remembered to show each once (they are few: a job's long output is its
// workers').
constexpr size_t kMaxSaidLines = 4096;

volatile sig_atomic_t g_signal_count = 0;
volatile sig_atomic_t g_last_signal = 0;
void on_stop_signal(int sig) {
  g_last_signal = sig;
  g_signal_count = g_signal_count + 1;
}
void on_child(int) {}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string own_executable() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) throw SetupError("cannot find trainrun's own path (/proc/self/exe)");
  return std::string(buffer, static_cast<size_t>(n));
}

std::string working_directory() {
  char buffer[PATH_MAX];
  if (!::getcwd(buffer, sizeof(buffer)))
    throw SetupError(fmt::format("cannot read the working directory: {}", std::strerror(errno)));
  return buffer;
}

// One host's ssh and what came back from it.
struct Remote {
  std::string host;     // as listed (the ssh destination)
  std::string address;  // without user@, as in the workers' prefix
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string partial[3];
  bool ready = false;
  std::optional<int> status;  // exit status once reaped (128 + signal for a killed ssh)
  int killed_by = 0;          // the signal that ended ssh itself, if one did
  std::string last_error;     // ssh's (or the remote shell's) last stderr line
};

class HostsRun {
 public:
  HostsRun(const HostsOptions& options, std::vector<PlannedHost> hosts)
      : options_(options), hosts_(std::move(hosts)), dedup_(kDedupWindow) {}

  int run(const std::map<std::string, std::string>& forwarded) {
    install_signals();
    const std::string self = own_executable();
    const std::string cwd = working_directory();
    const std::string token = random_hex(64);
    say(fmt::format("starting {} agents over ssh: {}", hosts_.size(), host_names()));
    for (size_t i = 0; i < hosts_.size(); ++i) {
      Handover handover{token, forwarded};
      if (!hosts_[i].devices.empty()) {
        std::string list;
        for (int d : hosts_[i].devices) list += (list.empty() ? "" : ",") + std::to_string(d);
        handover.env["CUDA_VISIBLE_DEVICES"] = list;
      }
      const std::string command =
          remote_command(cwd, self, kVersion, agent_arguments(options_, hosts_, i));
      remotes_.push_back(start(hosts_[i].name, ssh_command(options_.ssh, hosts_[i].name, command),
                               encode_handover(handover)));
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

  Remote start(const std::string& host, const std::vector<std::string>& argv,
               const std::string& handover) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw SetupError(fmt::format("cannot make pipes for ssh: {}", std::strerror(errno)));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw SetupError(fmt::format("cannot start ssh: {}", std::strerror(errno)));
    if (pid == 0) {
      // Its own process group: the terminal's Ctrl-C reaches the launcher alone, which then
      // stops the agents in order rather than cutting their connections.
      ::setpgid(0, 0);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE})
        ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execvp(args[0], args.data());
      const std::string why = fmt::format("cannot run {}: {}\n", argv[0], std::strerror(errno));
      (void)!::write(2, why.data(), why.size());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    Remote r;
    r.host = host;
    r.address = host_address(host);
    r.pid = pid;
    r.in = in[1];
    r.out = out[0];
    r.err = err[0];
    ::fcntl(r.out, F_SETFL, O_NONBLOCK);
    ::fcntl(r.err, F_SETFL, O_NONBLOCK);
    // A few hundred bytes: the pipe takes it whole, whether ssh has connected yet or not.
    write_all(r.in, handover.data(), handover.size());
    return r;
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
      emit(dedup_.due(Clock::now()));
      check_deadlines();
    }
    emit(dedup_.flush_all());
  }

  timespec timeout() const {
    // Children are also checked every second: a SIGCHLD that came before ppoll is not lost.
    auto until = Clock::now() + std::chrono::seconds(1);
    if (auto due = dedup_.next_due()) until = std::min(until, *due);
    for (const auto& d : {failure_deadline_, kill_deadline_})
      if (d) until = std::min(until, *d);
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
      stop_all(fmt::format("received {}; stopping the agents on {} hosts ({:g} s grace)",
                           signal_name(g_last_signal), remotes_.size(), options_.shutdown_timeout));
    } else {
      say(fmt::format("received {} again; cutting the ssh connections (each agent still stops "
                      "its workers)",
                      signal_name(g_last_signal)),
          Level::warning);
      kill_ssh(SIGTERM);
    }
  }

  // Closing an agent's standard input stops it (remote_agent.hpp), on every host at once.
  void stop_all(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    say(why);
    for (Remote& r : remotes_)
      if (r.in >= 0) ::close(r.in), r.in = -1;
    kill_deadline_ = Clock::now() +
                     std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.shutdown_timeout)) +
                     std::chrono::seconds(15);
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
        if (!r.partial[stream].empty()) line(i, stream, std::move(r.partial[stream]));
        r.partial[stream].clear();
        ::close(fd);
        fd = -1;
        return;
      }
      std::string& part = r.partial[stream];
      part.append(buffer, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = part.find('\n', start)) != std::string::npos; start = nl + 1)
        line(i, stream, part.substr(start, nl - start));
      part.erase(0, start);
    }
  }

  void line(size_t i, int stream, std::string text) {
    Remote& r = remotes_[i];
    if (stream == 1 && !r.ready && text == kReadyLine) {
      r.ready = true;
      return;
    }
    auto worker = split_worker_line(text, r.address);
    // ssh ends its own lines with "\r\n".
    if (!worker && !text.empty() && text.back() == '\r') text.pop_back();
    if (stream == 2 && !text.empty()) r.last_error = text;
    if (!worker && !first_to_say(i, text)) return;
    if (!worker) text = r.host + ": " + text;
    if (options_.dedup) {
      if (worker)
        dedup_.add(Clock::now(), stream, worker->first, std::move(worker->second), std::move(text));
      else
        dedup_.add(Clock::now(), stream, std::nullopt, "", std::move(text));
      return;
    }
    emit({{stream, std::move(text)}});
  }

  // A trainrun line that another host's agent printed word for word says what every agent says
  // (the job's stop, its reason): shown once, from the first host that said it.
  bool first_to_say(size_t i, const std::string& text) {
    if (text.rfind("trainrun: ", 0) != 0) return true;
    if (said_.size() >= kMaxSaidLines) said_.clear();
    const auto [it, added] = said_.emplace(text, i);
    return added || it->second == i;
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
      r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (WIFSIGNALED(status)) r.killed_by = WTERMSIG(status);
      // What the agent still wrote stays readable; its standard input is of no use any more.
      if (r.in >= 0) ::close(r.in), r.in = -1;
      ended(i);
    }
  }

  void ended(size_t i) {
    Remote& r = remotes_[i];
    const int code = *r.status;
    if (!r.ready) {
      if (stopping_ && interrupted_) return;
      std::string hint;
      if (code == 127)
        hint = fmt::format("; is trainrun installed at {} on {}?", own_executable(), r.host);
      say(fmt::format("{}: cannot start its agent (ssh exit {}): {}{}", r.host, code,
                      r.last_error.empty() ? "no message" : r.last_error, hint),
          Level::error);
      start_failed_ = true;
      stop_all(fmt::format("stopping the agents on the other hosts"));
      return;
    }
    // ssh killed (not by us) takes the connection with it, as ssh's own 255 does: the agent's
    // standard input closes and it stops; its status is not the job's.
    const bool lost = code == 255 || r.killed_by != 0;
    if (lost && !stopping_) {
      const std::string why = r.killed_by            ? "ssh ended by " + signal_name(r.killed_by)
                              : r.last_error.empty() ? "no message"
                                                     : r.last_error;
      say(fmt::format("{}: ssh connection lost ({}); node rank {} is lost to the job, the "
                      "rendezvous decides what follows",
                      r.host, why, i),
          Level::warning);
      return;
    }
    if (code != 0 && !lost && !first_failure_) {
      first_failure_ = code;
      if (!stopping_) failure_deadline_ = Clock::now() + kFailureGrace;
    }
    if (code == 0) any_success_ = true;
  }

  int finish() {
    std::string statuses;
    bool all_zero = true;
    for (const Remote& r : remotes_) {
      statuses += fmt::format("{}{} {}", statuses.empty() ? "" : ", ", r.host,
                              r.ready ? fmt::format("exit {}", *r.status) : "not started");
      all_zero = all_zero && r.ready && *r.status == 0;
    }
    say("agents ended: " + statuses, all_zero ? Level::debug : Level::info);
    if (interrupted_) return 128 + interrupted_;
    if (start_failed_) return 1;
    if (first_failure_) return *first_failure_;
    return any_success_ ? 0 : 255;
  }

  const HostsOptions& options_;
  std::vector<PlannedHost> hosts_;
  std::vector<Remote> remotes_;
  std::map<std::string, size_t> said_;  // agents' trainrun lines, by the first host to say each
  LineDedup dedup_;
  sigset_t wait_mask_{};
  int seen_signals_ = 0;
  int interrupted_ = 0;
  bool stopping_ = false;
  bool start_failed_ = false;
  bool any_success_ = false;
  std::optional<int> first_failure_;
  std::optional<Clock::time_point> failure_deadline_, kill_deadline_;
};

std::vector<HostEntry> read_host_list(const HostsOptions& options) {
  if (!options.hosts.empty()) return parse_host_option(options.hosts, "--hosts=" + options.hosts);
  const auto text = read_text_file(options.hostfile);
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
    if (auto text = read_text_file(path)) out.push_back(parse_env_file(*text, path));
  return out;
}

}  // namespace

int run_hosts(const HostsOptions& options, const std::map<std::string, std::string>& env) {
  std::vector<PlannedHost> hosts =
      filter_hosts(read_host_list(options), options.include, options.exclude);
  const auto forwarded = forwarded_environment(env_files(env), options.forward_env, env);
  HostsRun run(options, std::move(hosts));
  return run.run(forwarded);
}

}  // namespace trainrun::launch
