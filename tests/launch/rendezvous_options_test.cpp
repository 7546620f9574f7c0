#include "trainrun/launch/rdzv/rendezvous_options.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "parse_helpers.hpp"
#include "test_support.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/rdzv/rendezvous_token.hpp"

using namespace trainrun::launch;
using namespace trainrun::rendezvous;
using std::chrono::seconds;
using trainrun::test::outcome;

namespace {

LaunchConfig c10d(const std::string& endpoint, int min = 2, int max = 2) {
  LaunchConfig c;
  c.rdzv_backend = RendezvousBackend::c10d;
  c.rdzv_endpoint = endpoint;
  c.rdzv_id = "job7";
  c.min_nodes = min;
  c.max_nodes = max;
  return c;
}

}  // namespace

TEST_CASE("c10d options take defaults and --rdzv-conf keys", "[rendezvous]") {
  LaunchConfig c = c10d("node0:29401", 2, 4);
  c.max_restarts = 3;
  TcpRendezvousOptions o = rendezvous_options(c, {});
  CHECK_FALSE(o.round.static_ranks);
  CHECK(o.endpoint.host == "node0");
  CHECK(o.endpoint.port == 29401);
  CHECK(o.round.min_nodes == 2);
  CHECK(o.round.max_nodes == 4);
  CHECK(o.round.max_restarts == 3);
  CHECK(o.round.join_timeout == seconds(600));
  CHECK(o.round.last_call_timeout == seconds(30));
  CHECK(o.liveness.heartbeat_timeout <= seconds(15));
  CHECK_FALSE(o.is_host);
  CHECK_FALSE(o.credentials.token);

  c.rdzv_conf = check_rdzv_conf({{"join_timeout", "20"},
                                 {"heartbeat_timeout", "3"},
                                 {"is_host", "1"},
                                 {"last_call_timeout", "0.5"}});
  o = rendezvous_options(c, {});
  CHECK(o.round.join_timeout == seconds(20));
  CHECK(o.liveness.heartbeat_timeout == seconds(3));
  CHECK(o.liveness.keep_alive_interval == seconds(1));
  CHECK(o.is_host == true);
  CHECK(o.round.last_call_timeout == std::chrono::milliseconds(500));
}

TEST_CASE("bad rendezvous options are refused naming the option", "[rendezvous]") {
  auto refused = [](LaunchConfig c, const std::string& what) {
    CHECK_THROWS_WITH(rendezvous_options(c, {}), Catch::Contains(what));
  };
  refused(c10d(""), "needs --rdzv-endpoint");
  refused(c10d("node0:x"), "--rdzv-endpoint=");
  LaunchConfig c = c10d("node0:0");
  refused(c, "port 0 only works with");

  LaunchConfig s;
  s.rdzv_backend = RendezvousBackend::static_;
  s.min_nodes = 2;
  s.max_nodes = 3;
  refused(s, "needs a fixed node count");
  s.min_nodes = 3;
  s.node_rank = 3;
  refused(s, "--node-rank=3: out of range");
}

TEST_CASE("the static backend serves on MASTER_PORT + 1 unless rdzv_port is given",
          "[rendezvous]") {
  LaunchConfig s;
  s.rdzv_backend = RendezvousBackend::static_;
  s.min_nodes = s.max_nodes = 2;
  s.node_rank = 1;
  s.master_addr = "node0";
  s.master_port = 29500;
  TcpRendezvousOptions o = rendezvous_options(s, {});
  CHECK(o.round.static_ranks);
  CHECK(o.node_rank == 1);
  CHECK(o.endpoint.host == "node0");
  CHECK(o.endpoint.port == 29501);
  CHECK(o.round.static_master.port == 29500);
  CHECK(o.round.static_ranks);
  s.rdzv_conf = check_rdzv_conf({{"rdzv_port", "4000"}});
  CHECK(rendezvous_options(s, {}).endpoint.port == 4000);
}

TEST_CASE("the token comes from token_file, else TRAINRUN_RDZV_TOKEN", "[rendezvous]") {
  CHECK_FALSE(load_token({}, {}));
  CHECK(load_token({}, {{"TRAINRUN_RDZV_TOKEN", "abc\n"}}) == std::string("abc"));
  CHECK_THROWS_WITH(load_token({}, {{"TRAINRUN_RDZV_TOKEN", " \n"}}), Catch::Contains("blank"));
  // Set but empty would turn authentication off as silently: refused the same way.
  CHECK_THROWS_WITH(load_token({}, {{"TRAINRUN_RDZV_TOKEN", ""}}),
                    Catch::Contains("TRAINRUN_RDZV_TOKEN is empty"));
  const std::string path = trainrun::test::make_temp_dir("token") + "/token";
  {
    std::ofstream out(path);
    out << "from-file\n";
  }
  ::chmod(path.c_str(), 0600);
  CHECK(load_token({path}, {{"TRAINRUN_RDZV_TOKEN", "env"}}) == std::string("from-file"));
  { std::ofstream out(path); }
  CHECK_THROWS_WITH(load_token({path}, {}), Catch::Contains("the file is empty"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(load_token({path}, {}), Catch::Contains("cannot read it"));
}

TEST_CASE("a token file others can read, or that is not a regular file, is refused",
          "[rendezvous]") {
  const std::string path = trainrun::test::make_temp_dir("token_mode") + "/token";
  {
    std::ofstream out(path);
    out << "s3cret\n";
  }
  ::chmod(path.c_str(), 0640);
  CHECK_THROWS_AS(load_token({path}, {}), UsageError);
  CHECK_THROWS_WITH(load_token({path}, {}),
                    "--rdzv-conf token_file=" + path +
                        ": readable by its group (mode 0640); make it private with `chmod 600 " +
                        path + "`, or accept it with --rdzv-conf token_file_mode=any");
  ::chmod(path.c_str(), 0604);
  CHECK_THROWS_WITH(load_token({path}, {}), Catch::Contains("readable by others (mode 0604)"));
  CHECK(load_token({path, true}, {}) == std::string("s3cret"));
  ::chmod(path.c_str(), 0400);
  CHECK(load_token({path}, {}) == std::string("s3cret"));
  std::remove(path.c_str());

  const std::string dir = path + "_dir";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  CHECK_THROWS_WITH(load_token({dir}, {}),
                    "--rdzv-conf token_file=" + dir +
                        ": it is a directory, not a regular file; put the token in a file");
  ::rmdir(dir.c_str());

  // A FIFO nobody writes to: refused at once, not waited on.
  const std::string fifo = path + "_fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_token({fifo, true}, {}),
                    Catch::Contains("it is a FIFO, not a regular file"));
  std::remove(fifo.c_str());
}

TEST_CASE("--rdzv-conf is checked by one set of rules", "[rendezvous]") {
  auto refused = [](std::map<std::string, std::string> entries, const std::string& what) {
    CHECK_THROWS_AS(check_rdzv_conf(entries), UsageError);
    CHECK_THROWS_WITH(check_rdzv_conf(entries), Catch::Contains(what));
  };
  refused({{"join_timout", "5"}}, "--rdzv-conf join_timout=5: unknown key (known: ");
  refused({{"join_timeout", "0"}}, "join_timeout=0: expected a number of seconds from 0.01 to 1e7");
  // Below the floor a keep-alive would spin; a deadline no network can meet.
  refused({{"keep_alive_interval", "1e-9"}},
          "keep_alive_interval=1e-9: expected a number of "
          "seconds from 0.01 to 1e7");
  for (const char* key : {"heartbeat_timeout", "join_timeout", "last_call_timeout"})
    refused({{key, "0.009"}}, std::string(key) + "=0.009: expected a number of seconds from 0.01");
  CHECK(check_rdzv_conf({{"keep_alive_interval", "0.01"}}).liveness.keep_alive_interval ==
        std::chrono::milliseconds(10));
  CHECK(check_rdzv_conf({{"heartbeat_timeout", "0.02"}}).liveness.keep_alive_interval ==
        std::chrono::milliseconds(10));
  refused({{"last_call_timeout", "soon"}}, "last_call_timeout=soon");
  refused({{"is_host", "yes"}}, "is_host=yes: expected 1 or 0");
  refused({{"is_host", ""}}, "is_host=: expected 1 or 0");
  refused({{"rdzv_port", "65536"}}, "rdzv_port=65536: expected an integer in 1..65535");
  refused({{"keep_alive_max_attempt", "0"}}, "keep_alive_max_attempt=0");
  refused({{"keep_alive_interval", "1e6"}, {"keep_alive_max_attempt", "1000"}},
          "exceeds 1e7 seconds");
  refused({{"timeout", "-1"}}, "timeout=-1: expected a number of seconds >= 0");
  refused({{"keep_alive_interval", "20"}}, "must exceed keep_alive_interval");

  RendezvousConf conf = check_rdzv_conf({{"join_timeout", "20"},
                                         {"keep_alive_interval", "2"},
                                         {"keep_alive_max_attempt", "4"},
                                         {"is_host", "True"},
                                         {"token_file", "/t"},
                                         {"rdzv_port", "4000"},
                                         {"read_timeout", "anything"}});
  CHECK(conf.join_timeout == seconds(20));
  CHECK_FALSE(conf.last_call_timeout);
  CHECK(conf.liveness.keep_alive_interval == seconds(2));
  CHECK(conf.liveness.heartbeat_timeout == seconds(8));
  CHECK(conf.is_host == true);
  CHECK(conf.token.file == std::string("/t"));
  CHECK_FALSE(conf.token.any_mode);
  CHECK(check_rdzv_conf({{"token_file", "/t"}, {"token_file_mode", "any"}}).token.any_mode);
  refused({{"token_file", "/t"}, {"token_file_mode", "all"}},
          "token_file_mode=all: expected private or any");
  refused({{"token_file_mode", "any"}}, "token_file_mode=any: applies only with token_file=PATH");
  CHECK(conf.rdzv_port == 4000);
  // Nothing given: the rendezvous library's defaults.
  CHECK(check_rdzv_conf({}).liveness.heartbeat_timeout == LivenessOptions{}.heartbeat_timeout);
}

TEST_CASE("an unknown backend is refused when the command line is parsed", "[rendezvous]") {
  CHECK(parse_rdzv_backend("static", "b") == RendezvousBackend::static_);
  CHECK(parse_rdzv_backend("c10d", "b") == RendezvousBackend::c10d);
  CHECK(parse_rdzv_backend("etcd", "b") == RendezvousBackend::etcd);
  CHECK(parse_rdzv_backend("etcd-v2", "b") == RendezvousBackend::etcd_v2);
  CHECK(is_etcd(RendezvousBackend::etcd_v2));
  CHECK_THROWS_WITH(parse_rdzv_backend("zookeeper", "--rdzv-backend=zookeeper"),
                    Catch::Contains("unknown rendezvous backend"));
  CHECK_NOTHROW(outcome({"--rdzv-backend=etcd", "--rdzv-endpoint=h:2379", "x"}));
  // etcd has no use for a token: refused, not ignored.
  CHECK_THROWS_WITH(outcome({"--rdzv-backend=etcd", "--rdzv-endpoint=h:2379", "x"},
                            {{"TRAINRUN_RDZV_TOKEN", "s3cret"}}),
                    Catch::Contains("etcd backend does not use a rendezvous token"));
  CHECK_THROWS_WITH(outcome({"--rdzv-backend=etcd-v2", "--rdzv-endpoint=h", "--nnodes=2",
                             "--rdzv-conf=token_file=/t", "x"}),
                    Catch::Contains("--rdzv-conf token_file is set"));
  CHECK_THROWS_AS(outcome({"--rdzv-backend=zk", "x"}), UsageError);
  CHECK_THROWS_WITH(outcome({"--rdzv-conf=join_timout=5", "x"}), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(outcome({"--rdzv-conf=heartbeat_timeout=2,keep_alive_interval=5", "x"}),
                    Catch::Contains("must exceed keep_alive_interval"));
  CHECK_NOTHROW(outcome({"--rdzv-conf=join_timeout=5,is_host=1", "x"}));
}

TEST_CASE("the launcher adds the hint a user acts on to a rendezvous stop, by its kind",
          "[rendezvous]") {
  const auto shown = [](Refusal kind) {
    return with_hint(Stop{StopCause::rejected, "what happened", kind}).reason;
  };
  CHECK(shown(Refusal::none) == "what happened");
  CHECK(shown(Refusal::run_id) == "what happened; check --rdzv-id");
  CHECK(shown(Refusal::token) ==
        "what happened; give every node the same one with --rdzv-conf token_file=PATH or "
        "TRAINRUN_RDZV_TOKEN");
  CHECK(shown(Refusal::node_rank) == "what happened; check --node-rank and --nnodes");
  CHECK(shown(Refusal::rank_taken) == "what happened; check --node-rank");
  CHECK(shown(Refusal::port_held) ==
        "what happened; free it or choose another --rdzv-endpoint port");
  CHECK(shown(Refusal::not_a_host) == "what happened; check --rdzv-endpoint, or free the port");
  CHECK(shown(Refusal::unreachable) ==
        "what happened; is the node that hosts it running, and is --rdzv-endpoint right?");
  CHECK(shown(Refusal::no_handshake) ==
        "what happened; is a trainrun agent of this job hosting it, and is --rdzv-endpoint "
        "right?");
  CHECK(shown(Refusal::foreign_state) == "what happened; use another --rdzv-id");
  CHECK(shown(Refusal::state_version) ==
        "what happened; run every agent of the job with one version of trainrun, or use another "
        "--rdzv-id");
  // A stop of the job (finished, failed, lost) is told as it is.
  const Stop lost{StopCause::node_lost, "node b lost", 1, std::nullopt};
  CHECK(with_hint(lost).reason == "node b lost");

  LaunchConfig s;
  s.rdzv_backend = RendezvousBackend::static_;
  CHECK(hosting_hint(s) == "free the port or choose another one with --rdzv-conf rdzv_port=N");
  CHECK(hosting_hint(c10d("node0:29400")) ==
        "free the port or choose another one in --rdzv-endpoint");
}
