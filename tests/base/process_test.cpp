#include "trainrun/base/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>

#include "trainrun/base/system.hpp"

using namespace trainrun;

namespace {

// Everything `fd` gives until its end; closes it.
std::string read_to_end(int fd) {
  std::string text = read_all(fd);
  ::close(fd);
  return text;
}

// The hexadecimal mask on the line of /proc/self/status that starts with `field`.
unsigned long long status_mask(const std::string& status, const std::string& field) {
  const auto at = status.find("\n" + field + ":");
  REQUIRE(at != std::string::npos);
  return std::strtoull(status.c_str() + at + field.size() + 2, nullptr, 16);
}

unsigned long long bit(int sig) { return 1ULL << (sig - 1); }

// Restores a signal's disposition and the thread's mask when a test ends.
struct SignalState {
  int sig;
  struct sigaction old_action {};
  sigset_t old_mask{};
  explicit SignalState(int s) : sig(s) {
    ::sigaction(sig, nullptr, &old_action);
    ::pthread_sigmask(SIG_SETMASK, nullptr, &old_mask);
  }
  ~SignalState() {
    ::sigaction(sig, &old_action, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  }
};

}  // namespace

TEST_CASE("a program that cannot be executed reports its errno before anything runs", "[process]") {
  SpawnRequest request;
  request.program = "/nonexistent/program";
  request.argv = {"program"};
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == ENOENT);
  CHECK(child.exec_report == -1);
  const auto status = wait_for_exit(child.pid);
  REQUIRE(status);
  CHECK(status->code == 127);
  CHECK(status->signal == 0);
}

TEST_CASE("a name looked up on PATH and found nowhere reports ENOENT", "[process]") {
  SpawnRequest request;
  request.program = "trainrun-no-such-program";
  request.search_path = true;
  request.argv = {request.program};
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == ENOENT);
  CHECK(wait_for_exit(child.pid)->code == 127);
}

TEST_CASE("a name found on PATH runs, with the environment asked for", "[process]") {
  SpawnRequest request;
  request.program = "sh";
  request.search_path = true;
  request.argv = {"sh", "-c", "echo \"$GREETING\"; exit 3"};
  request.env = {"GREETING=hello"};
  request.out = Stdio::pipe();
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  CHECK(child.out > 2);
  CHECK(read_to_end(child.out) == "hello\n");
  const auto status = wait_for_exit(child.pid);
  REQUIRE(status);
  CHECK(status->code == 3);
  CHECK(status->shell_code() == 3);
  CHECK(status->failed());
}

TEST_CASE("exit statuses, their shell codes and their words", "[process]") {
  ExitStatus s{0, SIGKILL};
  CHECK(s.failed());
  CHECK(s.shell_code() == 137);
  CHECK(ExitStatus{3, 0}.shell_code() == 3);
  CHECK_FALSE(ExitStatus{}.failed());
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(60) == "SIG60");
  CHECK(describe_exit(s) == "was killed by SIGKILL");
  CHECK(describe_exit(ExitStatus{3, 0}) == "exited with code 3");
}

TEST_CASE("a wait status says a child stopped, continued or ended", "[process]") {
  SpawnRequest request;
  request.program = "/bin/sh";
  // It ends only once told (its stdin closed): its continuation is seen before its end.
  request.argv = {"sh", "-c", "kill -STOP $$; read line; exit 3"};
  request.in = Stdio::pipe();
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  int status = 0;
  REQUIRE(::waitpid(child.pid, &status, WUNTRACED) == child.pid);
  WaitEvent event = WaitEvent::from_wait(status);
  CHECK(event.kind == WaitEvent::Kind::stopped);
  CHECK(event.stop_signal == SIGSTOP);
  ::kill(child.pid, SIGCONT);
  REQUIRE(::waitpid(child.pid, &status, WCONTINUED) == child.pid);
  CHECK(WaitEvent::from_wait(status).kind == WaitEvent::Kind::continued);
  ::close(child.in);
  REQUIRE(::waitpid(child.pid, &status, 0) == child.pid);
  event = WaitEvent::from_wait(status);
  CHECK(event.kind == WaitEvent::Kind::ended);
  CHECK(event.end.code == 3);
  CHECK(event.end.signal == 0);
}

TEST_CASE("a child killed by signal N ends with shell code 128+N", "[process]") {
  SpawnRequest request;
  request.program = "/bin/sh";
  request.argv = {"sh", "-c", "kill -TERM $$; sleep 30"};
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  const auto status = wait_for_exit(child.pid);
  REQUIRE(status);
  CHECK(status->signal == SIGTERM);
  CHECK(status->code == 0);
  CHECK(status->shell_code() == 128 + SIGTERM);
  CHECK(shell_code_for_signal(SIGKILL) == 137);
}

TEST_CASE("a child's standard streams can be pipes to the caller", "[process]") {
  SpawnRequest request;
  request.program = "/bin/sh";
  request.argv = {"sh", "-c", "read line; echo \"out $line\"; echo \"err $line\" >&2"};
  request.in = Stdio::pipe();
  request.out = Stdio::pipe();
  request.err = Stdio::pipe();
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  REQUIRE(child.in > 2);
  CHECK(::write(child.in, "ping\n", 5) == 5);
  ::close(child.in);
  CHECK(read_to_end(child.out) == "out ping\n");
  CHECK(read_to_end(child.err) == "err ping\n");
  CHECK(wait_for_exit(child.pid)->code == 0);
}

TEST_CASE("a kept descriptor reaches the program at its number, and no other of ours does",
          "[process]") {
  int kept[2], other[2];
  REQUIRE(::pipe2(kept, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(other, O_CLOEXEC) == 0);
  SpawnRequest request;
  request.program = "/bin/sh";
  // The kept pipe's write end answers; the other's, close-on-exec, is not there to write to.
  // Through /proc: a shell's ">&N" takes one digit only.
  request.argv = {"sh", "-c",
                  "echo kept > /proc/self/fd/" + std::to_string(kept[1]) +
                      "; echo other 2>/dev/null > /proc/self/fd/" + std::to_string(other[1]) +
                      "; exit 0"};
  request.kept_fd = kept[1];
  request.out = Stdio::pipe();
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  // Still close-on-exec here: only the child's copy was cleared.
  CHECK((::fcntl(kept[1], F_GETFD) & FD_CLOEXEC) != 0);
  ::close(kept[1]);
  ::close(other[1]);
  CHECK(wait_for_exit(child.pid)->code == 0);
  CHECK(read_to_end(kept[0]) == "kept\n");
  CHECK(read_to_end(other[0]).empty());
  ::close(child.out);
}

TEST_CASE("a child asked to close what was inherited gets 0, 1, 2 and its kept descriptor only",
          "[process]") {
  // Two descriptors without close-on-exec, as a shell leaves them to whatever it starts.
  int inherited[2], kept[2];
  REQUIRE(::pipe(inherited) == 0);
  REQUIRE(::pipe2(kept, O_CLOEXEC) == 0);
  SpawnRequest request;
  request.program = "/bin/sh";
  request.argv = {"sh", "-c", "ls /proc/self/fd"};
  request.kept_fd = kept[1];
  request.out = Stdio::pipe();
  for (const bool close_inherited : {false, true}) {
    request.close_inherited = close_inherited;
    Child child = spawn(request);
    REQUIRE(child.pid > 0);
    CHECK(wait_for_exec(child) == 0);
    CHECK(wait_for_exit(child.pid)->code == 0);
    // ls's own: the directory it reads, at the lowest number free.
    std::string listed = read_to_end(child.out);
    const bool has_inherited =
        listed.find("\n" + std::to_string(inherited[1]) + "\n") != std::string::npos;
    CHECK(has_inherited == !close_inherited);
    CHECK(listed.find("\n" + std::to_string(kept[1]) + "\n") != std::string::npos);
  }
  // Ours stay open and inheritable: only the child's were closed.
  CHECK((::fcntl(inherited[1], F_GETFD) & FD_CLOEXEC) == 0);
  for (int fd : {inherited[0], inherited[1], kept[0], kept[1]}) ::close(fd);
}

TEST_CASE("a child's signal mask is empty and its listed signals default, whatever ours are",
          "[process]") {
  SignalState pipe_state(SIGPIPE);
  SignalState usr2_state(SIGUSR2);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGUSR2, SIG_IGN);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  SpawnRequest request;
  request.program = "/bin/cat";
  request.argv = {"cat", "/proc/self/status"};
  request.out = Stdio::pipe();
  request.in = Stdio::null();
  request.default_signals = {SIGPIPE};
  Child child = spawn(request);
  REQUIRE(child.pid > 0);
  CHECK(wait_for_exec(child) == 0);
  const std::string status = read_to_end(child.out);
  CHECK(wait_for_exit(child.pid)->code == 0);
  CHECK(status_mask(status, "SigBlk") == 0);
  CHECK((status_mask(status, "SigIgn") & bit(SIGPIPE)) == 0);
  // Not listed: an ignored signal stays ignored across exec, as for any child.
  CHECK((status_mask(status, "SigIgn") & bit(SIGUSR2)) != 0);
}

namespace {
int handler_pipe = -1;
void write_signal(int sig) {
  const char byte = static_cast<char>(sig);
  ssize_t ignored = ::write(handler_pipe, &byte, 1);
  (void)ignored;
}
}  // namespace

// As the agent's own signal handling does (a handler that writes into a self-pipe): a child
// signalled between its fork and its exec (a group stopped just after it started) must not run
// that handler, which would tell the parent of a signal the parent never got.
TEST_CASE("a child signalled before its exec never runs the parent's handler", "[process]") {
  SignalState usr1_state(SIGUSR1);
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
  handler_pipe = fds[1];
  struct sigaction action {};
  action.sa_handler = write_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGUSR1, &action, nullptr);
  for (int i = 0; i < 100; ++i) {
    SpawnRequest request;
    request.program = "/bin/true";
    request.argv = {"true"};
    request.group = SpawnRequest::Group::new_session;
    Child child = spawn(request);
    REQUIRE(child.pid > 0);
    ::kill(child.pid, SIGUSR1);  // most often before it has run exec
    wait_for_exec(child);
    const auto status = wait_for_exit(child.pid);
    REQUIRE(status);
    // Ended by the signal's default action, or ran and exited.
    CHECK((status->signal == SIGUSR1 || status->code == 0));
  }
  for (int i = 0; i < 20; ++i) {
    auto body = [] {
      ::kill(::getpid(), SIGUSR1);
      return 0;
    };
    const pid_t pid = run_in_child(body);
    REQUIRE(pid > 0);
    CHECK(wait_for_exit(pid)->signal == SIGUSR1);
  }
  char byte = 0;
  CHECK(::read(fds[0], &byte, 1) == -1);  // no handler ran, in any child
  ::close(fds[0]);
  ::close(fds[1]);
  handler_pipe = -1;
}

TEST_CASE("a child with a death signal gets it when the thread that started it ends", "[process]") {
  pid_t pid = -1;
  std::thread starter([&] {
    SpawnRequest request;
    request.program = "/bin/sleep";
    request.argv = {"sleep", "30"};
    request.death_signal = SIGKILL;
    Child child = spawn(request);
    pid = child.pid;
    // Past its prctl once it runs sleep: the thread may end now.
    if (child.pid > 0) CHECK(wait_for_exec(child) == 0);
  });
  starter.join();
  REQUIRE(pid > 0);
  // Bounded by the sleep when the death signal does not come.
  const auto status = wait_for_exit(pid);
  REQUIRE(status);
  CHECK(status->signal == SIGKILL);
}

TEST_CASE("a new session and a new group make the child their leader", "[process]") {
  for (const auto group : {SpawnRequest::Group::new_session, SpawnRequest::Group::new_group}) {
    SpawnRequest request;
    request.program = "/bin/sh";
    request.argv = {"sh", "-c", "exit 0"};
    request.group = group;
    Child child = spawn(request);
    REQUIRE(child.pid > 0);
    CHECK(wait_for_exec(child) == 0);
    // Not reaped yet: a zombie keeps its group and session.
    CHECK(::getpgid(child.pid) == child.pid);
    if (group == SpawnRequest::Group::new_session)
      CHECK(::getsid(child.pid) == child.pid);
    else
      CHECK(::getsid(child.pid) == ::getsid(0));
    CHECK(wait_for_exit(child.pid)->code == 0);
  }
}

TEST_CASE("a function run in a child exits with what it returns", "[process]") {
  int value = 42;
  auto body = [&] { return value + 1; };
  const pid_t pid = run_in_child(body);
  REQUIRE(pid > 0);
  const auto status = wait_for_exit(pid);
  REQUIRE(status);
  CHECK(status->code == 43);
  CHECK_FALSE(wait_for_exit(pid));  // reaped already
}

TEST_CASE("find_program searches PATH as execvp does", "[process]") {
  CHECK(find_program("sh", "/nonexistent:/bin") == std::optional<std::string>("/bin/sh"));
  CHECK(find_program("./relative", "/bin") == std::optional<std::string>("./relative"));
  CHECK_FALSE(find_program("trainrun-no-such-program", "/bin:/usr/bin"));
}
