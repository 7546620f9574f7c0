// The options and behaviours that torchrun 2.x added, as the parser sees them.
#include <catch2/catch.hpp>

#include "cli/option_values.hpp"
#include "parse_helpers.hpp"
#include "trainrun/launch/cli/command_line.hpp"

using namespace trainrun::launch;
using trainrun::test::outcome;
using trainrun::test::parse;

TEST_CASE("-- ends the options; the entrypoint may then start with a dash") {
  auto c = parse({"--nproc-per-node=2", "--", "train.py", "--lr", "--", "x"});
  CHECK(c.nproc_per_node.number == 2);
  CHECK(c.entrypoint == "train.py");
  CHECK(c.entry_args == std::vector<std::string>{"--lr", "--", "x"});
  auto dashed = parse({"--no-python", "--", "-prog", "a"});
  CHECK(dashed.entrypoint == "-prog");
  CHECK(dashed.entry_args == std::vector<std::string>{"a"});
  // After the entrypoint, "--" is the entrypoint's own argument.
  CHECK(parse({"t.py", "--", "a"}).entry_args == std::vector<std::string>{"--", "a"});
  CHECK_THROWS_WITH(parse({"--standalone", "--"}), Catch::Contains("no entrypoint given"));
}

TEST_CASE("xpu is a worker count word") {
  auto c = parse({"--nproc_per_node=xpu", "x"});
  CHECK(c.nproc_per_node.kind == WorkerCount::Kind::xpu);
  CHECK(c.nproc_per_node.source == "--nproc-per-node=xpu");
  CHECK_THROWS_WITH(parse({"--nproc-per-node=npu", "x"}),
                    Catch::Contains("a positive integer, cpu, gpu, xpu or auto"));
}

TEST_CASE("shutdown timeout: option, then PET_, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT, then 30") {
  CHECK(parse({"x"}).shutdown_timeout == 30.0);
  CHECK(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout == 7.0);
  CHECK(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}, {"PET_SHUTDOWN_TIMEOUT", "5"}})
            .shutdown_timeout == 5.0);
  CHECK(parse({"--shutdown-timeout=3", "x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
            .shutdown_timeout == 3.0);
  CHECK_THROWS_WITH(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "-1"}}),
                    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=-1: expected a number of seconds >= 0");
  CHECK_THROWS_AS(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}}), UsageError);
}

TEST_CASE("virtual local rank, by flag or PET_") {
  CHECK_FALSE(parse({"x"}).virtual_local_rank);
  CHECK(parse({"--virtual-local-rank", "x"}).virtual_local_rank);
  CHECK(parse({"--virtual_local_rank", "x"}).virtual_local_rank);
  CHECK(parse({"x"}, {{"PET_VIRTUAL_LOCAL_RANK", "1"}}).virtual_local_rank);
}

TEST_CASE("duplicate filters: a comma list where ,, is a comma") {
  CHECK(parse_filter_list("").empty());
  CHECK(parse_filter_list("apple,orange") == std::vector<std::string>{"apple", "orange"});
  CHECK(parse_filter_list("a,,b,c") == std::vector<std::string>{"a,b", "c"});
  CHECK(parse_filter_list("a,,,b") == std::vector<std::string>{"a,", "b"});
  CHECK(parse_filter_list(",x,,") == std::vector<std::string>{"x,"});
  auto c = parse({"--duplicate-stdout-filters=loss,,x", "--duplicate_stderr_filters", "warn", "t"});
  CHECK(c.duplicate_stdout_filters == std::vector<std::string>{"loss,x"});
  CHECK(c.duplicate_stderr_filters == std::vector<std::string>{"warn"});
  CHECK(parse({"x"}, {{"PET_DUPLICATE_STDOUT_FILTERS", "a,b"}}).duplicate_stdout_filters.size() ==
        2);
}

TEST_CASE("log line prefix template: option, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") {
  CHECK_FALSE(parse({"x"}).log_line_prefix_template);
  CHECK(*parse({"--log-line-prefix-template=${rank}|", "x"}).log_line_prefix_template ==
        "${rank}|");
  const std::map<std::string, std::string> env = {
      {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${local_rank}>"}};
  CHECK(*parse({"x"}, env).log_line_prefix_template == "${local_rank}>");
  CHECK(*parse({"--log_line_prefix_template=h:", "x"}, env).log_line_prefix_template == "h:");
  // Empty means the default prefix, as in torchrun.
  CHECK_FALSE(
      parse({"x"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", ""}}).log_line_prefix_template);
}

TEST_CASE("signals to handle are kept as given for the workers, else torchrun 2.x's default") {
  CHECK(parse({"x"}).signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(parse({"x"}, {{"PET_SIGNALS_TO_HANDLE", "SIGINT"}}).signals_to_handle == "SIGINT");
  CHECK(parse({"--signals-to-handle=SIGTERM,SIGUSR1", "x"}).signals_to_handle == "SIGTERM,SIGUSR1");
}

TEST_CASE("options accepted but ignored warn once each, naming the option") {
  CHECK(outcome({"x"}).warnings.empty());
  CHECK(outcome({"--event-log-handler=null", "x"}).warnings.empty());
  auto out = outcome({"--event-log-handler=console", "--numa-binding=node", "--logs-specs=mine",
                      "--start-method=fork", "--monitor-interval=5", "x"});
  // --numa-binding binds (numa_binding_test.cpp): no warning here.
  REQUIRE(out.warnings.size() == 2);
  CHECK(out.warnings[0] ==
        "warning: --event-log-handler=console is accepted but ignored: trainrun records no "
        "elastic events");
  CHECK_THAT(out.warnings[1], Catch::StartsWith("warning: --logs-specs=mine is accepted"));
  auto from_env = outcome({"x"}, {{"PET_EVENT_LOG_HANDLER", "dynamic_rendezvous"}});
  REQUIRE(from_env.warnings.size() == 1);
  CHECK_THAT(from_env.warnings[0], Catch::Contains("PET_EVENT_LOG_HANDLER=dynamic_rendezvous"));
  for (const char* mode : {"socket", "exclusive", "core-complex"})
    CHECK(parse({std::string("--numa_binding=") + mode, "x"}).numa_binding == mode);
}

TEST_CASE("bad values of the 2.x options") {
  CHECK_THROWS_WITH(parse({"--event-log-handler=syslog", "x"}),
                    "--event-log-handler=syslog: unknown event log handler; use null, console or "
                    "dynamic_rendezvous");
  CHECK_THROWS_WITH(parse({"--numa-binding=all", "x"}),
                    "--numa-binding=all: use node, socket, exclusive or core-complex");
  CHECK_THROWS_WITH(outcome({"--print-completion=fish"}),
                    "--print-completion=fish: use bash, zsh or tcsh");
}

TEST_CASE("completion scripts name every option in both spellings") {
  for (const char* shell : {"bash", "zsh", "tcsh"}) {
    auto out = outcome({"--print-completion", shell});
    REQUIRE(out.help_text);
    CHECK_THAT(*out.help_text, Catch::Contains("trainrun"));
    CHECK_THAT(*out.help_text, Catch::Contains("virtual-local-rank"));
  }
  auto bash = *outcome({"--print_completion=bash"}).help_text;
  CHECK_THAT(bash, Catch::StartsWith("# bash completion for trainrun"));
  CHECK_THAT(bash, Catch::Contains("complete -o default -F _trainrun trainrun"));
  CHECK_THAT(bash, Catch::Contains(" --nproc-per-node --nproc_per_node "));
  CHECK_THAT(*outcome({"--print-completion=zsh"}).help_text,
             Catch::StartsWith("#compdef trainrun"));
}
