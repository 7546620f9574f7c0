#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "hosts/hosts_plan.hpp"
#include "hosts/line_dedup.hpp"
#include "parse_helpers.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/hosts/remote_agent.hpp"

using namespace trainrun::launch;
using Names = std::vector<std::string>;

namespace {

template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

Names names(const std::vector<PlannedHost>& hosts) {
  Names out;
  for (const auto& h : hosts) out.push_back(h.name);
  return out;
}

}  // namespace

TEST_CASE("--hosts keeps its order and slots", "[hosts]") {
  const auto hosts = parse_host_option("node0:4, node1:2,user@node2", "--hosts=x");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "node0");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].slots == 2);
  CHECK(hosts[2].name == "user@node2");
  CHECK_FALSE(hosts[2].slots);
}

TEST_CASE("--hosts refuses an empty list, slots of 0, a host twice, an option", "[hosts]") {
  CHECK(refusal([] { parse_host_option(" , ", "--hosts= , "); }) ==
        "--hosts= , : names no host; give HOST:SLOTS,... (e.g. node0:4,node1:4)");
  CHECK(refusal([] { parse_host_option("a:0", "--hosts=a:0"); }) ==
        "--hosts=a:0: a has 0 slots; a host runs at least 1 worker (leave it out instead)");
  CHECK(refusal([] { parse_host_option("a:1,b,a:2", "--hosts=a:1,b,a:2"); }) ==
        "--hosts=a:1,b,a:2: a is listed twice; list each host once");
  // A leading '-' would be an option to ssh.
  CHECK(refusal([] { parse_host_option("-oProxyCommand=x", "--hosts=-o"); }) ==
        "--hosts=-o: bad host '-oProxyCommand=x'; use HOST or HOST:SLOTS, comma-separated");
  CHECK(refusal([] { parse_host_option("a:x", "--hosts=a:x"); }) ==
        "--hosts=a:x: bad host 'a:x'; use HOST or HOST:SLOTS, comma-separated");
}

TEST_CASE("host files in DeepSpeed's and Open MPI's forms", "[hosts]") {
  const auto hosts = parse_host_file(
      "# the cluster\n"
      "worker-0 slots=8\n"
      "\n"
      "worker-1 slots=4 max_slots=8   # Open MPI\n"
      "  worker-2:2\n"
      "worker-3\r\n",
      "hostfile");
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0].name == "worker-0");
  CHECK(hosts[0].slots == 8);
  CHECK(hosts[1].slots == 4);
  CHECK(hosts[2].name == "worker-2");
  CHECK(hosts[2].slots == 2);
  CHECK(hosts[3].name == "worker-3");
  CHECK_FALSE(hosts[3].slots);
  CHECK(hosts[3].line == 6);
}

TEST_CASE("a host file's errors name the line", "[hosts]") {
  CHECK(refusal([] { parse_host_file("a slots=2\n\nb slots=two\n", "hf"); }) ==
        "--hostfile=hf: line 3: cannot read 'b slots=two'; use HOST slots=N, HOST:N or HOST");
  CHECK(refusal([] { parse_host_file("a slots=2\nb gpus=2\n", "hf"); }) ==
        "--hostfile=hf: line 2: cannot read 'b gpus=2'; use HOST slots=N, HOST:N or HOST");
  CHECK(refusal([] { parse_host_file("a slots=2\n# b\na:2\n", "hf"); }) ==
        "--hostfile=hf: line 3: a is listed twice (first on line 1); list each host once");
  CHECK(refusal([] { parse_host_file("a slots=0\n", "hf"); }) ==
        "--hostfile=hf: line 1: a has 0 slots; a host runs at least 1 worker (leave it out "
        "instead)");
  CHECK(refusal([] { parse_host_file("# nothing\n\n", "hf"); }) ==
        "--hostfile=hf: names no host; put one HOST slots=N per line");
}

TEST_CASE("--include and --exclude as DeepSpeed's", "[hosts]") {
  const auto hosts = parse_host_option("w0:4,w1:4,w2:4", "--hosts=x");
  CHECK(names(filter_hosts(hosts, "", "")) == Names{"w0", "w1", "w2"});
  // The list's order stays, whatever the filter's.
  CHECK(names(filter_hosts(hosts, "w2@w0", "")) == Names{"w0", "w2"});
  const auto picked = filter_hosts(hosts, "w1:0,2@w2", "");
  REQUIRE(picked.size() == 2);
  CHECK(picked[0].workers == 2);
  CHECK(picked[0].devices == std::vector<int>{0, 2});
  CHECK(picked[1].workers == 4);
  CHECK(picked[1].devices.empty());
  const auto left = filter_hosts(hosts, "", "w0@w1:1");
  REQUIRE(names(left) == Names{"w1", "w2"});
  CHECK(left[0].devices == std::vector<int>{0, 2, 3});
  CHECK(left[0].workers == 3);
  CHECK(names(filter_hosts(hosts, "", "w1:0,1,2,3")) == Names{"w0", "w2"});
}

TEST_CASE("filters refuse what they cannot apply", "[hosts]") {
  const auto hosts = parse_host_option("w0:2,w1", "--hosts=x");
  CHECK(refusal([&] { filter_hosts(hosts, "w0", "w1"); }) ==
        "--include and --exclude cannot be used together: give one of them");
  CHECK(refusal([&] { filter_hosts(hosts, "w9", ""); }) ==
        "--include=w9: w9 is not in the host list");
  CHECK(refusal([&] { filter_hosts(hosts, "w0:2", ""); }) ==
        "--include=w0:2: w0 has slots 0..1, not 2");
  CHECK(refusal([&] { filter_hosts(hosts, "", "w1:0"); }) ==
        "--exclude=w1:0: w1 has no slot count to pick from; list it as w1:N");
  CHECK(refusal([&] { filter_hosts(hosts, "", "w0@w1"); }) ==
        "--exclude=w0@w1: leaves no host to run on");
}

TEST_CASE("each agent's command line", "[hosts]") {
  HostsOptions options;
  options.workers = "gpu";
  options.agent_options = {"--max-restarts=1"};
  options.entry = {"train.py", "--lr", "0.1"};
  const auto hosts = filter_hosts(parse_host_option("me@n0:4,n1", "--hosts=x"), "", "");
  CHECK(agent_arguments(options, hosts, 1) ==
        Names{"--nnodes=2", "--node-rank=1", "--nproc-per-node=gpu", "--master-addr=n0", "--tee=3",
              "--log-line-prefix-template=[n1:${rank}]:", "--max-restarts=1", "train.py", "--lr",
              "0.1"});
  options.master_addr_given = options.output_given = options.prefix_given = true;
  CHECK(agent_arguments(options, hosts, 0) == Names{"--nnodes=2", "--node-rank=0",
                                                    "--nproc-per-node=4", "--max-restarts=1",
                                                    "train.py", "--lr", "0.1"});
  CHECK(remote_command("/home/a b", "/opt/trainrun", "1.0", {"it's", "$HOME"}) ==
        "cd '/home/a b' && exec '/opt/trainrun' '--remote-agent=1.0' 'it'\\''s' '$HOME'");
  CHECK(ssh_command({"ssh", "-p", "2222"}, "n1", "cmd").front() == "ssh");
  CHECK(ssh_command({"ssh", "-p", "2222"}, "n1", "cmd")[1] == "-p");
  CHECK(ssh_command({"ssh"}, "n1", "cmd").back() == "cmd");
}

TEST_CASE("this machine's PET_* settings reach every agent as options", "[hosts]") {
  using trainrun::test::outcome;
  const std::map<std::string, std::string> env = {{"PET_MAX_RESTARTS", "3"},
                                                  {"PET_NO_PYTHON", "1"},
                                                  {"PET_MASTER_ADDR", "10.0.0.9"},
                                                  {"PET_PREFLIGHT", "warn"},
                                                  {"PET_NPROC_PER_NODE", "2"},
                                                  {"PET_ROLE", "trainer"},
                                                  {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}};
  const auto hosts = outcome({"--hosts=n0,n1", "--role=mine", "./train", "--lr"}, env).hosts;
  REQUIRE(hosts);
  // The command line wins over PET_ROLE; the worker count is each host's own. In the option
  // table's order.
  CHECK(hosts->agent_options == Names{"--no-python=1", "--master-addr=10.0.0.9", "--preflight=warn",
                                      "--max-restarts=3", "--shutdown-timeout=7", "--role=mine"});
  CHECK(hosts->workers == "2");
  // PET_MASTER_ADDR is the rendezvous host: the first host's name does not replace it.
  CHECK(hosts->master_addr_given);
  const auto planned = filter_hosts(parse_host_option("n0,n1", "--hosts=x"), "", "");
  const Names args = agent_arguments(*hosts, planned, 1);
  CHECK(std::count(args.begin(), args.end(), "--master-addr=10.0.0.9") == 1);
  CHECK(std::count_if(args.begin(), args.end(),
                      [](const std::string& a) { return a.rfind("--master-addr", 0) == 0; }) == 1);
  // A flag set to 0 goes too: a host's own PET_NO_PYTHON=1 does not turn it on there.
  const auto off = outcome({"--hosts=n0,n1", "train.py"}, {{"PET_NO_PYTHON", "0"}}).hosts;
  REQUIRE(off);
  CHECK(off->agent_options == Names{"--no-python=0"});
  CHECK_FALSE(off->master_addr_given);
}

TEST_CASE("forwarded variables: env files, then -x", "[hosts]") {
  const auto file = parse_env_file("# comment\nNCCL_DEBUG=INFO\nexport A=1=2\n\n", "f");
  CHECK(file == std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"A", "1=2"}});
  CHECK(refusal([] { parse_env_file("A=1\nnot a line\n", ".trainrun_env"); }) ==
        ".trainrun_env: line 2: cannot read 'not a line'; use NAME=VALUE");
  const auto env = forwarded_environment({file}, {"A=3", "HOME"}, {{"HOME", "/h"}});
  CHECK(env ==
        std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"A", "3"}, {"HOME", "/h"}});
  CHECK(refusal([] { forwarded_environment({}, {"UNSET"}, {}); }) ==
        "-x UNSET: UNSET is not set on this machine; set it or give -x UNSET=VALUE");
  CHECK(refusal([] {
          forwarded_environment({}, {"TRAINRUN_RDZV_TOKEN=x"}, {});
        }).rfind("TRAINRUN_RDZV_TOKEN is not forwarded", 0) == 0);
}

TEST_CASE("a forwarded value that is not UTF-8 is refused: the handover is JSON text", "[hosts]") {
  CHECK(refusal([] { parse_env_file("A=1\nB=caf\xc3\n", ".trainrun_env"); }) ==
        ".trainrun_env: line 2: B: byte 0xC3 of the value is not UTF-8; --hosts hands the values "
        "to the agents as text and cannot carry it; set it in the hosts' own environment instead");
  CHECK(refusal([] {
          forwarded_environment({}, {"A=\xff"}, {});
        }).rfind("-x A: byte 0xFF of the value is not UTF-8;", 0) == 0);
  CHECK(refusal([] {
          forwarded_environment({}, {"HOME"}, {{"HOME", "/h\xe9"}});
        }).rfind("-x HOME: byte 0xE9 of the value is not UTF-8;", 0) == 0);
  CHECK(forwarded_environment({}, {"A=\xc3\xa9"}, {}).at("A") == "\xc3\xa9");
}

TEST_CASE("the handover line goes there and back", "[hosts]") {
  const std::string line = encode_handover({"t0k", {{"A", "x\ny"}}, "/opt/venv/bin/python3"});
  CHECK(line.back() == '\n');
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  const Handover back = decode_handover(line.substr(0, line.size() - 1));
  CHECK(back.token == "t0k");
  CHECK(back.env.at("A") == "x\ny");
  CHECK(back.python == "/opt/venv/bin/python3");
  CHECK(refusal([] { decode_handover("hello"); }).rfind("--remote-agent: standard input", 0) == 0);
}

TEST_CASE("the launcher's stop line names its signal; anything else is a heartbeat", "[hosts]") {
  const std::string line = stop_line(SIGINT);
  CHECK(line == "stop 2\n");
  CHECK(stop_signal_of(line.substr(0, line.size() - 1)) == SIGINT);
  CHECK_FALSE(stop_signal_of(""));
  for (const char* other : {"stop", "stop ", "stop 0", "stop -2", "stop 2x", "stop 999", "go 2"})
    CHECK_FALSE(stop_signal_of(other));
}

TEST_CASE("the launcher's watch stops the job with the launcher's own stop signal", "[hosts]") {
  for (const auto& [signals, expected] : {std::pair{std::vector<int>{SIGTERM, SIGINT}, SIGINT},
                                          {std::vector<int>{SIGTERM}, SIGTERM}}) {
    boost::asio::io_context io;
    int got = 0;
    int p[2];
    REQUIRE(::pipe(p) == 0);
    LauncherWatch watch(io, p[0], signals, [&](int sig) { got = sig, io.stop(); });
    // Heartbeats, then the stop: the signal is the launcher's where this agent stops on it.
    const std::string lines = "\n\n" + stop_line(SIGINT);
    REQUIRE(::write(p[1], lines.data(), lines.size()) == static_cast<ssize_t>(lines.size()));
    ::close(p[1]);
    io.run_for(std::chrono::seconds(10));
    CHECK(got == expected);
  }
}

TEST_CASE("an agent runs the launcher's Python where it exists and PYTHON_EXEC leaves it open",
          "[hosts]") {
  LaunchConfig python_job;
  python_job.entry_mode = EntryMode::python_script;
  std::string note;
  LaunchConfig c = python_job;
  use_launcher_python(c, "/bin/sh", &note);
  CHECK((c.python_exec == "/bin/sh" && c.python_source == PythonSource::launcher));
  CHECK(note.empty());
  c = python_job;
  use_launcher_python(c, "/nonexistent/venv/bin/python3", &note);
  CHECK((c.python_exec == "python3" && c.python_source == PythonSource::path));
  CHECK(note.rfind("the launcher's Python /nonexistent/venv/bin/python3 is not on this host", 0) ==
        0);
  note.clear();
  c = python_job;
  c.python_exec = "/opt/py";
  c.python_source = PythonSource::variable;
  use_launcher_python(c, "/bin/sh", &note);
  CHECK((c.python_exec == "/opt/py" && note.empty()));
  LaunchConfig binary;
  binary.entry_mode = EntryMode::executable;
  use_launcher_python(binary, "/bin/sh", &note);
  CHECK((binary.python_source == PythonSource::path && note.empty()));
}

TEST_CASE("a worker line's host and rank", "[hosts]") {
  CHECK(split_worker_line("[n1:12]:text [x]:", "n1") ==
        std::make_pair(12, std::string("text [x]:")));
  CHECK_FALSE(split_worker_line("[n10:1]:text", "n1"));
  CHECK_FALSE(split_worker_line("trainrun: hosting", "n1"));
}

TEST_CASE("rank ranges", "[dedup]") {
  CHECK(rank_ranges({3, 0, 1, 2, 8, 10, 11, 10}) == "0-3,8,10-11");
  CHECK(rank_ranges({5}) == "5");
}

namespace {
using Clock = LineDedup::Clock;
std::vector<std::string> texts(const std::vector<LineDedup::Out>& out) {
  std::vector<std::string> t;
  for (const auto& o : out) t.push_back(std::to_string(o.stream) + " " + o.line);
  return t;
}
}  // namespace

TEST_CASE("dedup collapses one line of many ranks within the window", "[dedup]") {
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  const auto ms = [&](int n) { return t0 + std::chrono::milliseconds(n); };
  LineDedup d(std::chrono::milliseconds(1000));
  d.add(ms(0), 1, 0, "start", "[a:0]:start");
  for (int r = 0; r < 4; ++r) d.add(ms(10 + r), 2, r, "Warn", "[a:" + std::to_string(r) + "]:Warn");
  d.add(ms(20), 2, std::nullopt, "", "a: trainrun: note");
  CHECK(d.due(ms(999)).empty());
  CHECK(d.next_due() == ms(1000));
  CHECK(texts(d.due(ms(1000))) == Names{"1 [a:0]:start"});
  CHECK(texts(d.due(ms(1013))) == Names{"2 [0-3]:Warn", "2 a: trainrun: note"});
  // After its window, the same text starts over.
  d.add(ms(3000), 2, 5, "Warn", "[b:5]:Warn");
  CHECK(texts(d.flush_all()) == Names{"2 [b:5]:Warn"});
  CHECK_FALSE(d.next_due());
}

TEST_CASE("dedup keeps each rank's lines in order", "[dedup]") {
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  const auto ms = [&](int n) { return t0 + std::chrono::milliseconds(n); };
  LineDedup d(std::chrono::milliseconds(1000));
  d.add(ms(0), 1, 0, "B", "[a:0]:B");
  d.add(ms(1), 1, 1, "A", "[a:1]:A");
  // Rank 1's B came after its A: joining rank 0's B, which leaves first, would reorder them.
  d.add(ms(2), 1, 1, "B", "[a:1]:B");
  // A rank printing the same line again is a second line, here joining rank 1's; so does rank 2.
  d.add(ms(3), 1, 0, "B", "[a:0]:B");
  d.add(ms(4), 1, 2, "B", "[a:2]:B");
  CHECK(texts(d.flush_all()) == Names{"1 [a:0]:B", "1 [a:1]:A", "1 [0-2]:B"});
}
