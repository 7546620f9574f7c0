#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <sstream>

#include "cli/option_values.hpp"
#include "parse_helpers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/cli/cli_docs.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
#include "trainrun/launch/workers/worker_count.hpp"

using namespace trainrun::launch;
using trainrun::test::parse;

TEST_CASE("defaults match torchrun") {
  auto c = parse({"train.py"});
  CHECK(c.min_nodes == 1);
  CHECK(c.max_nodes == 1);
  CHECK(c.nproc_per_node.kind == WorkerCount::Kind::number);
  CHECK(c.nproc_per_node.number == 1);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 29500);
  CHECK_FALSE(c.master_port_given);
  CHECK(c.rdzv_backend == RendezvousBackend::static_);
  CHECK(c.rdzv_id == "none");
  CHECK(c.max_restarts == 0);
  CHECK(c.role == "default");
  CHECK(c.shutdown_timeout == 30.0);
  CHECK(c.entry_mode == EntryMode::python_script);
  CHECK(c.stop_signals == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.forward_signals == std::vector<int>{SIGUSR1, SIGUSR2});
}

TEST_CASE("both spellings and both value forms") {
  for (auto args : std::vector<std::vector<std::string>>{{"--nproc-per-node=4", "x"},
                                                         {"--nproc_per_node=4", "x"},
                                                         {"--nproc-per-node", "4", "x"}}) {
    CHECK(parse(args).nproc_per_node.number == 4);
  }
  CHECK(parse({"--max_restarts=3", "x"}).max_restarts == 3);
  CHECK(parse({"--rdzv_endpoint", "node0:29400", "x"}).rdzv_endpoint == "node0:29400");
}

TEST_CASE("everything after the entrypoint belongs to it") {
  auto c = parse({"--nproc-per-node=2", "train.py", "--nproc-per-node=9", "-m", "--lr", "0.1"});
  CHECK(c.nproc_per_node.number == 2);
  CHECK(c.entrypoint == "train.py");
  CHECK(c.entry_args == std::vector<std::string>{"--nproc-per-node=9", "-m", "--lr", "0.1"});
  CHECK_FALSE(c.module);
}

TEST_CASE("PET variables give defaults; the command line wins") {
  auto c = parse({"x"}, {{"PET_NPROC_PER_NODE", "8"},
                         {"PET_NNODES", "2:4"},
                         {"PET_STANDALONE", "0"},
                         {"PET_MASTER_PORT", "1234"},
                         {"PET_RDZV_BACKEND", "c10d"},
                         {"PET_RDZV_ENDPOINT", "h:29400"}});
  CHECK(c.nproc_per_node.number == 8);
  CHECK(c.min_nodes == 2);
  CHECK(c.max_nodes == 4);
  CHECK_FALSE(c.standalone);
  CHECK(c.master_port == 1234);
  CHECK(c.master_port_given);
  CHECK(parse({"--nproc-per-node=2", "x"}, {{"PET_NPROC_PER_NODE", "8"}}).nproc_per_node.number ==
        2);
  CHECK(parse({"x"}, {{"PET_NO_PYTHON", "1"}}).no_python);
  CHECK_THROWS_WITH(parse({"x"}, {{"PET_NNODES", "0"}}), Catch::Contains("PET_NNODES=0"));
}

TEST_CASE("a rendezvous that cannot run is refused when the command line is parsed") {
  CHECK_THROWS_WITH(parse({"--nnodes=2:4", "x"}),
                    Catch::Contains("the static backend needs a fixed node count"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--node-rank=2", "x"}),
                    Catch::Contains("--node-rank=2: out of range"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--master-port=65535", "x"}),
                    Catch::Contains("rdzv_port=N"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--rdzv-backend=c10d", "x"}),
                    Catch::Contains("needs --rdzv-endpoint"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:0", "x"}),
                    Catch::Contains("port 0 only works with --rdzv-conf is_host=1"));
  // A dynamic job's --node-rank asks for a node rank; one that no round of it has is refused.
  const std::vector<std::string> elastic = {"--nnodes=1:3", "--rdzv-backend=c10d",
                                            "--rdzv-endpoint=h:29400"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), elastic.begin(), elastic.end());
    more.push_back("x");
    return more;
  };
  CHECK_THROWS_WITH(parse(with({"--node-rank=3"})),
                    Catch::StartsWith("--node-rank=3: out of range for --nnodes=1:3 (use 0..2)"));
  CHECK(parse(with({"--node-rank=2"})).node_rank_given);
  CHECK(parse(with({}), {{"PET_NODE_RANK", "1"}}).node_rank_given);
  CHECK_FALSE(parse(with({})).node_rank_given);
  // One node, static: no rendezvous, nothing to check.
  CHECK_NOTHROW(parse({"--node-rank=5", "x"}));
  CHECK_NOTHROW(parse(
      {"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:0", "--rdzv-conf=is_host=1", "x"}));
}

TEST_CASE("cpu, gpu and auto are kept as words and counted by the agent") {
  auto gpu = parse({"x"}, {{"PET_NPROC_PER_NODE", "gpu"}}).nproc_per_node;
  CHECK(gpu.kind == WorkerCount::Kind::gpu);
  CHECK(gpu.source == "PET_NPROC_PER_NODE=gpu");
  CHECK(parse({"--nproc-per-node=auto", "x"}).nproc_per_node.kind == WorkerCount::Kind::automatic);
  auto cpu = parse({"--nproc-per-node=cpu", "x"}).nproc_per_node;
  CHECK(cpu.kind == WorkerCount::Kind::cpu);
  CHECK(resolve_worker_count(cpu) >= 1);
  CHECK(resolve_worker_count(WorkerCount(3)) == 3);
}

TEST_CASE("entry modes") {
  CHECK(parse({"-m", "pkg.mod"}).entry_mode == EntryMode::python_module);
  CHECK(parse({"--no-python", "prog.py"}).entry_mode == EntryMode::executable);
  CHECK(parse({"./train"}).entry_mode == EntryMode::executable);
  auto c = parse({"-m", "pkg.mod", "a"}, {{"PYTHON_EXEC", "/usr/bin/python3"}});
  CHECK(worker_argv(c) == std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.mod", "a"});
  CHECK(worker_argv(parse({"t.py", "b"})) ==
        std::vector<std::string>{"python3", "-u", "t.py", "b"});
  CHECK(worker_argv(c, true) == std::vector<std::string>{"/usr/bin/python3", "-X", "faulthandler",
                                                         "-u", "-m", "pkg.mod", "a"});
  // The command given with --no-python is the user's, untouched.
  CHECK(worker_argv(parse({"--no-python", "python3", "t.py"}), true) ==
        std::vector<std::string>{"python3", "t.py"});
}

TEST_CASE("standalone is one node with its own rendezvous") {
  auto c = parse({"--standalone", "x"});
  CHECK(c.standalone);
  CHECK(c.max_nodes == 1);
  CHECK(c.rdzv_backend == RendezvousBackend::c10d);
}

TEST_CASE("bad values name the option, the value and the rule") {
  CHECK_THROWS_WITH(parse({"--nnodes=0", "x"}), Catch::Contains("--nnodes=0"));
  CHECK_THROWS_WITH(parse({"--nnodes=3:2", "x"}),
                    Catch::Contains("MIN must not exceed MAX (got MIN=3, MAX=2)"));
  CHECK_THROWS_AS(parse({"--nnodes=x", "x"}), UsageError);
  CHECK_THROWS_AS(parse({"--nnodes=1:", "x"}), UsageError);
  CHECK_THROWS_AS(parse({"--nnodes=99999999999", "x"}), UsageError);
  CHECK_THROWS_WITH(parse({"--nproc-per-node=0", "x"}), Catch::Contains("--nproc-per-node=0"));
  CHECK_THROWS_AS(parse({"--nproc-per-node=2x", "x"}), UsageError);
  CHECK_THROWS_WITH(parse({"--max-restarts=-1", "x"}), Catch::Contains("--max-restarts=-1"));
  CHECK_THROWS_WITH(parse({"--redirects=5", "x"}), Catch::Contains("--redirects=5"));
  CHECK_THROWS_WITH(parse({"--redirects=0:7", "x"}), Catch::Contains("7 is not a stream"));
  CHECK_THROWS_AS(parse({"--redirects=0:1,0:2", "x"}), UsageError);
  CHECK_THROWS_WITH(parse({"--rdzv-conf=join_timeout", "x"}), Catch::Contains("KEY=VALUE"));
  CHECK_THROWS_WITH(parse({"-m", "--no-python", "x"}), Catch::Contains("--no-python"));
  CHECK_THROWS_WITH(parse({}), Catch::Contains("no entrypoint"));
  CHECK_THROWS_WITH(parse({"--what", "x"}), Catch::Contains("unknown option --what"));
  CHECK_THROWS_AS(parse({"--master-port=-1", "x"}), UsageError);
  CHECK_THROWS_AS(parse({"--monitor-interval=0", "x"}), UsageError);
  CHECK_THROWS_WITH(parse({"--hang-timeout=0.5", "x"}),
                    Catch::Contains("--hang-timeout=0.5: must be 0 (off) or at least 1 second"));
  CHECK_THROWS_WITH(parse({"--hang-timeout=-1", "x"}), Catch::Contains("--hang-timeout=-1"));
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint=h:2379",
                           "--hang-timeout=10", "x"}),
                    Catch::Contains("needs the built-in rendezvous"));
  CHECK(parse({"--hang-timeout=10", "x"}).hang_timeout == 10);
  CHECK(parse({"x"}, {{"PET_HANG_TIMEOUT", "30"}}).hang_timeout == 30);
  CHECK(parse({"x"}).hang_timeout == 0);
  CHECK_THROWS_WITH(parse({"--exit-grace=-1", "x"}),
                    Catch::Contains("--exit-grace=-1: expected a number of seconds >= 0"));
  CHECK(parse({"--exit-grace=2.5", "x"}).exit_grace == 2.5);
  CHECK(parse({"x"}, {{"PET_EXIT_GRACE", "0"}}).exit_grace == 0);
  CHECK(parse({"x"}).exit_grace == 30);
  CHECK_THROWS_AS(parse({"--start-method=thread", "x"}), UsageError);
}

TEST_CASE("help and version") {
  auto help = parse_command_line({"--help"}, {});
  REQUIRE(help.help_text);
  CHECK_THAT(*help.help_text, Catch::Contains("Failures and signals:"));
  auto version = parse_command_line({"--version"}, {});
  REQUIRE(version.help_text);
  CHECK_THAT(*version.help_text, Catch::StartsWith("trainrun "));
}

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("--help fits its width and names each option once by its dashed name") {
  for (int width : {40, 60, 80, 100}) {
    INFO("width " << width);
    const std::string help = help_text(false, width);
    for (const auto& line : lines_of(help)) CHECK(line.size() <= static_cast<size_t>(width));
    // The options, without the last line that names --help-all.
    const std::string options = help.substr(0, help.rfind('\n', help.size() - 2));
    for (const auto& doc : option_docs()) {
      const std::string dashed =
          *std::find_if(doc.names.begin(), doc.names.end(),
                        [](const std::string& n) { return n.rfind("--", 0) == 0; });
      INFO(dashed);
      // Once: not followed by more of a longer name ("--help" in "--help-all").
      size_t found = 0;
      for (size_t at = options.find(dashed); at != std::string::npos;
           at = options.find(dashed, at + 1)) {
        const char next = at + dashed.size() < options.size() ? options[at + dashed.size()] : ' ';
        found +=
            std::isalnum(static_cast<unsigned char>(next)) || next == '-' || next == '_' ? 0 : 1;
      }
      CHECK(found == 1);
    }
    CHECK_THAT(help, !Catch::Contains("--nproc_per_node"));
    CHECK_THAT(lines_of(help).back(), Catch::Contains("trainrun --help-all"));
  }
  CHECK(lines_of(help_text(false, 80)).size() < 70);
}

TEST_CASE("--help-all gives every option its full description, default and variable") {
  const std::string all = help_text(true, 80);
  for (const auto& line : lines_of(all)) CHECK(line.size() <= 80);
  // Words as the table has them, the wrapping undone.
  std::string flat;
  for (const auto& line : lines_of(all)) flat += " " + trainrun::trim(line);
  for (const auto& doc : option_docs()) {
    INFO(doc.names.back());
    std::string help;
    for (const auto& word : trainrun::split(doc.help, ' ')) help += " " + word;
    CHECK_THAT(flat, Catch::Contains(help));
    if (!doc.default_value.empty())
      CHECK_THAT(flat, Catch::Contains("(default: " + doc.default_value + ")"));
  }
  CHECK_THAT(flat, Catch::Contains("[env PET_NPROC_PER_NODE]"));
  CHECK(*parse_command_line({"--help-all"}, {}).help_text == all);
}

TEST_CASE(
    "the help's width: COLUMNS, else the terminal's, else 80; never wider than the terminal") {
  CHECK(help_width({}, std::nullopt) == 80);
  CHECK(help_width({{"COLUMNS", "60"}}, std::nullopt) == 60);
  CHECK(help_width({}, 72) == 72);
  CHECK(help_width({{"COLUMNS", "90"}}, 72) == 72);
  CHECK(help_width({{"COLUMNS", "50"}}, 72) == 50);
  // Within 40..100 unless the terminal is narrower; a COLUMNS that is no number is not read.
  CHECK(help_width({{"COLUMNS", "500"}}, std::nullopt) == 100);
  CHECK(help_width({{"COLUMNS", "10"}}, std::nullopt) == 40);
  CHECK(help_width({}, 30) == 30);
  CHECK(help_width({{"COLUMNS", "wide"}}, std::nullopt) == 80);
  CHECK(help_width({{"COLUMNS", "-5"}}, 70) == 70);
  const auto narrow = parse_command_line({"--help"}, {{"COLUMNS", "50"}});
  for (const auto& line : lines_of(*narrow.help_text)) CHECK(line.size() <= 50);
  const auto terminal = parse_command_line({"--help"}, {}, read_config_file, 45);
  for (const auto& line : lines_of(*terminal.help_text)) CHECK(line.size() <= 45);
}

TEST_CASE("std specs") {
  CHECK(parse_std_spec("3", "-r").for_rank(7) == Std::all);
  auto m = parse_std_spec("0:1,2:3", "-r");
  CHECK(m.for_rank(0) == Std::out);
  CHECK(m.for_rank(1) == Std::none);
  CHECK(m.for_rank(2) == Std::all);
  CHECK_THROWS_AS(parse_std_spec("-1", "-r"), UsageError);
  CHECK_THROWS_AS(parse_std_spec("a:1", "-r"), UsageError);
  CHECK_THROWS_AS(parse_std_spec("", "-r"), UsageError);
}

TEST_CASE("the text of each value, as the option table shows a default, reads back as the value") {
  CHECK(nnodes_text(1, 1) == "1:1");
  CHECK(parse_nnodes(nnodes_text(2, 4), "x") == std::pair<int, int>{2, 4});
  CHECK(worker_count_text(parse_worker_count("gpu", "x")) == "gpu");
  CHECK(worker_count_text(WorkerCount(8)) == "8");
  CHECK(seconds_text(0.1) == "0.1");
  CHECK(seconds_text(30) == "30");
  CHECK(parse_seconds(seconds_text(1.0 / 3), "x") == 1.0 / 3);
  for (const char* spec : {"0", "3", "0:1,3:2"})
    CHECK(std_spec_text(parse_std_spec(spec, "x")) == spec);
  CHECK(rank_list_text({0, 2, 5}) == "0,2,5");
  CHECK(signal_list_text({SIGTERM, SIGCONT, SIGXCPU}) == "SIGTERM,SIGCONT,SIGXCPU");
  const std::vector<std::string> filters = {"a,b", "c", "d,"};
  CHECK(parse_filter_list(filter_list_text(filters)) == filters);
}

TEST_CASE("rdzv conf") {
  auto conf = parse_rdzv_conf("join_timeout=5, last_call_timeout=1,is_host=1,token_file=/x", "c");
  CHECK(conf.join_timeout == std::chrono::seconds(5));
  CHECK(conf.last_call_timeout == std::chrono::seconds(1));
  CHECK(conf.is_host == true);
  CHECK(conf.token.file == "/x");
  CHECK(rdzv_conf_entries("a=1, b = 2", "c") ==
        std::map<std::string, std::string>{{"a", "1"}, {"b", "2"}});
  CHECK(rdzv_conf_entries("", "c").empty());
  CHECK_FALSE(parse_rdzv_conf("", "c").join_timeout);
  CHECK_THROWS_AS(parse_rdzv_conf("=3", "c"), UsageError);
  CHECK_THROWS_AS(parse_rdzv_conf("heartbeat_timeout=-1", "c"), UsageError);
  CHECK_THROWS_AS(parse_rdzv_conf("is_host=maybe", "c"), UsageError);
}

TEST_CASE("signals") {
  CHECK(parse_signal_name("SIGTERM", "s") == SIGTERM);
  CHECK(parse_signal_name("usr1", "s") == SIGUSR1);
  CHECK_THROWS_AS(parse_signal_name("SIGKILL", "s"), UsageError);
  auto c = parse({"--signals-to-handle=SIGINT,SIGUSR2", "x"});
  CHECK(c.stop_signals == std::vector<int>{SIGINT});
  CHECK(c.forward_signals == std::vector<int>{SIGUSR2});
}

TEST_CASE("local rank expansion") {
  CHECK(expand_local_rank("out${local_rank}.log", 3) == "out3.log");
  CHECK(expand_local_rank("$local_rank/$local_rank", 1) == "1/1");
  CHECK(expand_local_rank("$$local_rank", 1) == "$local_rank");
  CHECK(expand_local_rank("$HOME $", 1) == "$HOME $");
  // string.Template's names run on: "$local_rankX" names local_rankX, which torchrun leaves.
  CHECK(expand_local_rank("$local_rankX $local_rank_1 $local_rank9", 2) ==
        "$local_rankX $local_rank_1 $local_rank9");
  CHECK(expand_local_rank("$local_rank.log $local_rank-x ${local_rank}X", 2) == "2.log 2-x 2X");
  CHECK(expand_local_rank("${local_rankX} $LOCAL_RANK", 2) == "${local_rankX} $LOCAL_RANK");
}

TEST_CASE("a run id longer than the rendezvous protocol allows is refused on one node too") {
  CHECK(parse({"--rdzv-id=" + std::string(255, 'r'), "x"}).rdzv_id == std::string(255, 'r'));
  CHECK(parse({"--rdzv-id=team/job7", "x"}).rdzv_id == "team/job7");
  CHECK_THROWS_WITH(parse({"--rdzv-id=" + std::string(256, 'r'), "x"}),
                    Catch::Contains("256 bytes; a run id has at most 255"));
}

TEST_CASE("a run id that is not UTF-8 is refused with one line rather than sent as U+FFFD") {
  CHECK(parse({"--rdzv-id=\xc3\xa9t\xc3\xa9", "x"}).rdzv_id == "\xc3\xa9t\xc3\xa9");
  CHECK_THROWS_WITH(
      parse({"--rdzv-id=r\xff", "x"}),
      Catch::Equals("--rdzv-id=r...: byte 0xFF is not UTF-8; a run id travels between "
                    "nodes as text, so it must be UTF-8"));
  CHECK_THROWS_WITH(parse({"x"}, {{"PET_RDZV_ID", "job\xc3"}}),
                    Catch::StartsWith("PET_RDZV_ID=job...: byte 0xC3 is not UTF-8;"));
}

TEST_CASE("--option= is the empty string, not a request for the next argument") {
  CHECK_THROWS_WITH(parse({"--rdzv-id=", "--max-restarts=3", "x"}),
                    Catch::Equals("--rdzv-id=: must not be empty"));
  auto c = parse({"--log-dir=", "--tee", "3", "train.py", "--log_dir="});
  CHECK(c.log_dir.empty());
  CHECK(c.tee.all_ranks == Std::all);
  CHECK(c.entrypoint == "train.py");
  CHECK(c.entry_args == std::vector<std::string>{"--log_dir="});
  c = parse({"--summary_file=", "-v", "x"});
  CHECK(c.summary_file.empty());
  CHECK(c.verbosity == Verbosity::verbose);
  CHECK(c.entrypoint == "x");
}

TEST_CASE("an empty value is refused where torchrun refuses it, else it is the default") {
  for (const char* name :
       {"nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port", "rdzv-backend",
        "rdzv-id", "max-restarts", "monitor-interval", "shutdown-timeout", "signals-to-handle",
        "role", "start-method", "event-log-handler", "redirects", "tee", "numa-binding",
        "print-completion"}) {
    const std::string given = std::string("--") + name + "=";
    INFO(given);
    CHECK_THROWS_WITH(parse({given, "x"}), Catch::StartsWith(given + ":"));
  }
  const LaunchConfig defaults = parse({"x"});
  for (const char* name :
       {"rdzv-endpoint", "rdzv-conf", "local-addr", "log-dir", "local-ranks-filter",
        "log-line-prefix-template", "duplicate-stdout-filters", "duplicate-stderr-filters",
        "logs-specs", "summary-file"}) {
    const std::string given = std::string("--") + name + "=";
    INFO(given);
    const ParseOutcome out = trainrun::test::outcome({given, "x"});
    CHECK(out.warnings.empty());
    const LaunchConfig& c = out.config;
    CHECK(c.entrypoint == "x");
    CHECK(c.rdzv_endpoint == defaults.rdzv_endpoint);
    CHECK(c.rdzv_conf.join_timeout == defaults.rdzv_conf.join_timeout);
    CHECK(c.rdzv_conf.is_host == defaults.rdzv_conf.is_host);
    CHECK(c.rdzv_conf.token.file == defaults.rdzv_conf.token.file);
    CHECK(c.rdzv_conf.liveness.heartbeat_timeout == defaults.rdzv_conf.liveness.heartbeat_timeout);
    CHECK(c.local_addr == defaults.local_addr);
    CHECK(c.log_dir == defaults.log_dir);
    CHECK(c.local_ranks_filter == defaults.local_ranks_filter);
    CHECK(c.log_line_prefix_template == defaults.log_line_prefix_template);
    CHECK(c.duplicate_stdout_filters == defaults.duplicate_stdout_filters);
    CHECK(c.duplicate_stderr_filters == defaults.duplicate_stderr_filters);
    CHECK(c.summary_file == defaults.summary_file);
  }
  // PET_<NAME>= is the same as --name=.
  CHECK_THROWS_WITH(parse({"x"}, {{"PET_SIGNALS_TO_HANDLE", ""}}),
                    Catch::StartsWith("PET_SIGNALS_TO_HANDLE=: names no signal"));
  CHECK(parse({"x"}, {{"PET_LOG_DIR", ""}}).log_dir.empty());
}

TEST_CASE("a worker count above what a node can run is refused on one node as on many") {
  const ProcessLimits none;
  for (const std::string nnodes : {"1", "2"}) {
    INFO(nnodes);
    const LaunchConfig c =
        parse({"--nnodes=" + nnodes, "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400", "x"},
              {{"PET_NPROC_PER_NODE", "1000000"}});
    CHECK_THROWS_WITH(
        check_worker_limits(c, none),
        Catch::StartsWith("PET_NPROC_PER_NODE=1000000: more workers than one node can run"));
  }
  CHECK_THROWS_WITH(check_worker_limits(parse({"--nproc-per-node=65537", "x"}), none),
                    Catch::Contains("at most"));
}

TEST_CASE("the static backend takes the master address and port from --rdzv-endpoint") {
  auto c = parse({"--nnodes=2", "--node-rank=1", "--rdzv-endpoint=node0:29600", "x"});
  CHECK(c.master_addr == "node0");
  CHECK(c.master_port == 29600);
  CHECK(c.master_port_given);
  // As torchrun's get_rdzv_endpoint: the endpoint wins over --master-addr/--master-port.
  CHECK(parse({"--master-port=1234", "--rdzv-endpoint=[::1]:29600", "x"}).master_addr == "::1");
  CHECK(parse({"--rdzv-backend=c10d", "--rdzv-endpoint=h:29400", "x"}).master_port == 29500);
  CHECK_THROWS_WITH(parse({"--nnodes=2", "--rdzv-endpoint=node0", "x"}),
                    "--rdzv-endpoint=node0: the static backend needs HOST:PORT (the master port, "
                    "the same on every node)");
}

TEST_CASE("a long option may be shortened to an unambiguous prefix, as in torchrun") {
  CHECK(parse({"--nproc_per=2", "x"}).nproc_per_node.number == 2);
  CHECK(parse({"--nproc", "3", "x"}).nproc_per_node.number == 3);  // both spellings: one option
  CHECK(parse({"--standal", "x"}).standalone);
  CHECK(parse({"--master-p=1234", "x"}).master_port == 1234);
  CHECK(parse({"x", "--standal"}).entry_args == std::vector<std::string>{"--standal"});
  CHECK_THROWS_WITH(parse({"--master=x", "x"}),
                    "ambiguous option --master=x: could be --master-addr, --master-port (see "
                    "trainrun --help)");
  CHECK_THROWS_WITH(parse({"--standlone", "x"}),
                    "unknown option --standlone; did you mean --standalone? (see trainrun --help)");
  CHECK_THROWS_WITH(parse({"--frobnicate", "x"}),
                    "unknown option --frobnicate (see trainrun --help)");
}

TEST_CASE("trainrun's own options break no prefix that torchrun reads as one of its options") {
  // --no-p: torchrun's --no-python, though --no-preflight starts so too.
  CHECK(parse({"--no-p", "/bin/true"}).no_python);
  CHECK(parse({"--no_p", "/bin/true"}).no_python);
  CHECK(parse({"--no-pre", "x"}).preflight == PreflightMode::off);
  // A prefix of two trainrun options and no torchrun one is ambiguous, as before.
  CHECK_THROWS_WITH(parse({"--hos", "x"}),
                    "ambiguous option --hos: could be --hostfile, --hosts (see trainrun --help)");
}

TEST_CASE("--standalone with more than one node is refused") {
  CHECK_THROWS_WITH(parse({"--standalone", "--nnodes=2", "x"}),
                    "--nnodes=2: --standalone runs one node; for 2 nodes drop --standalone and "
                    "give every node --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT");
  CHECK_THROWS_WITH(parse({"--standalone", "x"}, {{"PET_NNODES", "1:2"}}),
                    Catch::StartsWith("PET_NNODES=1:2: --standalone runs one node"));
  CHECK(parse({"--standalone", "--nnodes=1", "x"}).standalone);
}

TEST_CASE("every word the completion offers for a value is one its option takes") {
  for (const auto& doc : option_docs()) {
    std::string option = doc.names.back().substr(2);
    std::replace(option.begin(), option.end(), '_', '-');
    for (const auto& word : completion_values(option)) {
      INFO("--" << option << "=" << word);
      // A dynamic backend needs an endpoint besides.
      CHECK_NOTHROW(trainrun::test::outcome(
          {"--" + option + "=" + word, "--rdzv-endpoint=node0:29400", "x"}));
    }
  }
  CHECK(completion_values("rdzv-backend") ==
        std::vector<std::string>{"static", "c10d", "etcd", "etcd-v2"});
  CHECK(completion_values("preflight") == std::vector<std::string>{"on", "warn", "off"});
  CHECK(completion_values("redirects") == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(completion_values("signals-to-handle") == handled_signal_names());
  CHECK(completion_values("print-completion") == completion_shells());
  CHECK(completion_values("log-dir").empty());
  // Each signal offered is one --signals-to-handle takes.
  for (const auto& name : handled_signal_names())
    CHECK_NOTHROW(parse({"--signals-to-handle=SIGTERM," + name, "x"}));
  CHECK(completion_script("zsh", "zsh")
            .find("--rdzv-backend|--rdzv_backend) reply=(static c10d etcd etcd-v2) ;;") !=
        std::string::npos);
}

TEST_CASE("-x refuses a value that holds a newline, which would come apart into two names") {
  CHECK_THROWS_WITH(parse({"--hosts=node0:1", "-x", "FOO=a\nb", "x"}),
                    "-x FOO=a\\x0ab: a value that holds a newline cannot be forwarded (-x and "
                    ".trainrun_env take one line each); set it on the hosts instead");
  CHECK_NOTHROW(parse({"--hosts=node0:1", "-x", "FOO=a", "-x", "BAR=b", "x"}));
}

TEST_CASE("--preload takes dotted Python names, from PET_PRELOAD too") {
  CHECK(parse({"--preload=torch,torch.distributed", "x.py"}).preload ==
        std::vector<std::string>{"torch", "torch.distributed"});
  CHECK(parse({"x.py"}, {{"PET_PRELOAD", "numpy"}}).preload == std::vector<std::string>{"numpy"});
  CHECK(parse({"x.py"}, {{"PET_PRELOAD", ""}}).preload.empty());
  CHECK(parse({"x.py"}).preload.empty());
  for (const char* bad : {"to rch", "torch,", ",torch", "torch..nn", "1torch", "torch-x", "a.1b"})
    CHECK_THROWS_WITH(parse({std::string("--preload=") + bad, "x.py"}),
                      Catch::Contains("is not a module name"));
  CHECK_THROWS_WITH(parse({"x.py"}, {{"PET_PRELOAD", "a b"}}),
                    Catch::StartsWith("PET_PRELOAD=a b: 'a b' is not a module name"));
}

TEST_CASE("a Python worker's argv: the interpreter and its options, then what it runs") {
  CHECK(python_options_end({"python3", "-X", "faulthandler", "-u", "-m", "pkg", "a"}) == 4);
  CHECK(python_options_end({"python3", "-u", "train.py", "-u"}) == 2);
  CHECK(python_options_end({"python3"}) == 1);
}
