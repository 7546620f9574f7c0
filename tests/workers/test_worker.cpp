// One small worker program with many behaviours, for the launcher's end-to-end tests:
//   test_worker ACTION [ARGS] [ACTION [ARGS]...]   (actions run left to right)
//   exit N                 exit with code N
//   signal N               raise signal N
//   abort                  call abort() (SIGABRT, as a failed assertion does)
//   segv                   write through a null pointer (a real SIGSEGV, not a raised one)
//   sleep SECONDS          sleep (interruptible only by signals it does not ignore)
//   ignore-term            ignore SIGTERM from now on
//   pidfile PATH           append "<pid>\n" to PATH
//   grandchild PATH MODE   fork a child that appends its pid to PATH, then sleeps forever;
//                          MODE is plain, ignore-term, setsid, or daemon (fork, setsid, fork
//                          again and let the middle process exit: the classic daemon)
//   spew LINES BYTES       print LINES lines of BYTES bytes each to stdout
//   stderr TEXT            print TEXT and a newline to stderr
//   partial TEXT           print TEXT to stdout without a newline
//   binary                 print bytes that are not valid UTF-8, then a newline
//   error-file MESSAGE     write a torchelastic error file with MESSAGE
//   close-stdout           close stdout
//   on-usr1 PATH           on SIGUSR1, append "usr1\n" to PATH (and keep running)
//   rank-exit RANK N       exit N if RANK equals $RANK
//   env PATH               write the environment to PATH.<RANK> as NAME=value lines
//   stamp PATH             append "<RANK> <CLOCK_MONOTONIC seconds>" to PATH
//   rank-stamp-exit RANK PATH N   if RANK equals $RANK: stamp PATH, then exit N
//   wait-lines PATH N      wait (up to 30 s) until PATH holds at least N lines: a barrier
//   stuck-here RANK SECONDS   if RANK equals $RANK: sleep SECONDS in stuck_here(), a native frame
//                          of its own for a stack to name
//   work SECONDS           compute in work() for SECONDS without printing: one frame, always busy
//   thread-name NAME       start a thread that names itself NAME and sleeps: the kernel keeps 15
//                          bytes of it, maybe cutting a UTF-8 character in two
//   vfork-sleep SECONDS    vfork a child that sleeps SECONDS and exits: meanwhile this process
//                          waits in uninterruptible sleep (state D), as every vfork parent does
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <string>
#include <thread>

extern char** environ;

namespace {

std::string usr1_path;
// Not visibly null to the compiler, so the store is really made; and not caught by UBSan in
// sanitizer builds, so the worker dies of the signal as an uninstrumented one would.
void* volatile nullptr_for_segv = nullptr;
__attribute__((no_sanitize("undefined"))) void store_through_null() {
  *static_cast<volatile int*>(nullptr_for_segv) = 1;
}

void append(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  ssize_t n = write(fd, text.data(), text.size());
  (void)n;
  close(fd);
}

void on_usr1(int) { append(usr1_path, "usr1\n"); }

// Not inlined, and with work after the sleep: the frame stays on the stack while it sleeps.
__attribute__((noinline)) int stuck_here(unsigned seconds) {
  unsigned left = seconds;
  while (left > 0) left = sleep(left);
  return static_cast<int>(left);
}

// Busy in one frame for `seconds` of wall time, as a long silent computation is.
__attribute__((noinline)) double work(double seconds) {
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  volatile double x = 1;
  do {
    for (int i = 0; i < 1000000; ++i) x = x * 1.0000001 + 1e-9;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (static_cast<double>(now.tv_sec - start.tv_sec) +
               static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9 <
           seconds);
  return x;
}

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr, "test_worker: bad arguments near '%s'\n", what);
  std::exit(64);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a.c_str());
      return argv[++i];
    };
    if (a == "exit") {
      std::exit(std::atoi(next().c_str()));
    } else if (a == "signal") {
      int sig = std::atoi(next().c_str());
      signal(sig, SIG_DFL);
      raise(sig);
    } else if (a == "abort") {
      std::abort();
    } else if (a == "segv") {
      store_through_null();
    } else if (a == "sleep") {
      double s = std::atof(next().c_str());
      timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<time_t>(s)) * 1e9)};
      while (nanosleep(&ts, &ts) != 0) {
      }
    } else if (a == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (a == "pidfile") {
      append(next(), std::to_string(getpid()) + "\n");
    } else if (a == "grandchild") {
      std::string path = next();
      std::string mode = next();
      pid_t pid = fork();
      if (pid == 0 && mode == "daemon") {
        setsid();
        if (fork() != 0) _exit(0);
      }
      if (pid == 0) {
        if (mode == "setsid") setsid();
        if (mode == "ignore-term") signal(SIGTERM, SIG_IGN);
        append(path, std::to_string(getpid()) + "\n");
        while (true) pause();
      }
    } else if (a == "spew") {
      long lines = std::atol(next().c_str());
      long bytes = std::atol(next().c_str());
      std::string line(static_cast<size_t>(bytes), 'x');
      line += '\n';
      for (long l = 0; l < lines; ++l) std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
    } else if (a == "stderr") {
      std::fprintf(stderr, "%s\n", next().c_str());
    } else if (a == "partial") {
      std::fputs(next().c_str(), stdout);
      std::fflush(stdout);
    } else if (a == "binary") {
      const char bytes[] = "\xff\xfe\xc3\x28 raw\n";
      std::fwrite(bytes, 1, sizeof bytes - 1, stdout);
      std::fflush(stdout);
    } else if (a == "error-file") {
      const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
      std::string msg = next();
      if (path) {
        std::string json = "{\"message\": {\"message\": \"" + msg +
                           "\", \"extraInfo\": {\"py_callstack\": \"Traceback: " + msg +
                           "\", \"timestamp\": \"" + std::to_string(std::time(nullptr)) + "\"}}}";
        append(path, json);
      }
    } else if (a == "close-stdout") {
      std::fflush(stdout);
      close(1);
    } else if (a == "on-usr1") {
      usr1_path = next();
      signal(SIGUSR1, on_usr1);
    } else if (a == "rank-exit") {
      std::string rank = next();
      int code = std::atoi(next().c_str());
      const char* r = std::getenv("RANK");
      if (r && rank == r) std::exit(code);
    } else if (a == "stuck-here") {
      const int rank = std::atoi(next().c_str());
      const unsigned seconds = static_cast<unsigned>(std::atoi(next().c_str()));
      const char* r = std::getenv("RANK");
      if (r && std::atoi(r) == rank && stuck_here(seconds) != 0) return 1;
    } else if (a == "work") {
      if (work(std::atof(next().c_str())) < 0) return 1;
    } else if (a == "thread-name") {
      const std::string name = next();
      std::promise<void> named;
      std::future<void> done = named.get_future();
      std::thread([named = std::move(named), name]() mutable {
        prctl(PR_SET_NAME, name.c_str());
        named.set_value();
        while (true) pause();
      }).detach();
      done.wait();
    } else if (a == "vfork-sleep") {
      const double s = std::atof(next().c_str());
      timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<time_t>(s)) * 1e9)};
      const pid_t child = vfork();
      if (child == 0) {
        // The parent's memory, borrowed: only system calls until _exit.
        while (nanosleep(&ts, &ts) != 0) {
        }
        _exit(0);
      }
      if (child > 0) waitpid(child, nullptr, 0);
    } else if (a == "env") {
      std::string path = next() + "." + (std::getenv("RANK") ? std::getenv("RANK") : "x");
      std::string text;
      for (char** e = environ; *e; ++e) text += std::string(*e) + "\n";
      append(path, text);
    } else if (a == "stamp" || a == "rank-stamp-exit") {
      std::string only = a == "stamp" ? "" : next();
      std::string path = next();
      int code = a == "stamp" ? 0 : std::atoi(next().c_str());
      const char* r = std::getenv("RANK");
      if (!only.empty() && (!r || only != r)) continue;
      timespec now{};
      clock_gettime(CLOCK_MONOTONIC, &now);
      char line[96];
      std::snprintf(line, sizeof line, "%s %ld.%09ld\n", r ? r : "x", static_cast<long>(now.tv_sec),
                    now.tv_nsec);
      append(path, line);
      if (!only.empty()) std::exit(code);
    } else if (a == "wait-lines") {
      std::string path = next();
      long want = std::atol(next().c_str());
      for (int tries = 0; tries < 3000; ++tries) {
        long lines = 0;
        if (FILE* f = std::fopen(path.c_str(), "r")) {
          for (int c; (c = std::fgetc(f)) != EOF;) lines += c == '\n';
          std::fclose(f);
        }
        if (lines >= want) break;
        usleep(10000);
      }
    } else {
      usage(a.c_str());
    }
  }
  return 0;
}
