#include "agent/attempt_startup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>

#include "agent/connection_owner.hpp"
#include "agent/store_owners.hpp"
#include "trainrun/base/system.hpp"

using namespace trainrun::launch;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

tcp::endpoint at(const char* address, unsigned short port) {
  return tcp::endpoint(asio::ip::make_address(address), port);
}

AttemptStartup node_of(int ranks, int base_rank = 0) {
  AttemptStartup s;
  s.topology.local_world_size = ranks;
  s.topology.base_rank = base_rank;
  s.topology.world_size = base_rank + ranks;
  s.round_s = 0.02;
  s.workers_s = 0.03;
  for (int local_rank = 0; local_rank < ranks; ++local_rank)
    s.started[base_rank + local_rank] = 0.021 + 0.001 * local_rank;
  return s;
}

}  // namespace

TEST_CASE("the client end of a connection is found by address in the kernel's table") {
  // 127.0.0.1:40000 -> 127.0.0.1:29500 (the client's row), then the server's own row.
  const std::string tcp4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
      "inode\n"
      "   0: 0100007F:9C40 0100007F:733C 01 00000000:00000000 00:00000000 00000000     0        0 "
      "4242 1 0000000000000000 20 4 30 10 -1\n"
      "   1: 0100007F:733C 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 "
      "4343 1 0000000000000000 20 4 30 10 -1\n";
  CHECK(client_socket_inode(tcp4, at("127.0.0.1", 40000), at("127.0.0.1", 29500)) == 4242ul);
  // The server accepted on a dual-stack socket: its addresses are IPv4-mapped.
  CHECK(client_socket_inode(tcp4, at("::ffff:127.0.0.1", 40000), at("::ffff:127.0.0.1", 29500)) ==
        4242ul);
  CHECK(client_socket_inode(tcp4, at("127.0.0.1", 29500), at("127.0.0.1", 40000)) == 4343ul);
  CHECK_FALSE(client_socket_inode(tcp4, at("127.0.0.1", 40001), at("127.0.0.1", 29500)));
  CHECK_FALSE(client_socket_inode(tcp4, at("10.0.0.1", 40000), at("127.0.0.1", 29500)));
  CHECK_FALSE(client_socket_inode("", at("127.0.0.1", 40000), at("127.0.0.1", 29500)));
  CHECK_FALSE(client_socket_inode("header\n   0: garbage\n", at("127.0.0.1", 40000),
                                  at("127.0.0.1", 29500)));
  const std::string tcp6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 00000000000000000000000001000000:9C40 00000000000000000000000001000000:733C 01 "
      "00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 "
      "-1\n";
  CHECK(client_socket_inode(tcp6, at("::1", 40000), at("::1", 29500)) == 777ul);
}

TEST_CASE("a real loopback connection is traced to the process that holds its client end") {
  asio::io_context io;
  tcp::acceptor acceptor(io, at("127.0.0.1", 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket served = acceptor.accept();

  struct stat st {};
  REQUIRE(::fstat(client.native_handle(), &st) == 0);
  const auto table = trainrun::read_file("/proc/net/tcp");
  REQUIRE(table);
  CHECK(client_socket_inode(*table, served.remote_endpoint(), served.local_endpoint()) ==
        static_cast<unsigned long>(st.st_ino));

  NodeWorkers workers;
  workers.workers.push_back({5, 1, ::getpid()});
  CHECK(connection_rank(served.remote_endpoint(), served.local_endpoint(), workers) == 5);
  // A process that is not among the workers is not named.
  workers.workers = {{5, 1, ::getppid()}};
  CHECK_FALSE(connection_rank(served.remote_endpoint(), served.local_endpoint(), workers));
}

TEST_CASE("a connection over IPv6, or IPv4 to a dual-stack listener, is traced as well") {
  asio::io_context io;
  NodeWorkers workers;
  workers.workers.push_back({3, 0, ::getpid()});
  for (const char* listen : {"::1", "::"}) {
    INFO(listen);
    tcp::acceptor acceptor(io, at(listen, 0));
    tcp::socket client(io);
    // To the wildcard listener, an IPv4 client: the served end sees ::ffff:127.0.0.1.
    client.connect(std::string(listen) == "::" ? at("127.0.0.1", acceptor.local_endpoint().port())
                                               : acceptor.local_endpoint());
    tcp::socket served = acceptor.accept();
    CHECK(connection_rank(served.remote_endpoint(), served.local_endpoint(), workers) == 3);
  }
}

TEST_CASE("the slowest rank is named, and called much slower only well past the median") {
  AttemptStartup s = node_of(4);
  s.at_store = {{0, 0.40}, {1, 0.41}, {2, 0.39}, {3, 0.45}};
  auto slowest = slowest_rank(s);
  REQUIRE(slowest);
  CHECK(slowest->rank == 3);
  CHECK_FALSE(slowest->much_slower);
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s, ranks at the store 0.45 s (slowest: "
        "rank 3 on node 0, 0.45 s)");

  s.at_store[3] = 3.40;  // 3 s late: more than twice the median and more than 1 s behind
  slowest = slowest_rank(s);
  CHECK(slowest->much_slower);
  CHECK(slowest->median_s == Approx(0.405));
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s, ranks at the store 3.40 s (slowest: "
        "rank 3 on node 0, 3.40 s, much slower than the median 0.41 s)");

  // Twice the median but less than a second behind: not called out.
  s.at_store = {{0, 0.2}, {1, 0.2}, {2, 0.2}, {3, 0.9}};
  CHECK_FALSE(slowest_rank(s)->much_slower);
  // A second behind but not twice the median: neither.
  s.at_store = {{0, 5.0}, {1, 5.0}, {2, 5.0}, {3, 6.5}};
  CHECK_FALSE(slowest_rank(s)->much_slower);
}

TEST_CASE("each worker's first output is its first step: the slowest named, the silent said") {
  AttemptStartup s = node_of(3, /*base_rank=*/3);
  s.topology.restart_count = 2;
  CHECK(first_output_line(s) == "attempt 2: first output not seen");
  CHECK(startup_json(s)["first_output_slowest"].is_null());
  s.first_output = {{3, 0.9}, {5, 4.2}};
  CHECK_FALSE(s.all_spoke());
  CHECK(first_output_line(s) ==
        "attempt 2: first output 4.20 s (slowest: rank 5, 4.20 s); rank 4: no output seen");
  s.first_output[4] = 1.0;
  CHECK(s.all_spoke());
  CHECK(first_output_line(s) ==
        "attempt 2: first output 4.20 s (slowest: rank 5, 4.20 s, much slower than the median "
        "1.00 s)");
  // The C++ runtime's first report(), where the workers use it.
  s.first_report = {{3, 2.5}, {4, 3.1}};
  CHECK(first_output_line(s) ==
        "attempt 2: first output 4.20 s (slowest: rank 5, 4.20 s, much slower than the median "
        "1.00 s); first report 3.10 s (slowest: rank 4, 3.10 s)");
  const auto j = startup_json(s);
  REQUIRE(j["ranks"].size() == 3);
  CHECK(j["ranks"][0]["first_report_s"] == 2.5);
  CHECK(j["ranks"][2]["first_report_s"].is_null());
  CHECK(j["ranks"][0]["first_output_s"] == 0.9);
  CHECK(j["ranks"][2]["first_output_s"] == 4.2);
  CHECK(j["first_output_slowest"]["rank"] == 5);
  CHECK(j["first_output_slowest"]["much_slower"] == true);
}

TEST_CASE("a rank not seen at the store is said so, and nothing is guessed") {
  AttemptStartup s = node_of(2);
  s.topology.restart_count = 1;
  s.topology.group_world_size = 2;
  s.topology.world_size = 4;
  s.at_store = {{0, 0.5}};
  s.unattributed = 1;  // node 1's rank, a stranger: nobody has said yet
  CHECK_FALSE(s.complete());
  CHECK(startup_line(s) ==
        "attempt 1: round 0.02 s, workers started 0.03 s, ranks at the store 0.50 s (slowest: "
        "rank 0 on node 0, 0.50 s); rank 1: not seen at the store; 1 store connection not told "
        "apart");
  auto j = startup_json(s);
  CHECK(j["ranks"].size() == 2);
  CHECK(j["ranks"][0]["at_store_s"] == 0.5);
  CHECK(j["ranks"][1]["at_store_s"].is_null());
  s.at_store[1] = 0.6;
  CHECK_FALSE(s.complete());  // node 1 may yet say which are its own
  s.unnamed_why = "not every node answered within 5 s";
  CHECK(s.complete());
  CHECK(startup_line(s) ==
        "attempt 1: round 0.02 s, workers started 0.03 s, ranks at the store 0.60 s (slowest: "
        "rank 1 on node 0, 0.60 s); 1 store connection not told apart (not every node answered "
        "within 5 s)");
  CHECK(startup_json(s)["unattributed_why"] == "not every node answered within 5 s");
}

TEST_CASE("a restart's line and summary say what its seconds count from") {
  AttemptStartup s = node_of(2);
  s.at_store = {{0, 2.40}, {1, 2.45}};
  s.origin_at = 1767322800.25;  // 2026-01-02T03:00:00.250Z
  // The first attempt's count from the job's start: the line does not say it.
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s, ranks at the store 2.45 s (slowest: "
        "rank 1 on node 0, 2.45 s)");
  auto from = startup_json(s)["counted_from"];
  CHECK(from["event"] == "job start");
  CHECK(from["rank"].is_null());
  CHECK(from["at"] == "2026-01-02T03:00:00.250Z");
  s.topology.restart_count = 1;
  s.origin = AttemptStartup::Origin::worker_exit;
  s.origin_rank = 1;
  CHECK(startup_line(s) ==
        "attempt 1: round 0.02 s, workers started 0.03 s, ranks at the store 2.45 s (slowest: "
        "rank 1 on node 0, 2.45 s); from rank 1's exit");
  from = startup_json(s)["counted_from"];
  CHECK(from["event"] == "worker exit");
  CHECK(from["rank"] == 1);
  s.origin = AttemptStartup::Origin::stop;
  CHECK(startup_line(s).substr(startup_line(s).rfind(';')) ==
        "; from the stop of the last attempt");
  CHECK(startup_json(s)["counted_from"]["event"] == "stop");
  CHECK(startup_json(s)["counted_from"]["rank"].is_null());
  s.origin = AttemptStartup::Origin::attempt_end;
  CHECK(startup_line(s).substr(startup_line(s).rfind(';')) == "; from the last attempt's end");
  CHECK(startup_json(s)["counted_from"]["event"] == "attempt end");
}

TEST_CASE("another node's ranks named by that node are in the line and the summary") {
  AttemptStartup s = node_of(2);
  s.topology.group_world_size = 2;
  s.topology.world_size = 4;
  s.at_store = {{0, 0.40}, {1, 0.41}, {2, 0.42}};
  s.node_of = {{2, 1}};
  CHECK_FALSE(s.complete());
  // Nothing unnamed: another node's rank not named did not come.
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s, ranks at the store 0.42 s (slowest: "
        "rank 2 on node 1, 0.42 s); rank 3: not seen at the store");
  s.at_store[3] = 3.45;
  s.node_of[3] = 1;
  CHECK(s.complete());
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s, ranks at the store 3.45 s (slowest: "
        "rank 3 on node 1, 3.45 s, much slower than the median 0.41 s)");
  const auto j = startup_json(s);
  REQUIRE(j["ranks"].size() == 4);
  CHECK(j["ranks"][3]["node_rank"] == 1);
  CHECK(j["ranks"][3]["local_rank"].is_null());
  CHECK(j["ranks"][3]["started_s"].is_null());
  // This node's ranks: each its own worker's start.
  CHECK(j["ranks"][0]["started_s"].get<double>() == Approx(0.021));
  CHECK(j["ranks"][1]["started_s"].get<double>() == Approx(0.022));
  CHECK(j["ranks"][3]["at_store_s"] == 3.45);
  CHECK(j["slowest"]["node_rank"] == 1);
}

TEST_CASE("the store's question to the other nodes and their answers, read or refused") {
  StoreOwnersQuestion q{
      2, {{at("10.0.0.2", 40000), at("10.0.0.1", 29500)}, {at("::1", 40001), at("::1", 29500)}}};
  const auto parsed = parse_store_owners_question(store_owners_question(q));
  CHECK(parsed.restart_count == 2);
  REQUIRE(parsed.connections.size() == 2);
  CHECK(parsed.connections[0].peer == at("10.0.0.2", 40000));
  CHECK(parsed.connections[1].local == at("::1", 29500));
  CHECK(is_store_owners_question(store_owners_question(q)));
  CHECK_FALSE(is_store_owners_question(nlohmann::json::object()));

  using nlohmann::json;
  const auto refused = [](const json& j) {
    try {
      parse_store_owners_question(j);
    } catch (const StoreOwnersError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused(json{{"store_owners", 1}}) == "\"store_owners\" must be an object");
  CHECK(refused(json{{"store_owners", {{"connections", json::array()}}}}) ==
        "\"restart_count\" is missing");
  CHECK(refused(json::parse(R"({"store_owners":{"restart_count":0,"connections":[[1,2]]}})")) ==
        "a connection must be [peer address, peer port, local address, local port]");
  CHECK(refused(json::parse(
            R"({"store_owners":{"restart_count":0,"connections":[["x",1,"::1",2]]}})")) ==
        "\"x\" is not an IP address");
  CHECK(refused(json::parse(
            R"({"store_owners":{"restart_count":0,"connections":[["::1",70000,"::1",2]]}})")) ==
        "\"port\" must be in 0..65535, not 70000");
  json many = store_owners_question(q);
  many["store_owners"]["connections"] = json::array();
  for (std::size_t i = 0; i <= kMaxStoreQuestionConnections; ++i)
    many["store_owners"]["connections"].push_back({"::1", 1, "::1", 2});
  CHECK(refused(many) == "\"connections\" must be an array of at most 1024");

  // Answers: node 1 names connection 1 as its rank 3.
  auto owners = parse_store_owners_answer(store_owners_answer(1, 2, {{1, 3, 1}}), q, 2, 4);
  REQUIRE(owners.size() == 1);
  CHECK((owners[0].connection == 1 && owners[0].rank == 3 && owners[0].node == 1));
  // Of another attempt, or of a node without workers: nothing, and no error.
  CHECK(parse_store_owners_answer(store_owners_answer(1, 1, {{1, 3, 1}}), q, 2, 4).empty());
  CHECK(parse_store_owners_answer(store_owners_answer(-1, -1, {}), q, 2, 4).empty());
  CHECK_THROWS_WITH(parse_store_owners_answer(store_owners_answer(1, 2, {{2, 3, 1}}), q, 2, 4),
                    "\"connection\" must be in 0..1, not 2");
  CHECK_THROWS_WITH(parse_store_owners_answer(store_owners_answer(1, 2, {{0, 4, 1}}), q, 2, 4),
                    "\"rank\" must be in 0..3, not 4");
  CHECK_THROWS_WITH(parse_store_owners_answer(store_owners_answer(2, 2, {}), q, 2, 4),
                    "\"node\" must be in -1..1, not 2");
  CHECK_THROWS_WITH(parse_store_owners_answer(json{{"error", "no stacks"}}, q, 2, 4), "no stacks");
  CHECK_THROWS_WITH(
      parse_store_owners_answer(
          json{{"node", 1}, {"restart_count", 2}, {"store_owners", {1, 2, 3}}}, q, 2, 4),
      "\"store_owners\" must be an array, no longer than the question's");
}

TEST_CASE("a node answers for the connections its own workers hold, of the attempt asked about") {
  asio::io_context io;
  tcp::acceptor acceptor(io, at("127.0.0.1", 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket served = acceptor.accept();
  StoreOwnersQuestion q{0,
                        {{served.remote_endpoint(), served.local_endpoint()},
                         {at("127.0.0.1", 1), served.local_endpoint()}}};
  NodeWorkers workers;
  workers.workers.push_back({5, 1, ::getpid()});
  auto owners = parse_store_owners_answer(answer_store_owners(q, 1, 0, workers), q, 2, 8);
  REQUIRE(owners.size() == 1);
  CHECK((owners[0].connection == 0 && owners[0].rank == 5 && owners[0].node == 1));
  // Another attempt runs here, or none: nothing is named.
  CHECK(parse_store_owners_answer(answer_store_owners(q, 1, 1, workers), q, 2, 8).empty());
  CHECK(
      parse_store_owners_answer(answer_store_owners(q, 1, std::nullopt, workers), q, 2, 8).empty());
}

TEST_CASE("where no agent sees the store, its ranks are not reported") {
  AttemptStartup s = node_of(2);
  s.store = AttemptStartup::Store::worker;
  CHECK(s.complete());
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s; ranks at the store not seen (worker "
        "RANK 0 serves it)");
  CHECK(startup_json(s)["slowest"].is_null());
  s.store = AttemptStartup::Store::other_node;
  CHECK(startup_line(s) ==
        "attempt 0: round 0.02 s, workers started 0.03 s; ranks at the store are seen by node 0's "
        "agent");
  s.workers_s.reset();
  CHECK_FALSE(s.complete());
}
