#include "trainrun/launch/output/console.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "test_support.hpp"
#include "trainrun/launch/output/tee_reader.hpp"

using namespace trainrun::launch;

TEST_CASE("lines are split and prefixed; partial lines wait") {
  LineSplitter s("[p]:");
  std::string out;
  s.feed("a\nbb", 4, out);
  CHECK(out == "[p]:a\n");
  out.clear();
  s.feed("b\nc\n", 4, out);
  CHECK(out == "[p]:bbb\n[p]:c\n");
  out.clear();
  s.feed("tail", 4, out);
  CHECK(out.empty());
  s.finish(out);
  CHECK(out == "[p]:tail\n");
  out.clear();
  s.finish(out);
  CHECK(out.empty());
}

TEST_CASE("an unfinished line shown early keeps its prefix once; the rest of it follows") {
  LineSplitter s("[p]:");
  std::string out;
  s.feed("done\ntype a word> ", 18, out);
  CHECK(out == "[p]:done\n");
  CHECK(s.holding());
  s.flush_partial(out);
  CHECK(out == "[p]:done\n[p]:type a word> ");
  CHECK_FALSE(s.holding());
  out.clear();
  s.flush_partial(out);  // nothing held: nothing shown
  CHECK(out.empty());
  s.feed("ab", 2, out);
  s.flush_partial(out);
  CHECK(out == "ab");
  out.clear();
  s.feed("c\nnext\n", 7, out);
  CHECK(out == "c\n[p]:next\n");
  out.clear();
  // A prompt shown early, then the end of the stream: its line is ended.
  s.feed("(Pdb) ", 6, out);
  s.flush_partial(out);
  s.finish(out);
  CHECK(out == "[p]:(Pdb) \n");
  // With filters, only whole lines are judged: nothing is shown early.
  LineSplitter filtered("[p]:", {"loss"});
  out.clear();
  filtered.feed("loss", 4, out);
  filtered.flush_partial(out);
  CHECK(out.empty());
  filtered.finish(out);
  CHECK(out == "[p]:loss\n");
}

TEST_CASE("over-long lines are emitted in pieces") {
  LineSplitter s("");
  std::string big(LineSplitter::kMaxLine + 10, 'x');
  std::string out;
  s.feed(big.data(), big.size(), out);
  CHECK(out.size() == LineSplitter::kMaxLine + 10 + 1);
}

TEST_CASE("a splitter with filters keeps the lines that contain one, across reads") {
  LineSplitter s("[p]:", {"loss", "a,b"});
  std::string out;
  s.feed("step 1 lo", 9, out);
  CHECK(out.empty());
  s.feed("ss=2\nnothing\nx a,b y\nlast loss", 30, out);
  CHECK(out == "[p]:step 1 loss=2\n[p]:x a,b y\n");
  out.clear();
  s.finish(out);
  CHECK(out == "[p]:last loss\n");
  out.clear();
  // The prefix is not searched: a filter that only the prefix holds matches nothing.
  LineSplitter by_prefix("[p]:", {"[p]"});
  by_prefix.feed("a\n", 2, out);
  CHECK(out.empty());
}

namespace {

// A real pipe; either end may be handed over (set to -1) or closed early.
struct Pipe {
  int r = -1;
  int w = -1;
  Pipe() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    r = p[0];
    w = p[1];
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

void set_nonblocking(int fd) {
  REQUIRE(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
}

std::string read_available(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

size_t write_some(int fd, const std::string& data, size_t from) {
  ssize_t n = ::write(fd, data.data() + from, data.size() - from);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

bool writable(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Runs whatever handlers are ready, without waiting.
void pump(boost::asio::io_context& io) {
  io.restart();
  io.poll();
}

std::string numbered_lines(size_t count, const std::string& prefix = "") {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += prefix + "line " + std::to_string(i) + "\n";
  return out;
}

// A tee reader between a worker's pipe and a console pipe that nobody reads yet; the worker
// writes `lines` as fast as its pipe takes them.
struct Tee {
  boost::asio::io_context io;
  Pipe worker;
  Pipe console_pipe;
  Console console{io, console_pipe.w};
  std::shared_ptr<TeeReader> reader;
  bool closed = false;
  std::string raw;
  size_t sent = 0;

  explicit Tee(size_t lines, int log_fd = -1) : raw(numbered_lines(lines)) {
    set_nonblocking(worker.w);
    set_nonblocking(console_pipe.r);
    reader = std::make_shared<TeeReader>(io, worker.r, log_fd, &console, "[w]:");
    worker.r = -1;  // the reader's now
    reader->start([this] { closed = true; });
  }
  // One step of the worker and the event loop.
  void step() {
    if (sent < raw.size()) {
      sent += write_some(worker.w, raw, sent);
    } else if (worker.w >= 0) {
      ::close(worker.w);
      worker.w = -1;
    }
    pump(io);
  }
  // Runs until the console is full and the reader has stopped, so the worker's pipe stays full.
  void fill() {
    for (int i = 0; i < 10000 && !reader->paused(); ++i) step();
    REQUIRE(reader->paused());
    for (int i = 0; i < 10; ++i) step();
  }
};

}  // namespace

TEST_CASE("a console on a pipe queues what its reader has not taken, without blocking") {
  boost::asio::io_context io;
  Pipe p;
  set_nonblocking(p.r);
  Console console(io, p.w);
  const std::string text = numbered_lines(100000);  // far more than the pipe holds
  console.write(text);
  CHECK(console.queued() > 0);
  CHECK(console.queued() < text.size());
  CHECK_FALSE(console.full());
  bool flushed = false;
  console.when_flushed([&] { flushed = true; });
  std::string got;
  for (int i = 0; i < 100000 && !flushed; ++i) {
    got += read_available(p.r);
    pump(io);
  }
  CHECK(flushed);
  got += read_available(p.r);
  CHECK(got == text);
}

TEST_CASE("a full console stops the tee reader; the worker's pipe fills; nothing is lost") {
  Tee t(1000000);  // about 12 MB, three times the console's bound
  t.fill();
  CHECK(t.console.full());
  CHECK(t.console.queued() < Console::kQueueLimit + (1u << 20));
  CHECK_FALSE(writable(t.worker.w));  // the worker would block in write()
  CHECK(t.sent < t.raw.size() / 2);
  // Someone reads the console now: everything arrives, in order, whole, prefixed.
  std::string got;
  for (int i = 0; i < 1000000 && !(t.closed && t.console.queued() == 0); ++i) {
    got += read_available(t.console_pipe.r);
    t.step();
  }
  CHECK(t.closed);
  got += read_available(t.console_pipe.r);
  CHECK(got == numbered_lines(1000000, "[w]:"));
}

TEST_CASE("when the console's reader goes, paused tee readers resume and the log gets it all") {
  ::signal(SIGPIPE, SIG_IGN);  // as trainrun does: EPIPE instead of death
  const std::string log = trainrun::test::make_temp_dir("console_log") + "/log";
  const int log_fd = ::open(log.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(log_fd >= 0);
  const int log_read = ::dup(log_fd);
  {
    Tee t(1000000, log_fd);
    t.fill();
    ::close(t.console_pipe.r);
    t.console_pipe.r = -1;
    for (int i = 0; i < 1000000 && !t.closed; ++i) t.step();
    CHECK(t.closed);
    CHECK(t.console.closed());
    CHECK(t.console.queued() == 0);
    std::string logged(t.raw.size() + 1, '\0');
    CHECK(::pread(log_read, logged.data(), logged.size(), 0) == static_cast<ssize_t>(t.raw.size()));
    logged.resize(t.raw.size());
    CHECK(logged == t.raw);
  }
  ::close(log_read);
}

TEST_CASE("a draining tee reader reads to the end whatever the console holds") {
  Tee t(1000000);
  t.fill();
  const size_t left_in_pipe = 64 * 1024;  // what a worker that has ended may leave behind
  t.raw.resize(std::min(t.raw.size(), t.sent + left_in_pipe));
  t.reader->drain();
  for (int i = 0; i < 100000 && !t.closed; ++i) t.step();
  CHECK(t.closed);
  std::string got;
  for (int i = 0; i < 1000000 && t.console.queued() > 0; ++i) {
    got += read_available(t.console_pipe.r);
    pump(t.io);
  }
  got += read_available(t.console_pipe.r);
  std::string expected;
  LineSplitter s("[w]:");
  s.feed(t.raw.data(), t.raw.size(), expected);
  s.finish(expected);
  CHECK(got == expected);
}

TEST_CASE("abandoning a console drops its queue and later output, and wakes who waits") {
  boost::asio::io_context io;
  Pipe p;
  Console console(io, p.w);
  console.write(numbered_lines(100000));
  const size_t queued = console.queued();
  REQUIRE(queued > 0);
  bool flushed = false;
  console.when_flushed([&] { flushed = true; });
  CHECK(console.abandon() == queued);
  CHECK(console.closed());
  console.write("more\n");
  CHECK(console.queued() == 0);
  console.write_now("a note\n");  // the pipe is full: returns anyway
  pump(io);
  CHECK(flushed);
}

TEST_CASE("a console on a regular file writes straight through") {
  boost::asio::io_context io;
  const std::string path = trainrun::test::make_temp_dir("console_file") + "/console";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  {
    Console console(io, fd);
    const std::string text = numbered_lines(500000);
    console.write(text);
    CHECK(console.queued() == 0);
    CHECK(::lseek(fd, 0, SEEK_CUR) == static_cast<off_t>(text.size()));
  }
  ::close(fd);
}

TEST_CASE("stdout and stderr on one pipe are the same file") {
  Pipe a, b;
  const int a2 = ::dup(a.w);
  CHECK(Console::same_file(a.w, a2));
  CHECK_FALSE(Console::same_file(a.w, b.w));
  ::close(a2);
}

namespace {
std::string read_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}
int create(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
}
}  // namespace

TEST_CASE("tee readers duplicate matching lines, prefixed, into one shared file") {
  const std::string d = trainrun::test::make_temp_dir("console_duplicate");
  {
    boost::asio::io_context io;
    const int console_fd = create(d + "/console");
    Console console(io, console_fd);
    auto file = std::make_shared<SharedLogFile>(create(d + "/filtered"));
    Pipe a, b;
    auto ra = std::make_shared<TeeReader>(io, a.r, create(d + "/a.log"), &console,
                                          "[w0]:", Duplicate{file, {"loss"}});
    auto rb = std::make_shared<TeeReader>(io, b.r, create(d + "/b.log"), &console,
                                          "[w1]:", Duplicate{file, {"loss"}});
    a.r = b.r = -1;
    const std::string out_a = "loss=1\nother\n", out_b = "x\nfinal loss";
    REQUIRE(::write(a.w, out_a.data(), out_a.size()) == static_cast<ssize_t>(out_a.size()));
    REQUIRE(::write(b.w, out_b.data(), out_b.size()) == static_cast<ssize_t>(out_b.size()));
    ::close(a.w), ::close(b.w);
    a.w = b.w = -1;
    ra->start({});
    rb->start({});
    io.run();
    ::close(console_fd);
  }
  const std::string filtered = read_file(d + "/filtered");
  CHECK(filtered.find("[w0]:loss=1\n") != std::string::npos);
  CHECK(filtered.find("[w1]:final loss\n") != std::string::npos);
  CHECK(filtered.size() == std::string("[w0]:loss=1\n[w1]:final loss\n").size());
  CHECK(read_file(d + "/a.log") == "loss=1\nother\n");
  const std::string console = read_file(d + "/console");
  CHECK(console.find("[w0]:other\n") != std::string::npos);
  CHECK(console.find("[w1]:x\n") != std::string::npos);
}
