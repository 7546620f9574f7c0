#include "trainrun/rendezvous/messages.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::rendezvous;

namespace {

const std::string kNonce(64, 'a');

template <class T>
T round_trip_client(const T& m) {
  return std::get<T>(decode_client_message(encode(ClientMessage{m})));
}

template <class T>
T round_trip_server(const T& m) {
  return std::get<T>(decode_server_message(encode(ServerMessage{m})));
}

}  // namespace

TEST_CASE("client messages survive encode and decode", "[rendezvous]") {
  Hello h;
  h.run_id = "job7";
  h.nonce = kNonce;
  h.auth = true;
  Hello h2 = round_trip_client(h);
  CHECK(h2.magic == kMagic);
  CHECK(h2.version == kProtocolVersion);
  CHECK(h2.run_id == "job7");
  CHECK(h2.auth);

  Join j;
  j.node = NodeDescriptor{"node1", "10.0.0.2", 4242, 3, -1, 29500};
  Join j2 = round_trip_client(j);
  CHECK(j2.node.host == "node1");
  CHECK(j2.node.addr == "10.0.0.2");
  CHECK(j2.node.pid == 4242);
  CHECK(j2.node.nproc == 3);
  CHECK(j2.node.master_port == 29500);
  CHECK(j2.node.last_rank == -1);
  CHECK_FALSE(j2.node.at_endpoint);
  j.node.node_rank = 2;
  j.node.last_rank = 1;
  j.node.at_endpoint = true;
  j2 = round_trip_client(j);
  CHECK(j2.node.node_rank == 2);
  CHECK(j2.node.last_rank == 1);
  CHECK(j2.node.at_endpoint);

  Failure f{3, FailureReport{"node1", 5, 1, 137, "Signal 9 (SIGKILL)"}};
  Failure f2 = round_trip_client(f);
  CHECK(f2.round == 3);
  CHECK(f2.failure.rank == 5);
  CHECK(f2.failure.exit_code == 137);
  CHECK(f2.failure.summary == "Signal 9 (SIGKILL)");
  WorkerFailure w;
  w.host = "node1";
  w.rank = 5;
  w.local_rank = 1;
  w.pid = 77;
  w.signal = 9;
  w.timestamp = 1700000000.25;
  w.error_file = "/logs/error.json";
  w.message = "boom";
  w.traceback = "Traceback";
  Ended e = round_trip_client(Ended{3, {w}, 2});
  REQUIRE(e.failures.size() == 1);
  CHECK(e.not_relayed == 2);
  CHECK(e.failures[0].pid == 77);
  CHECK(e.failures[0].shell_code() == 137);
  CHECK(e.failures[0].timestamp == 1700000000.25);
  CHECK(e.failures[0].traceback == "Traceback");
  CHECK(round_trip_client(Failure{3, f.failure, {w, w}, 0}).failures.size() == 2);
  CHECK(round_trip_client(Done{2}).round == 2);
  CHECK(round_trip_client(Leave{"SIGTERM"}).reason == "SIGTERM");
  const Abort abort = round_trip_client(Abort{4, "preflight: b cannot reach a"});
  CHECK(abort.round == 4);
  CHECK(abort.reason == "preflight: b cannot reach a");
}

TEST_CASE("server messages survive encode and decode", "[rendezvous]") {
  Stop failed{StopCause::worker_failed, "rank 1 failed", 4, FailureReport{"b", 1, 0, 4, ""}};
  WorkerFailure root;
  root.rank = 1;
  root.exit_code = 4;
  failed.failures = {root};
  failed.not_relayed = 3;
  Stop failed2 = round_trip_server(failed);
  CHECK(failed2.failures.size() == 1);
  CHECK(failed2.failures[0].exit_code == 4);
  CHECK(failed2.not_relayed == 3);
  CHECK(round_trip_server(Halt{2, "a worker failed"}).round == 2);
  CHECK(round_trip_server(Stop{StopCause::finished, "", 0, std::nullopt}).failures.empty());

  Assignment a{4, 1, 2, 2, 3, 5, "10.0.0.1", 29500, 1, 3};
  Assignment a2 = round_trip_server(a);
  CHECK(a2.round == 4);
  CHECK(a2.group_rank == 1);
  CHECK(a2.base_rank == 2);
  CHECK(a2.world_size == 5);
  CHECK(a2.master_addr == "10.0.0.1");
  CHECK(a2.restart_count == 1);
  CHECK(a2.node_addresses.empty());
  a.node_addresses = {"10.0.0.1", "fd00::2", "node2"};
  CHECK(round_trip_server(a).node_addresses == a.node_addresses);
  // At most two per node (group_world_size 2), each a bounded string.
  a.node_addresses = {"1", "2", "3", "4", "5"};
  CHECK_THROWS_WITH(decode_server_message(encode(ServerMessage{a})),
                    Catch::Contains("\"node_addresses\" must be an array of at most 4"));
  a.node_addresses = {std::string(kMaxNameLength + 1, 'x')};
  CHECK_THROWS_WITH(decode_server_message(encode(ServerMessage{a})),
                    Catch::Contains("\"node_addresses\" is 256 bytes long"));
  Stop s{StopCause::worker_failed, "worker failed", 3, FailureReport{"h", 1, 1, 3, "x"}};
  Stop s2 = round_trip_server(s);
  CHECK(s2.cause == StopCause::worker_failed);
  CHECK(s2.exit_code == 3);
  REQUIRE(s2.failure);
  CHECK(s2.failure->host == "h");
  Restart r{RestartCause::scale_up, "grow", 0, std::nullopt};
  CHECK(round_trip_server(r).cause == RestartCause::scale_up);
  CHECK_FALSE(round_trip_server(r).failure);
  // A reject's kind travels; one this version does not know is only a hint the less.
  CHECK(round_trip_server(Reject{"run id \"x\" does not match", Refusal::run_id}).kind ==
        Refusal::run_id);
  CHECK(round_trip_server(Reject{"protocol error"}).kind == Refusal::none);
  const ServerMessage newer =
      decode_server_message(R"({"type":"reject","reason":"r","kind":"from_the_future"})");
  CHECK(std::get<Reject>(newer).kind == Refusal::none);
  Waiting w{0, 1, 2, 4, 12.5, 600};
  CHECK(round_trip_server(w).joined == 1);
  CHECK(round_trip_server(w).waited_s == Approx(12.5));
}

TEST_CASE("welcome carries the liveness options, to the microsecond", "[rendezvous]") {
  Welcome w;
  w.liveness.keep_alive_interval = std::chrono::milliseconds(500);
  w.liveness.heartbeat_timeout = std::chrono::seconds(2);
  Welcome w2 = round_trip_server(w);
  CHECK(w2.liveness.keep_alive_interval == w.liveness.keep_alive_interval);
  CHECK(w2.liveness.heartbeat_timeout == w.liveness.heartbeat_timeout);
  // A value from a peer, finer than a microsecond or near the limit, re-encodes unchanged.
  for (
      const char* body :
      {R"({"type":"welcome","keep_alive_interval_s":0.1234567891,"heartbeat_timeout_s":9999999.999999})",
       R"({"type":"welcome","keep_alive_interval_s":1e7,"heartbeat_timeout_s":3.0000005})"}) {
    std::string once = encode(decode_server_message(body));
    CHECK(encode(decode_server_message(once)) == once);
  }
}

TEST_CASE("invalid messages are refused with the offending field named", "[rendezvous]") {
  auto refused = [](const std::string& body, const std::string& what) {
    INFO(body);
    CHECK_THROWS_WITH(decode_client_message(body), Catch::Contains(what));
  };
  refused("not json", "not valid JSON");
  refused("[1,2]", "not a JSON object");
  refused("{}", "\"type\" is missing");
  refused(R"({"type":"launch_missiles"})", "unknown message type");
  refused(R"({"type":7})", "\"type\" must be a string");
  refused(R"({"type":"done","round":-1})", "\"round\" must be in");
  refused(R"({"type":"done","round":"3"})", "\"round\" must be an integer");
  refused(R"({"type":"done","round":1.5})", "\"round\" must be an integer");
  refused(R"({"type":"done","round":18446744073709551615})", "\"round\" must be in");
  refused(R"({"type":"join","node":[]})", "\"node\" must be an object");
  refused(
      R"({"type":"join","node":{"host":"h","addr":"","pid":1,"nproc":0,"node_rank":-1,"master_port":1}})",
      "\"nproc\" must be in");
  refused(
      R"({"type":"join","node":{"host":"h","addr":"","pid":1,"nproc":1,"node_rank":-1,"master_port":70000}})",
      "\"master_port\" must be in");
  refused(
      R"({"type":"join","node":{"host":"h","addr":"","pid":1,"nproc":1,"node_rank":-1,"master_port":1,"at_endpoint":1}})",
      "\"at_endpoint\" must be true or false");
  refused(
      R"({"type":"hello","magic":"trainrun-rdzv","version":1,"run_id":"x","nonce":"zz","auth":false})",
      "\"nonce\" must be 64");
  refused(R"({"type":"hello","magic":"trainrun-rdzv","version":1,"run_id":"x","nonce":")" + kNonce +
              R"(","auth":"yes"})",
          "\"auth\" must be true or false");
  refused(std::string(1000, '[') + std::string(1000, ']'), "nests deeper");
  refused(R"({"type":"leave","reason":")" + std::string(70000, 'x') + "\"}", "at most");
}

TEST_CASE("brackets inside strings do not count as nesting", "[rendezvous]") {
  std::string reason(100, '[');
  auto m = decode_client_message(R"({"type":"leave","reason":")" + reason + "\"}");
  CHECK(std::get<Leave>(m).reason == reason);
}

TEST_CASE("invalid UTF-8 from a peer is encoded without throwing", "[rendezvous]") {
  Leave l{std::string("bad \xff\xfe bytes")};
  std::string body = encode(ClientMessage{l});
  CHECK(std::get<Leave>(decode_client_message(body)).reason.find("bad") == 0);
}

TEST_CASE("the roll call's messages carry a node's answer, bounded", "[rendezvous]") {
  const std::string answer = R"({"host":"node1","ranks":[{"rank":3}]})";
  CHECK(round_trip_client(StacksRequest{7}).id == 7);
  CHECK(round_trip_server(StacksAsk{9}).id == 9);
  // A question travels unread, as the object it is; absent, the stacks are asked for.
  const std::string question = R"({"store_owners":{"restart_count":0}})";
  CHECK(round_trip_client(StacksRequest{7, question}).question == question);
  CHECK(round_trip_server(StacksAsk{9, question}).question == question);
  CHECK(round_trip_server(StacksAsk{9}).question.empty());
  CHECK(encode(ClientMessage{StacksRequest{7}}).find("question") == std::string::npos);
  CHECK_THROWS_WITH(decode_server_message(R"({"type":"stacks_ask","id":1,"question":"x"})"),
                    Catch::Contains("\"question\" must be an object"));
  CHECK_THROWS_WITH(decode_client_message(R"({"type":"stacks_request","id":1,"question":[]})"),
                    Catch::Contains("\"question\" must be an object"));
  const std::string long_question = R"({"type":"stacks_request","id":1,"question":{"x":")" +
                                    std::string(kMaxQuestionBytes, 'x') + R"("}})";
  CHECK_THROWS_WITH(decode_client_message(long_question),
                    Catch::Contains("at most 262144 allowed"));
  const auto relayed = round_trip_server(StacksAnswer{9, answer});
  CHECK(relayed.id == 9);
  CHECK(relayed.answer == answer);
  CHECK(round_trip_client(StacksAnswer{9, answer}).answer == answer);
  const auto end = round_trip_server(StacksEnd{7, {{"node2 (10.0.0.2, pid 5)", "lost"}}, ""});
  REQUIRE(end.missing.size() == 1);
  CHECK(end.missing[0].host == "node2 (10.0.0.2, pid 5)");
  CHECK(end.missing[0].reason == "lost");

  // Too long: still a valid object, which says what was left out and why.
  const std::string huge = R"({"host":")" + std::string(kMaxStacksAnswerBytes, 'x') + R"("})";
  const std::string body = encode(ClientMessage{StacksAnswer{1, huge}});
  CHECK(body.size() < 1024);
  const auto cut = round_trip_client(StacksAnswer{1, huge});
  CHECK(cut.answer.find("was left out: a node sends at most 524288 bytes") != std::string::npos);
  // Not an object: said so, never sent as it is.
  CHECK(round_trip_client(StacksAnswer{1, "[1"}).answer.find("not a JSON object") !=
        std::string::npos);

  // A peer that sends more than the bound, or no object, breaks the protocol.
  const std::string over = R"({"type":"stacks_answer","id":1,"answer":{"host":")" +
                           std::string(kMaxStacksAnswerBytes, 'x') + R"("}})";
  CHECK_THROWS_WITH(decode_server_message(over), Catch::Contains("at most 524288 allowed"));
  CHECK_THROWS_WITH(decode_client_message(R"({"type":"stacks_answer","id":1,"answer":"x"})"),
                    Catch::Contains("\"answer\" must be an object"));
  CHECK_THROWS_WITH(
      decode_server_message(R"({"type":"stacks_end","id":1,"missing":{},"error":""})"),
      Catch::Contains("\"missing\" must be an array"));
}
