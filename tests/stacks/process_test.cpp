// The collector against real processes, each left running and then told to end (its stdin
// closed): it must end normally, so no collection may leave it stopped or traced.
#include "trainrun/base/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "proc.hpp"
#include "test_support.hpp"
#include "trainrun/stacks/collect.hpp"

using namespace trainrun::stacks;

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// A process waiting in stuck_here() for its stdin to close.
class Target {
 public:
  explicit Target(std::vector<std::string> argv) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    // Above the standard descriptors, which ctest may have left closed: a dup2 onto itself
    // would keep close-on-exec.
    for (int* fd : {&in[0], &in[1], &out[0], &out[1]}) {
      const int high = ::fcntl(*fd, F_DUPFD_CLOEXEC, 3);
      ::close(*fd);
      *fd = high;
    }
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    // Ready once it has printed its line (a loaded machine may take a while to start Python).
    pollfd p{out[0], POLLIN, 0};
    REQUIRE(::poll(&p, 1, 120000) == 1);
    char buf[16] = {};
    CHECK(::read(out[0], buf, sizeof buf - 1) > 0);
    CHECK(std::string(buf).rfind("ready", 0) == 0);
    // Kept open: an unbuffered Python writes the newline after the word.
    stdout_ = out[0];
    // And waiting: its main thread in read() (bounded; a failed check below says where it is).
    for (int i = 0; i < 12000; ++i) {
      const auto threads = read_proc_threads(pid_);
      if (!threads.empty() && threads[0].syscall == "read" && threads[0].state[0] == 'S') break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Target() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) ::close(stdin_);
    ::close(stdout_);
  }
  pid_t pid() const { return pid_; }

  // Closes its stdin and waits (up to a minute) for its exit status; -1 if it does not end.
  int finish() {
    ::close(stdin_);
    stdin_ = -1;
    for (int i = 0; i < 6000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return trainrun::ExitStatus::from_wait(status).shell_code();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
};

Target python_target() { return Target({env("PYTHON_EXEC"), env("STUCK_PY")}); }

// A directory holding links to the given tools only: PATH for one collection.
std::string tools_dir(const std::vector<std::string>& tools) {
  const std::string dir = trainrun::test::make_temp_dir("stacks-tools");
  for (const auto& tool : tools) {
    const std::string name = tool.substr(tool.rfind('/') + 1);
    REQUIRE(::symlink(tool.c_str(), (dir + "/" + name).c_str()) == 0);
  }
  return dir;
}

std::string tool(const char* variable) {
  const std::string path = env(variable);
  INFO(variable << " is not set or names no program: run scripts/setup.sh");
  REQUIRE((!path.empty() && path.find("NOTFOUND") == std::string::npos));
  return path;
}

// The line of stuck.py holding `text`.
int line_of(const std::string& file, const std::string& text) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find(text) != std::string::npos) return n;
  }
  return 0;
}

void check_running(pid_t pid) {
  const auto state = read_process_state(pid);
  REQUIRE(state);
  CHECK(state->state != 'T');
  CHECK(state->state != 't');
  CHECK(state->tracer == 0);
}

// A py-spy in `dir` that stops its target (called as: py-spy dump --pid PID ...), starts a child
// that sleeps, writes the child's pid to `sleeper` (whole, by a rename) and hangs.
void write_stopping_py_spy(const std::string& dir, const std::string& sleeper) {
  {
    std::ofstream script(dir + "/py-spy");
    script << "#!/bin/sh\n"
              "kill -STOP \"$3\"\n"
              "sleep 600 &\n"
              "echo $! > '"
           << sleeper << ".tmp' && mv '" << sleeper << ".tmp' '" << sleeper << "'\nwait\n";
  }
  REQUIRE(::chmod((dir + "/py-spy").c_str(), 0755) == 0);
}

// A pid a tool wrote to `file` once it had started its child.
pid_t read_pid(const std::string& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  REQUIRE(in >> pid);
  return pid;
}

// SIGKILL takes effect when the killed process next runs, which on a loaded machine is not at
// once: waits for it (a sleeper the kill missed would sleep its 600 s).
bool killed_within_10_s(pid_t pid) {
  auto state = read_process_state(pid);
  for (int i = 0; i < 200 && state && state->state != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    state = read_process_state(pid);
  }
  return !state || state->state == 'Z';
}

std::string notes(const Stack& s) {
  std::string all;
  for (const auto& n : s.notes) all += n + "\n";
  return all;
}

const Frame* find_frame(const Thread& t, const std::string& function_part) {
  for (const auto& f : t.frames)
    if (f.function.find(function_part) != std::string::npos) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("py-spy names the Python function a process waits in, and leaves it running") {
  Target target = python_target();
  CollectOptions options;
  options.path = tools_dir({tool("TRAINRUN_PY_SPY")});
  const Stack stack = collect_stack(target.pid(), options);
  INFO(format_stack(stack));
  CHECK(stack.tool == "py-spy");
  REQUIRE(stack.main_thread());
  CHECK(stack.main_thread()->tid == target.pid());
  const Frame* f = find_frame(*stack.main_thread(), "stuck_here");
  REQUIRE(f);
  CHECK(f->kind == FrameKind::python);
  CHECK(f->file == env("STUCK_PY"));
  CHECK(f->line == line_of(env("STUCK_PY"), "the line the tests look for"));
  CHECK(stack.threads.size() == 2);
  check_running(target.pid());
  CHECK(target.finish() == 0);
}

TEST_CASE("without any tool, /proc says where each thread waits and which tool would say more") {
  Target target = python_target();
  CollectOptions options;
  options.path = tools_dir({});
  const Stack stack = collect_stack(target.pid(), options);
  INFO(format_stack(stack));
  CHECK(stack.tool == "/proc");
  REQUIRE(stack.main_thread());
  CHECK(stack.main_thread()->frames.empty());
  CHECK(stack.main_thread()->state == "S (sleeping)");
  CHECK(stack.main_thread()->syscall == "read");
  CHECK_THAT(stack.main_thread()->wchan, Catch::Contains("pipe"));
  CHECK(stack.threads.size() == 2);
  CHECK_THAT(notes(stack), Catch::Contains("pip install py-spy"));
  check_running(target.pid());
  CHECK(target.finish() == 0);
}

TEST_CASE("eu-stack and gdb name the native function a process waits in") {
  Target target({env("STUCK_WORKER")});
  for (const char* variable : {"TRAINRUN_EU_STACK", "TRAINRUN_GDB"}) {
    CollectOptions options;
    options.path = tools_dir({tool(variable)});
    const Stack stack = collect_stack(target.pid(), options);
    INFO(variable << "\n" << format_stack(stack));
    CHECK(stack.tool == (std::string(variable) == "TRAINRUN_GDB" ? "gdb" : "eu-stack"));
    REQUIRE(stack.main_thread());
    const Frame* f = find_frame(*stack.main_thread(), "demo::stuck_here");
    REQUIRE(f);
    CHECK(f->file.find("stuck_worker.cpp") != std::string::npos);
    CHECK(stack.main_thread()->syscall == "read");
    CHECK(stack.threads.size() == 2);
    check_running(target.pid());
  }
  CHECK(target.finish() == 0);
}

TEST_CASE("a tool that stops its target and hangs is cut off, and the target continued") {
  Target target = python_target();
  const std::string dir = trainrun::test::make_temp_dir("stacks-hang");
  const std::string sleeper = dir + "/sleeper.pid";
  write_stopping_py_spy(dir, sleeper);
  CollectOptions options;
  options.path = dir;
  options.timeout = std::chrono::seconds(3);
  const Stack stack = collect_stack(target.pid(), options);
  INFO(format_stack(stack));
  CHECK_THAT(notes(stack), Catch::Contains("py-spy timed out after 3 s"));
  CHECK_THAT(notes(stack), Catch::Contains("sent SIGCONT"));
  CHECK(stack.tool == "/proc");
  check_running(target.pid());
  // The tool's whole process group went with it.
  CHECK(killed_within_10_s(read_pid(sleeper)));
  CHECK(target.finish() == 0);
}

TEST_CASE(
    "a tool still running when the stacks are no longer wanted is stopped, none tried after") {
  Target target = python_target();
  const std::string dir = trainrun::test::make_temp_dir("stacks-stop");
  const std::string sleeper = dir + "/sleeper.pid";
  const std::string eu_stack_ran = dir + "/eu-stack.ran";
  write_stopping_py_spy(dir, sleeper);
  {
    std::ofstream fallback(dir + "/eu-stack");
    fallback << "#!/bin/sh\ntouch '" << eu_stack_ran << "'\nexit 1\n";
  }
  REQUIRE(::chmod((dir + "/eu-stack").c_str(), 0755) == 0);
  std::atomic<bool> stop{false};
  CollectOptions options;
  options.path = dir;
  // Far longer than the test waits: the tool ends by the stop or not at all.
  options.timeout = std::chrono::seconds(600);
  options.stop = &stop;
  std::thread stopper([&] {
    for (int i = 0; i < 6000 && ::access(sleeper.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
  });
  const Stack stack = collect_stack(target.pid(), options);
  stopper.join();
  INFO(format_stack(stack));
  CHECK_THAT(notes(stack), Catch::Contains("py-spy was stopped: the stacks are no longer wanted"));
  CHECK_THAT(notes(stack), Catch::Contains("sent SIGCONT"));
  CHECK(stack.tool == "/proc");
  CHECK(::access(eu_stack_ran.c_str(), F_OK) != 0);
  check_running(target.pid());
  CHECK(killed_within_10_s(read_pid(sleeper)));
  CHECK(target.finish() == 0);
}

namespace {

// A child that runs `body` and exits; killed and reaped when the scope ends.
class Child {
 public:
  template <typename Body>
  explicit Child(Body body) {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      body();
      ::_exit(0);
    }
  }
  ~Child() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// Waits (up to 10 s) until `pid`'s main thread sleeps in a system call.
void wait_until_blocked(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    const auto state = read_process_state(pid);
    if (state && state->state == 'S') return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("process " << pid << " never blocked");
}

}  // namespace

TEST_CASE("a process's CPU time grows while it computes, not while it sleeps", "[proc]") {
  Child busy([] {
    volatile double x = 0;
    while (true) x = x + 1;
  });
  Child idle([] { ::pause(); });
  const auto busy0 = process_cpu_seconds(busy.pid());
  const auto idle0 = process_cpu_seconds(idle.pid());
  REQUIRE(busy0);
  REQUIRE(idle0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CHECK(*process_cpu_seconds(busy.pid()) > *busy0 + 0.1);
  CHECK(*process_cpu_seconds(idle.pid()) < *idle0 + 0.05);
  CHECK_FALSE(process_cpu_seconds(0x3fffffff));
}

TEST_CASE("a main thread blocked reading a terminal names it; reading a pipe does not", "[proc]") {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string pts = ::ptsname(master);
  const int slave = ::open(pts.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(slave >= 0);
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  char byte;
  SECTION("read") {
    Child reader([&] { (void)!::read(slave, &byte, 1); });
    wait_until_blocked(reader.pid());
    CHECK(terminal_input(reader.pid()) == pts);
  }
  SECTION("poll, among other descriptors") {
    Child poller([&] {
      pollfd fds[2] = {{pipe_fds[0], POLLIN, 0}, {slave, POLLIN, 0}};
      ::poll(fds, 2, -1);
    });
    wait_until_blocked(poller.pid());
    CHECK(terminal_input(poller.pid()) == pts);
  }
  SECTION("select, as readline waits") {
    Child selecter([&] {
      fd_set set;
      FD_ZERO(&set);
      FD_SET(slave, &set);
      ::select(slave + 1, &set, nullptr, nullptr, nullptr);
    });
    wait_until_blocked(selecter.pid());
    CHECK(terminal_input(selecter.pid()) == pts);
  }
  SECTION("a pipe") {
    Child reader([&] { (void)!::read(pipe_fds[0], &byte, 1); });
    wait_until_blocked(reader.pid());
    CHECK(terminal_input(reader.pid()).empty());
  }
  SECTION("asleep") {
    Child sleeper([] { ::pause(); });
    wait_until_blocked(sleeper.pid());
    CHECK(terminal_input(sleeper.pid()).empty());
  }
  for (int fd : {master, slave, pipe_fds[0], pipe_fds[1]}) ::close(fd);
}
