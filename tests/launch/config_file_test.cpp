#include "trainrun/launch/cli/config_file.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "test_support.hpp"
#include "trainrun/launch/cli/command_line.hpp"

using namespace trainrun::launch;

namespace {

// The parser with `text` as the --config file's contents, whatever path it names.
ParseOutcome with_config(const std::string& text, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env = {}) {
  return parse_command_line(args, env, [&](const std::string&) { return text; });
}

std::string print_config(const std::string& text, std::vector<std::string> args,
                         const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), "--print-config");
  ParseOutcome out = with_config(text, args, env);
  REQUIRE(out.help_text);
  return *out.help_text;
}

}  // namespace

TEST_CASE("a config file sets options; the command line wins over it, it over PET_*") {
  const std::string job =
      "nproc-per-node = 4\n"
      "max_restarts = 3\n"
      "rdzv-conf = \"join_timeout=60\"\n"
      "monitor-interval = 0.5\n"
      "standalone = true\n"
      "master-port = 1234\n";
  LaunchConfig c = with_config(job, {"--config", "job.toml", "--max-restarts=1", "x"},
                               {{"PET_NPROC_PER_NODE", "8"}, {"PET_ROLE", "trainer"}})
                       .config;
  CHECK(c.nproc_per_node.number == 4);
  CHECK(c.max_restarts == 1);
  CHECK(c.rdzv_conf.join_timeout == std::chrono::seconds(60));
  CHECK(c.monitor_interval == 0.5);
  CHECK(c.standalone);
  CHECK(c.role == "trainer");
  CHECK(c.master_port_given);
}

TEST_CASE("a bad config file is refused naming the file and the line") {
  auto refused = [](const std::string& text, const std::string& message) {
    CHECK_THROWS_WITH(with_config(text, {"--config=job.toml", "x"}), message);
  };
  refused("nnodes = 1\nnproc_per_nod = 2\n",
          "job.toml:2: unknown key 'nproc_per_nod'; did you mean nproc-per-node? (the keys are "
          "trainrun's long option names, see trainrun --help)");
  refused("\nfrobnicate = 1\n",
          "job.toml:2: unknown key 'frobnicate' (the keys are trainrun's long option names, see "
          "trainrun --help)");
  refused("config = 'other.toml'\n",
          "job.toml:1: unknown key 'config' (the keys are trainrun's long option names, see "
          "trainrun --help)");
  refused("standalone = 1\n", "job.toml:1: standalone: expected true or false, got an integer");
  refused("nnodes = [1, 2]\n", "job.toml:1: nnodes: expected a string or a number, got an array");
  refused("max-restarts = 2\n\nmax_restarts = 3\n",
          "job.toml:3: max_restarts is given twice (also on line 1)");
  CHECK_THROWS_WITH(with_config("nnodes = 2\nrole = \"unterminated\n", {"--config=job.toml", "x"}),
                    Catch::StartsWith("job.toml:2: not valid TOML: "));
  // A value is checked as the command line's, and named with its place in the file.
  refused("\n\nnproc-per-node = 0\n",
          "job.toml:3: nproc-per-node=0: must be at least 1, or cpu, gpu, xpu or auto");
  // A float is a float for every option, as on the command line, which refuses 2.0.
  refused("nproc-per-node = 2.0\n",
          "job.toml:1: nproc-per-node=2.0: expected a positive integer, cpu, gpu, xpu or auto");
  CHECK_THROWS_WITH(read_config_file("/nonexistent/job.toml"),
                    "--config=/nonexistent/job.toml: cannot read it: No such file or directory");
}

TEST_CASE("a config file that is not a small regular file is refused without reading it all") {
  const std::string dir = trainrun::test::make_temp_dir("config_file");
  CHECK_THROWS_WITH(read_config_file(dir), "--config=" + dir + ": cannot read it: a directory");
  const std::string fifo = dir + "/job.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Without a writer: refused at once, not waited on.
  CHECK_THROWS_WITH(read_config_file(fifo),
                    "--config=" + fifo + ": cannot read it: not a regular file");
  CHECK_THROWS_WITH(read_config_file("/dev/zero"),
                    "--config=/dev/zero: cannot read it: not a regular file");
  const std::string big = dir + "/big.toml";
  {
    std::ofstream out(big);
    out << std::string((std::size_t{1} << 20) + 1, '#');
  }
  CHECK_THROWS_WITH(read_config_file(big),
                    "--config=" + big + ": cannot read it: longer than 1048576 bytes");
}

TEST_CASE("--print-config reads back as the same configuration") {
  const std::vector<std::string> args = {"--nnodes=1:2",
                                         "--nproc-per-node=2",
                                         "--rdzv-backend=c10d",
                                         "--rdzv-endpoint=node0:29400",
                                         "--rdzv-conf=join_timeout=60,is_host=1",
                                         "--role=it's \"quoted\"",
                                         "--monitor-interval=0.5",
                                         "--tee=3",
                                         "--no-python",
                                         "-v"};
  const std::map<std::string, std::string> env = {{"PET_MAX_RESTARTS", "2"}};
  const std::string printed = print_config("", args, env);
  CHECK(printed.find("\nnproc-per-node = 2\n") != std::string::npos);
  CHECK(printed.find("\nno-python = true\n") != std::string::npos);
  CHECK(printed.find("\nmax-restarts = 2\n") != std::string::npos);
  CHECK(printed.find("\n# nnodes") == std::string::npos);
  CHECK(printed.find("\n# master-addr = '127.0.0.1'\n") != std::string::npos);

  // Without the command line or the environment it came from, the file alone gives it again.
  CHECK(print_config(printed, {"--config=job.toml"}) == printed);
  std::vector<std::string> run_args = args;
  run_args.push_back("prog");
  const LaunchConfig direct = parse_command_line(run_args, env).config;
  const LaunchConfig from_file = with_config(printed, {"--config=job.toml", "prog"}).config;
  CHECK(from_file.min_nodes == direct.min_nodes);
  CHECK(from_file.max_nodes == direct.max_nodes);
  CHECK(from_file.nproc_per_node.number == direct.nproc_per_node.number);
  CHECK(from_file.rdzv_backend == direct.rdzv_backend);
  CHECK(from_file.rdzv_endpoint == direct.rdzv_endpoint);
  CHECK(from_file.rdzv_conf.join_timeout == direct.rdzv_conf.join_timeout);
  CHECK(from_file.rdzv_conf.is_host == direct.rdzv_conf.is_host);
  CHECK(from_file.role == direct.role);
  CHECK(from_file.max_restarts == 2);
  CHECK(from_file.monitor_interval == direct.monitor_interval);
  CHECK(from_file.tee.all_ranks == direct.tee.all_ranks);
  CHECK(from_file.no_python);
  CHECK(from_file.verbosity == Verbosity::verbose);
}
