#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "agent/agent_store.hpp"
#include "parse_helpers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/store/store_admission.hpp"
#include "trainrun/launch/store/store_data.hpp"
#include "trainrun/launch/store/store_limits.hpp"
#include "trainrun/launch/store/store_protocol.hpp"
#include "trainrun/launch/store/store_server.hpp"

using namespace trainrun::launch;

namespace {

StoreRequest req(StoreQuery q, std::vector<std::string> keys = {},
                 std::vector<std::string> values = {}, std::int64_t number = 0) {
  StoreRequest r;
  r.query = q;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

StoreRequest validate() {
  StoreRequest r;
  r.word = kStoreValidationMagic;
  return r;
}

std::string bytes_reply(const std::string& v) {
  std::string out;
  put_bytes(out, v);
  return out;
}

std::string i64_reply(std::int64_t v) {
  std::string out;
  put_i64(out, v);
  return out;
}

std::string byte_reply(std::uint8_t v) { return std::string(1, static_cast<char>(v)); }

// Every request after VALIDATE, decoded from what a client sends.
std::vector<StoreRequest> decode_all(const std::string& wire, std::size_t piece = 1) {
  StoreRequestDecoder d;
  std::vector<StoreRequest> out;
  for (std::size_t i = 0; i < wire.size(); i += piece) {
    d.feed(wire.data() + i, std::min(piece, wire.size() - i));
    while (auto r = d.next()) out.push_back(*r);
  }
  return out;
}

}  // namespace

TEST_CASE("the decoder reads every request a torch 2.x client sends, in any pieces") {
  const std::vector<StoreRequest> sent = {
      validate(),
      req(StoreQuery::set, {"k"}, {std::string("v\0w", 3)}),
      req(StoreQuery::compare_set, {"k"}, {"", "new"}),
      req(StoreQuery::get, {"k"}),
      req(StoreQuery::add, {"n"}, {}, -5),
      req(StoreQuery::check, {"a", "b"}),
      req(StoreQuery::wait, {"a"}),
      req(StoreQuery::get_num_keys),
      req(StoreQuery::delete_key, {"k"}),
      req(StoreQuery::append, {"k"}, {"more"}),
      req(StoreQuery::multi_get, {"a", "b", "c"}),
      req(StoreQuery::multi_set, {"a", "b"}, {"1", "2"}),
      req(StoreQuery::cancel_wait),
      req(StoreQuery::queue_push, {"q"}, {"item"}),
      req(StoreQuery::queue_pop, {"q"}),
      req(StoreQuery::queue_len, {"q"}),
      req(StoreQuery::list_keys),
      req(StoreQuery::barrier, {"b"}, {}, 4),
  };
  StoreRequest ping = req(StoreQuery::ping);
  ping.word = 4242;
  std::vector<StoreRequest> all = sent;
  all.push_back(ping);
  std::string wire;
  for (const auto& r : all) wire += encode_request(r);
  for (std::size_t piece : {std::size_t(1), std::size_t(7), wire.size()}) {
    CAPTURE(piece);
    CHECK(decode_all(wire, piece) == all);
  }
  // The bytes on the wire, as torch's SendBuffer writes them: the query, a u64 length, the key.
  const std::string get = encode_request(req(StoreQuery::get, {"ab"}));
  CHECK(get == std::string("\x03\x02\0\0\0\0\0\0\0ab", 11));
  CHECK(encode_request(validate()) == std::string("\x00\xce\xf7\x85\x3c", 5));
}

TEST_CASE("the decoder refuses what torch 2.x never sends") {
  auto fails = [](const std::string& wire, StoreFault fault, const std::string& part) {
    StoreRequestDecoder d;
    d.feed(wire.data(), wire.size());
    try {
      while (d.next()) {
      }
      FAIL("decoded: " << wire.size() << " bytes");
    } catch (const StoreError& e) {
      CHECK(e.fault() == fault);
      CHECK_THAT(e.what(), Catch::Contains(part));
    }
  };
  const std::string ok = encode_request(validate());
  SECTION("a first request that is not VALIDATE: a torch 1.x client") {
    fails(encode_request(req(StoreQuery::add, {"init/"}, {}, 1)), StoreFault::malformed,
          "ADD before VALIDATE");
  }
  SECTION("the wrong magic number") {
    StoreRequest v = validate();
    v.word = 7;
    fails(encode_request(v), StoreFault::malformed, "VALIDATE with magic 0x7");
  }
  SECTION("an unknown query") {
    fails(ok + std::string(1, '\x63'), StoreFault::malformed, "unknown request 99");
  }
  SECTION("bounds are checked from the length alone, before the bytes come") {
    std::string big_key = ok;
    put_u8(big_key, static_cast<std::uint8_t>(StoreQuery::get));
    put_i64(big_key, 8 * 1024 + 1);
    fails(big_key, StoreFault::key_bound, "bound of 8192 bytes");
    std::string big_value = ok + encode_request(req(StoreQuery::set, {"k"}, {""}));
    big_value.resize(big_value.size() - 8);
    put_i64(big_value, std::int64_t(1) << 40);
    fails(big_value, StoreFault::value_bound, "bound of 8388608 bytes");
    std::string many = ok;
    put_u8(many, static_cast<std::uint8_t>(StoreQuery::multi_get));
    put_i64(many, 1 << 20);
    fails(many, StoreFault::keys_bound, "bound of 131072 keys");
  }
}

TEST_CASE("a large request in small pieces is parsed once, each byte once") {
  // A MULTI_SET of 8 MB in 8,192 pairs, as the socket hands it over: 64 KiB at a time.
  std::vector<std::string> keys, values;
  for (int i = 0; i < 8192; ++i) {
    keys.push_back(fmt::format("key/{}", i));
    values.push_back(std::string(1000, static_cast<char>('a' + i % 26)));
  }
  const StoreRequest sent = req(StoreQuery::multi_set, keys, values);
  const std::string wire = encode_request(validate()) + encode_request(sent);
  StoreRequestDecoder d;
  std::vector<StoreRequest> got;
  for (std::size_t i = 0; i < wire.size(); i += 64 * 1024) {
    d.feed(wire.data() + i, std::min<std::size_t>(64 * 1024, wire.size() - i));
    while (auto r = d.next()) got.push_back(std::move(*r));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[1] == sent);
  CHECK(d.parsed() == wire.size());
  CHECK(d.buffered() == 0);
}

TEST_CASE("a connection that has sent a large value holds no buffer for it afterwards") {
  // Every rank of a Gloo job sets a key of 154 + 8 x ranks bytes, then stays connected: at 8,192
  // ranks, a buffer kept per idle connection held as much again as the keys themselves, and took
  // the store past its bound while the ranks started.
  StoreRequestDecoder d;
  const std::string wire =
      encode_request(validate()) +
      encode_request(req(StoreQuery::set, {"0//cpu//0/7"}, {std::string(154 + 8 * 8192, 'v')}));
  std::size_t most = 0;
  int got = 0;
  for (std::size_t i = 0; i < wire.size(); i += 64 * 1024) {
    d.feed(wire.data() + i, std::min<std::size_t>(64 * 1024, wire.size() - i));
    most = std::max(most, d.held());
    while (d.next()) ++got;
  }
  CHECK(got == 2);
  CHECK(most >= 64 * 1024);  // while it came, its bytes were held
  CHECK(d.buffered() == 0);
  CHECK(d.held() < 1024);
}

TEST_CASE("a partial request waits for its bytes") {
  StoreRequestDecoder d;
  const std::string wire =
      encode_request(validate()) + encode_request(req(StoreQuery::set, {"k"}, {"value"}));
  d.feed(wire.data(), wire.size() - 1);
  CHECK(d.next());  // VALIDATE
  CHECK_FALSE(d.next());
  CHECK_FALSE(d.next());
  d.feed(wire.data() + wire.size() - 1, 1);
  auto r = d.next();
  REQUIRE(r);
  CHECK(r->values == std::vector<std::string>{"value"});
  CHECK(d.buffered() == 0);
}

TEST_CASE("store data answers as torch's server does") {
  StoreData s;
  const StoreClient a = 1, b = 2;
  auto only = [](const std::vector<StoreReply>& out, StoreClient c, const std::string& bytes) {
    REQUIRE(out.size() == 1);
    CHECK(out[0].client == c);
    CHECK(out[0].bytes == bytes);
  };
  CHECK(s.handle(a, req(StoreQuery::set, {"k"}, {"v"})).empty());
  only(s.handle(a, req(StoreQuery::get, {"k"})), a, bytes_reply("v"));
  only(s.handle(a, req(StoreQuery::get, {"missing"})), a, bytes_reply(""));
  only(s.handle(a, req(StoreQuery::add, {"n"}, {}, 3)), a, i64_reply(3));
  only(s.handle(b, req(StoreQuery::add, {"n"}, {}, -1)), b, i64_reply(2));
  only(s.handle(a, req(StoreQuery::get, {"n"})), a, bytes_reply("2"));
  only(s.handle(a, req(StoreQuery::check, {"k", "x"})), a, byte_reply(kStoreNotReady));
  only(s.handle(a, req(StoreQuery::get_num_keys)), a, i64_reply(2));

  SECTION("WAIT answers when the last key comes, and CANCEL_WAIT drops a wait") {
    CHECK(s.handle(a, req(StoreQuery::wait, {"x", "y", "k"})).empty());
    CHECK(s.handle(b, req(StoreQuery::set, {"x"}, {"1"})).empty());
    only(s.handle(b, req(StoreQuery::set, {"y"}, {"1"})), a, byte_reply(kStoreStopWaiting));
    CHECK(s.handle(a, req(StoreQuery::wait, {"z"})).empty());
    only(s.handle(a, req(StoreQuery::cancel_wait)), a, byte_reply(kStoreWaitCanceled));
    CHECK(s.handle(b, req(StoreQuery::set, {"z"}, {"1"})).empty());
  }
  SECTION("COMPARE_SET swaps only on a match") {
    only(s.handle(a, req(StoreQuery::compare_set, {"k"}, {"no", "w"})), a, bytes_reply("v"));
    only(s.handle(a, req(StoreQuery::compare_set, {"k"}, {"v", "w"})), a, bytes_reply("w"));
    only(s.handle(a, req(StoreQuery::compare_set, {"new"}, {"", "x"})), a, bytes_reply("x"));
    only(s.handle(a, req(StoreQuery::compare_set, {"none"}, {"e", "x"})), a, bytes_reply("e"));
    only(s.handle(a, req(StoreQuery::check, {"none"})), a, byte_reply(kStoreNotReady));
  }
  SECTION("APPEND, DELETE_KEY, MULTI_GET, MULTI_SET, LIST_KEYS") {
    CHECK(s.handle(a, req(StoreQuery::append, {"k"}, {"w"})).empty());
    CHECK(s.handle(a, req(StoreQuery::multi_set, {"m1", "m2"}, {"1", "2"})).empty());
    only(s.handle(a, req(StoreQuery::multi_get, {"k", "m2"})), a,
         bytes_reply("vw") + bytes_reply("2"));
    only(s.handle(a, req(StoreQuery::delete_key, {"m1"})), a, i64_reply(1));
    only(s.handle(a, req(StoreQuery::delete_key, {"m1"})), a, i64_reply(0));
    only(s.handle(a, req(StoreQuery::list_keys)), a,
         i64_reply(3) + bytes_reply("k") + bytes_reply("m2") + bytes_reply("n"));
  }
  SECTION("a queue wakes one waiter per push, and pops in order") {
    CHECK(s.handle(a, req(StoreQuery::wait, {"q"})).empty());
    CHECK(s.handle(b, req(StoreQuery::wait, {"q"})).empty());
    only(s.handle(a, req(StoreQuery::queue_push, {"q"}, {"one"})), a,
         byte_reply(kStoreStopWaiting));
    CHECK(s.handle(a, req(StoreQuery::queue_push, {"q"}, {"two"})).size() == 1);
    only(s.handle(a, req(StoreQuery::queue_len, {"q"})), a, i64_reply(2));
    only(s.handle(a, req(StoreQuery::queue_pop, {"q"})), a, i64_reply(2) + bytes_reply("one"));
    only(s.handle(a, req(StoreQuery::queue_pop, {"q"})), a, i64_reply(1) + bytes_reply("two"));
    only(s.handle(a, req(StoreQuery::queue_pop, {"q"})), a, i64_reply(0));
  }
  SECTION("BARRIER answers everyone when the last arrives") {
    CHECK(s.handle(a, req(StoreQuery::barrier, {"bar"}, {}, 3)).empty());
    CHECK(s.handle(b, req(StoreQuery::barrier, {"bar"}, {}, 3)).empty());
    const auto out = s.handle(3, req(StoreQuery::barrier, {"bar"}, {}, 3));
    REQUIRE(out.size() == 3);
    CHECK(out[0].client == 3);
    CHECK(out[1].client == a);
    CHECK(out[2].client == b);
  }
  SECTION("a gone client's wait is forgotten") {
    CHECK(s.handle(a, req(StoreQuery::wait, {"later"})).empty());
    s.forget(a);
    CHECK(s.handle(b, req(StoreQuery::set, {"later"}, {"1"})).empty());
  }
  SECTION("ADD to a value that is not a number is refused and changes nothing") {
    CHECK_THROWS_WITH(s.handle(a, req(StoreQuery::add, {"k"}, {}, 1)),
                      Catch::Contains("whose value is not a number"));
    only(s.handle(a, req(StoreQuery::get, {"k"})), a, bytes_reply("v"));
  }
  SECTION("clear empties everything") {
    s.clear();
    CHECK(s.keys() == 0);
    CHECK(s.stored_bytes() == 0);
  }
}

TEST_CASE("store data keeps to its bound of stored bytes") {
  StoreLimits limits;
  limits.max_held_bytes = 10;
  StoreData s(limits);
  CHECK(s.handle(1, req(StoreQuery::set, {"k"}, {"12345"})).empty());
  CHECK(s.stored_bytes() == 6);
  try {
    s.handle(1, req(StoreQuery::set, {"j"}, {"12345"}));
    FAIL("stored past the bound");
  } catch (const StoreError& e) {
    CHECK(e.fault() == StoreFault::held_bound);
    CHECK_THAT(e.what(), Catch::Contains("more than its bound of 10 bytes"));
  }
  // Replacing a value counts what it frees.
  CHECK(s.handle(1, req(StoreQuery::set, {"k"}, {"123456789"})).empty());
  CHECK(s.stored_bytes() == 10);
  CHECK_THROWS_AS(s.handle(1, req(StoreQuery::multi_set, {"a", "k"}, {"", "1"})), StoreError);
  CHECK(s.handle(1, req(StoreQuery::multi_set, {"k"}, {"1"})).empty());
  CHECK(s.stored_bytes() == 2);
}

TEST_CASE("torchrun 2.x shares its store in these configurations") {
  using trainrun::test::parse;
  auto shares = [](std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.push_back("train.py");
    return torchrun2_shares_store(parse(args, env), env);
  };
  CHECK(shares({"--standalone"}));
  CHECK(shares({}));
  CHECK(shares({"--master-port=29600"}));
  CHECK(shares({"--nnodes=2", "--node-rank=1", "--master-addr=h", "--master-port=29600"}));
  CHECK(shares({"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400"}));
  CHECK_FALSE(shares({"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400"},
                     {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}));
  CHECK_FALSE(shares({"--standalone"}, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}));
  // The static handler shares whatever the variable says.
  CHECK(shares({"--master-port=29600"}, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}));
}

TEST_CASE("workers whose torch client speaks the old protocol keep the store of their RANK 0") {
  const auto config = trainrun::test::parse({"--standalone", "train.py"});
  JobSettings job;
  job.python_workers = true;
  CHECK(uses_agent_store(config, job, {}));  // torch not found: torch 2.x's variables
  job.torch = TorchVersion{2, 15};
  CHECK(uses_agent_store(config, job, {}));
  job.torch = TorchVersion{1, 13};
  CHECK_FALSE(uses_agent_store(config, job, {}));
  job.torch.reset();
  job.python_workers = false;
  CHECK_FALSE(uses_agent_store(config, job, {}));
}

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// A blocking client on its own io_context, while the server's loop is run in steps.
struct RawClient {
  asio::io_context io;
  tcp::socket socket{io};
  // From and to `address` (one of this machine's).
  explicit RawClient(int port, const std::string& address = "127.0.0.1") {
    const auto a = asio::ip::make_address(address);
    socket.open(a.is_v4() ? tcp::v4() : tcp::v6());
    socket.bind(tcp::endpoint(a, 0));
    socket.connect(tcp::endpoint(a, static_cast<unsigned short>(port)));
  }
  void send(const std::string& bytes) { asio::write(socket, asio::buffer(bytes)); }
};

// Runs the server's loop until `done` holds (each step handles what is ready).
template <typename F>
void run_until(asio::io_context& io, F done) {
  for (int i = 0; i < 100000 && !done(); ++i) {
    io.restart();
    io.run_for(std::chrono::milliseconds(1));
  }
  REQUIRE(done());
}

std::string read_exactly(RawClient& c, asio::io_context& server_io, std::size_t n) {
  std::string got(n, '\0');
  std::size_t have = 0;
  c.socket.non_blocking(true);
  run_until(server_io, [&] {
    boost::system::error_code ec;
    have += c.socket.read_some(asio::buffer(&got[have], n - have), ec);
    return have == n;
  });
  return got;
}

bool closed_by_server(RawClient& c, asio::io_context& server_io) {
  c.socket.non_blocking(true);
  bool eof = false;
  run_until(server_io, [&] {
    char byte;
    boost::system::error_code ec;
    c.socket.read_some(asio::buffer(&byte, 1), ec);
    eof = ec == asio::error::eof || ec == asio::error::connection_reset;
    return eof;
  });
  return eof;
}

}  // namespace

TEST_CASE("the server serves real sockets and closes a bad connection with a line") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreServer server(io, [&](const std::string& line, Level) { said.push_back(line); });
  server.open(0);
  REQUIRE(server.port() > 0);

  RawClient waiter(server.port()), setter(server.port());
  const std::string hello = encode_request(validate());
  waiter.send(hello + encode_request(req(StoreQuery::wait, {"key"})));
  StoreRequest ping = req(StoreQuery::ping);
  ping.word = 77;
  setter.send(hello + encode_request(ping));
  std::string pong;
  put_u32(pong, 77);
  CHECK(read_exactly(setter, io, 4) == pong);
  run_until(io, [&] { return server.connections() == 2; });
  setter.send(encode_request(req(StoreQuery::set, {"key"}, {"value"})));
  CHECK(read_exactly(waiter, io, 1) == byte_reply(kStoreStopWaiting));
  waiter.send(encode_request(req(StoreQuery::get, {"key"})));
  CHECK(read_exactly(waiter, io, 13) == bytes_reply("value"));

  // A torch 1.x client's first request: that connection alone is closed, and said.
  RawClient old(server.port());
  old.send(encode_request(req(StoreQuery::add, {"init/"}, {}, 1)));
  CHECK(closed_by_server(old, io));
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("c10d store: closed the connection from 127.0.0.1:"));
  CHECK_THAT(said[0], Catch::Contains("ADD before VALIDATE"));
  setter.send(encode_request(req(StoreQuery::get_num_keys)));
  CHECK(read_exactly(setter, io, 8) == i64_reply(1));

  // A new attempt: nobody is accepted while stopped, and the next one starts empty.
  server.close();
  CHECK(server.connections() == 0);
  CHECK(closed_by_server(setter, io));
  server.clear();
  const int port = server.port();
  server.open(port);
  RawClient next(port);
  next.send(hello + encode_request(req(StoreQuery::get_num_keys)));
  CHECK(read_exactly(next, io, 8) == i64_reply(0));
}

TEST_CASE("the store admits loopback and the admitted addresses, IPv4 and IPv6 alike") {
  const auto a = [](const char* text) { return asio::ip::make_address(text); };
  const std::set<asio::ip::address> round{a("10.0.0.1"), a("fd00::2"), a("fe80::3")};
  CHECK(store_admits(a("10.0.0.1"), round));
  CHECK_FALSE(store_admits(a("10.0.0.7"), round));
  CHECK(store_admits(a("fd00::2"), round));
  CHECK_FALSE(store_admits(a("fd00::7"), round));
  // A dual-stack socket shows an IPv4 client mapped; a link-local one with its interface.
  CHECK(store_admits(a("::ffff:10.0.0.1"), round));
  CHECK_FALSE(store_admits(a("::ffff:10.0.0.7"), round));
  CHECK(store_admits(a("fe80::3%1"), round));
  // Loopback always, whatever the set: this machine's own workers.
  for (const char* loopback : {"127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"}) {
    CHECK(store_admits(a(loopback), {}));
    CHECK(store_admits(a(loopback), round));
  }
  CHECK_FALSE(store_admits(a("0.0.0.0"), {}));
  CHECK(comparable_address(a("::ffff:10.0.0.1")) == a("10.0.0.1"));
}

TEST_CASE("a round admits its nodes and this machine; a node known by name alone, everyone") {
  const auto a = [](const char* text) { return asio::ip::make_address(text); };
  const StoreAdmission round = StoreAdmission::round({"10.0.0.1", "fd00::2"}, {"192.168.1.5"});
  CHECK(round.admits(a("10.0.0.1")));
  CHECK(round.admits(a("::ffff:10.0.0.1")));
  CHECK(round.admits(a("fd00::2")));
  CHECK(round.admits(a("192.168.1.5")));  // this machine: the node serving the store
  CHECK(round.admits(a("::1")));
  CHECK_FALSE(round.admits(a("10.0.0.7")));
  CHECK(round.open_why().empty());
  CHECK(round.admitted() == "the round's nodes: 10.0.0.1, fd00::2");

  // A new round: the set is its own.
  const StoreAdmission next = StoreAdmission::round({"10.0.0.7"}, {});
  CHECK(next.admits(a("10.0.0.7")));
  CHECK_FALSE(next.admits(a("10.0.0.1")));

  const StoreAdmission alone = StoreAdmission::this_machine({"192.168.1.5"});
  CHECK(alone.admits(a("192.168.1.5")));
  CHECK_FALSE(alone.admits(a("10.0.0.1")));
  CHECK(alone.admitted() == "the job runs on this machine alone");
  CHECK_FALSE(StoreAdmission().admits(a("192.168.1.5")));
  CHECK(StoreAdmission().admits(a("127.0.0.1")));

  const StoreAdmission named = StoreAdmission::round({"10.0.0.1", "node-b"}, {});
  CHECK(named.admits(a("10.0.0.7")));
  CHECK_THAT(named.open_why(), Catch::Contains("host name \"node-b\""));
  const StoreAdmission older = StoreAdmission::round({}, {});
  CHECK(older.admits(a("10.0.0.7")));
  CHECK_THAT(older.open_why(), Catch::Contains("named no node addresses"));

  std::vector<std::string> many;
  for (int i = 1; i <= 10; ++i) many.push_back("10.0.0." + std::to_string(i));
  CHECK_THAT(StoreAdmission::round(many, {}).admitted(), Catch::EndsWith("10.0.0.8 and 2 more"));
}

TEST_CASE("the server closes a connection from an address not admitted, with a throttled line") {
  // A client from one of this machine's addresses that is not loopback, which the round does
  // not name.
  std::string stranger;
  for (const std::string& address : trainrun::this_machine_addresses()) {
    const auto a = asio::ip::make_address(address);
    if (a.is_v4() && !a.is_loopback()) stranger = address;
  }
  if (stranger.empty()) {
    WARN("this machine has no IPv4 address beside loopback: nothing to refuse");
    return;
  }
  asio::io_context io;
  std::vector<std::string> said;
  StoreServer server(io, [&](const std::string& line, Level) { said.push_back(line); });
  server.admit_only(StoreAdmission::round({"10.0.0.1"}, {}));
  server.open(0);
  RawClient first(server.port(), stranger), second(server.port(), stranger),
      third(server.port(), stranger);
  CHECK(closed_by_server(first, io));
  CHECK(closed_by_server(second, io));
  CHECK(closed_by_server(third, io));
  CHECK(server.refused() == 3);
  CHECK(server.connections() == 0);
  // The first is said with its address, the others held back and counted.
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0],
             Catch::Contains(fmt::format("c10d store: refused a connection from {}:", stranger)));
  CHECK_THAT(said[0], Catch::EndsWith("not a node of this job (the round's nodes: 10.0.0.1)"));

  // The job's own (loopback here) are served.
  RawClient own(server.port());
  own.send(encode_request(validate()) + encode_request(req(StoreQuery::get_num_keys)));
  CHECK(read_exactly(own, io, 8) == i64_reply(0));

  server.close();
  REQUIRE(said.size() == 2);
  CHECK(said[1] == "c10d store: ... and 2 more refusals: 2 not a node of this job");
}

TEST_CASE("the store's connection bound admits every rank of a job of 100000 ranks") {
  // torch 2.x's client opens a connection per rank (and per clone); a bound below the job's
  // ranks refuses ranks that a libuv server would serve.
  CHECK(StoreLimits{}.max_connections >= 100000);
}

TEST_CASE("the server refuses connections past its bound, saying it once") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreLimits limits;
  limits.max_connections = 1;
  StoreServer server(
      io, [&](const std::string& line, Level) { said.push_back(line); }, limits);
  server.open(0);
  RawClient first(server.port());
  run_until(io, [&] { return server.connections() == 1; });
  RawClient second(server.port()), third(server.port());
  CHECK(closed_by_server(second, io));
  CHECK(closed_by_server(third, io));
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("it serves at most 1 connections at once"));
  first.send(encode_request(validate()) + encode_request(req(StoreQuery::get_num_keys)));
  CHECK(read_exactly(first, io, 8) == i64_reply(0));
}

TEST_CASE("a bound broken by several connections is said once, with the bound") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreServer server(io, [&](const std::string& line, Level) { said.push_back(line); });
  server.open(0);
  std::string big_key = encode_request(validate());
  put_u8(big_key, static_cast<std::uint8_t>(StoreQuery::set));
  put_i64(big_key, 100000);
  RawClient a(server.port()), b(server.port());
  a.send(big_key);
  b.send(big_key);
  CHECK(closed_by_server(a, io));
  CHECK(closed_by_server(b, io));
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("SET with a key of 100000 bytes: more than the store's "
                                      "bound of 8192 bytes"));
}

TEST_CASE("a port another process listens on is refused in one line") {
  asio::io_context io;
  tcp::acceptor other(io, tcp::endpoint(tcp::v4(), 0));
  const int port = other.local_endpoint().port();
  StoreServer server(io, [](const std::string&, Level) {});
  CHECK_THROWS_WITH(
      server.open(port),
      Catch::StartsWith(fmt::format("the workers' c10d store cannot listen on port {}: ", port)));
  CHECK_FALSE(server.listening());
}

TEST_CASE("a store that stops accepting still serves the connections it has") {
  asio::io_context io;
  StoreServer server(io, [](const std::string&, Level) {});
  server.open(0);
  const int port = server.port();
  RawClient old(port);
  run_until(io, [&] { return server.connections() == 1; });
  server.stop_accepting();
  CHECK_FALSE(server.listening());
  CHECK_THROWS(RawClient(port));
  old.send(encode_request(validate()) + encode_request(req(StoreQuery::add, {"n"}, {}, 2)));
  CHECK(read_exactly(old, io, 8) == i64_reply(2));
}

namespace {

// Kilobytes of a line of /proc/self/status (VmRSS, VmHWM): this process serves the store.
std::size_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  FAIL("no " << field << " in /proc/self/status");
  return 0;
}

// AddressSanitizer's allocator keeps freed memory in quarantine, so RSS shows its memory and not
// the store's; under it the bounds are checked through the store's own count alone.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssIsTheStores = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRssIsTheStores = false;
#else
constexpr bool kRssIsTheStores = true;
#endif
#else
constexpr bool kRssIsTheStores = true;
#endif

// Memory the process served with at most, from now on: VmHWM starts again from VmRSS.
struct PeakMemory {
  std::size_t base_kib;
  PeakMemory() {
    ::malloc_trim(0);  // what earlier tests freed does not hide what comes
    std::ofstream("/proc/self/clear_refs") << "5";
    base_kib = status_kib("VmRSS");
  }
  std::size_t grown_mib() const {
    if (!kRssIsTheStores) return 0;
    const std::size_t hwm = status_kib("VmHWM");
    return hwm > base_kib ? (hwm - base_kib) / 1024 : 0;
  }
};

constexpr std::size_t kMiB = 1024 * 1024;

// Allocator pages, the test's own buffers and one request in flight, beyond the store's bound.
constexpr std::size_t kSlackMiB = 24;

// Writes without blocking while the server's loop runs; stops early if the server closes.
// Once a socket is non-blocking, every later send goes through here: the 8 MiB before it may
// still fill the kernel's buffers, where a plain write fails with EAGAIN.
void send_all(RawClient& c, asio::io_context& server_io, const std::string& bytes) {
  c.socket.non_blocking(true);
  std::size_t sent = 0;
  bool failed = false;
  run_until(server_io, [&] {
    boost::system::error_code ec;
    sent += c.socket.write_some(asio::buffer(bytes.data() + sent, bytes.size() - sent), ec);
    failed = ec && ec != asio::error::would_block;
    return failed || sent == bytes.size();
  });
}

// A connection that does not read: the server closes it, or it grows past what it may hold.
bool closed_unread(RawClient& c, asio::io_context& server_io, const PeakMemory& peak,
                   std::size_t bound_mib) {
  c.socket.non_blocking(true);
  bool closed = false;
  run_until(server_io, [&] {
    char byte;
    boost::system::error_code ec;
    c.socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
    closed = ec == asio::error::eof || ec == asio::error::connection_reset;
    return closed || peak.grown_mib() > bound_mib + kSlackMiB;
  });
  return closed;
}

std::string hello() { return encode_request(validate()); }

std::size_t said_with(const std::vector<std::string>& said, const std::string& part) {
  return static_cast<std::size_t>(std::count_if(said.begin(), said.end(), [&](const auto& line) {
    return line.find(part) != std::string::npos;
  }));
}

}  // namespace

TEST_CASE("a reply the store cannot hold is refused before it is made") {
  // 400 copies of an 8 MiB value asked in one request of 4.4 KB: 3.2 GB of reply, never read.
  asio::io_context io;
  std::vector<std::string> said;
  StoreLimits limits;
  limits.max_held_bytes = 64 * kMiB;
  StoreServer server(
      io, [&](const std::string& line, Level) { said.push_back(line); }, limits);
  server.open(0);
  const std::string value(8 * kMiB, 'v');
  const std::string set = hello() + encode_request(req(StoreQuery::set, {"big"}, {value}));
  const std::string expected = bytes_reply(value);
  PeakMemory peak;
  RawClient a(server.port());
  send_all(a, io, set);
  send_all(a, io, encode_request(req(StoreQuery::multi_get, std::vector<std::string>(400, "big"))));
  CHECK(closed_unread(a, io, peak, 64));
  CHECK(peak.grown_mib() <= 64 + kSlackMiB);
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("closed the connection from 127.0.0.1:"));
  CHECK_THAT(said[0], Catch::Contains("more than its bound of 67108864 bytes"));
  // The store goes on: the value is still there for a client that reads.
  RawClient b(server.port());
  b.send(hello() + encode_request(req(StoreQuery::get, {"big"})));
  CHECK(read_exactly(b, io, 8 + value.size()) == expected);
}

TEST_CASE("a client that does not read its replies is neither served nor read until it does") {
  // 60 GETs of an 8 MiB value, unread: the server stops once 16 MiB wait to be sent.
  asio::io_context io;
  std::vector<std::string> said;
  StoreServer server(io, [&](const std::string& line, Level) { said.push_back(line); });
  server.open(0);
  const std::string value(8 * kMiB, 'v');
  const std::string set = hello() + encode_request(req(StoreQuery::set, {"big"}, {value}));
  const std::string expected = bytes_reply(value);
  std::string gets;
  for (int i = 0; i < 60; ++i) gets += encode_request(req(StoreQuery::get, {"big"}));
  PeakMemory peak;
  RawClient a(server.port());
  send_all(a, io, set);
  send_all(a, io, gets);
  // The value, one reply in the socket's buffers, and what waits to be sent: 16 MiB and a reply.
  const std::size_t bound_mib = 8 + 8 + 16 + 8;
  for (int i = 0; i < 2000; ++i) {
    io.restart();
    io.run_for(std::chrono::milliseconds(1));
  }
  CHECK(peak.grown_mib() <= bound_mib + kSlackMiB);
  CHECK(server.data().budget().used() <= (8 + 16 + 8) * kMiB + 64 * 1024);
  // It reads: every reply comes, in order, and nothing was refused.
  for (int i = 0; i < 60; ++i) {
    CAPTURE(i);
    REQUIRE(read_exactly(a, io, 8 + value.size()) == expected);
  }
  CHECK(said.empty());
  CHECK(peak.grown_mib() <= bound_mib + kSlackMiB);
}

TEST_CASE("replies unsent to several clients count against the store's one bound") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreLimits limits;
  limits.max_held_bytes = 48 * kMiB;
  StoreServer server(
      io, [&](const std::string& line, Level) { said.push_back(line); }, limits);
  server.open(0);
  const std::string set =
      hello() + encode_request(req(StoreQuery::set, {"big"}, {std::string(4 * kMiB, 'v')}));
  std::string gets = hello();
  for (int i = 0; i < 60; ++i) gets += encode_request(req(StoreQuery::get, {"big"}));
  PeakMemory peak;
  RawClient setter(server.port());
  send_all(setter, io, set);
  send_all(setter, io, encode_request(req(StoreQuery::get_num_keys)));
  REQUIRE(read_exactly(setter, io, 8) == i64_reply(1));  // stored before anyone asks
  std::vector<std::unique_ptr<RawClient>> readers;
  for (int i = 0; i < 6; ++i) {
    readers.push_back(std::make_unique<RawClient>(server.port()));
    readers.back()->send(gets);
  }
  // Each would keep 16 MiB and more; together they would pass the bound, so some are closed.
  run_until(io, [&] { return !said.empty() || peak.grown_mib() > 48 + kSlackMiB; });
  for (int i = 0; i < 500; ++i) {
    io.restart();
    io.run_for(std::chrono::milliseconds(1));
  }
  CHECK(peak.grown_mib() <= 48 + kSlackMiB);
  CHECK(server.data().budget().used() <= 48 * kMiB);
  CHECK(said_with(said, "more than its bound of 50331648 bytes") == 1);
  CHECK(said.size() == 1);
}

TEST_CASE("waits and requests stalled mid-way count against the store's one bound") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreLimits limits;
  limits.max_held_bytes = 64 * kMiB;
  StoreServer server(
      io, [&](const std::string& line, Level) { said.push_back(line); }, limits);
  server.open(0);
  // MULTI_SETs of 40 MiB stopped after 12 MiB.
  const std::string multi_set =
      hello() + encode_request(req(StoreQuery::multi_set, {"a", "b", "c", "d", "e"},
                                   std::vector<std::string>(5, std::string(8 * kMiB, 'v'))));
  const std::string stalled = multi_set.substr(0, 12 * kMiB);
  // WAITs on keys never set: 1,000 keys of 8 KiB each, 8 MiB of waits a client.
  std::vector<std::string> waits;
  for (int c = 0; c < 12; ++c) {
    std::vector<std::string> keys;
    for (int k = 0; k < 1000; ++k)
      keys.push_back(fmt::format("{:08}{:08}", c, k) + std::string(8176, 'k'));
    waits.push_back(hello() + encode_request(req(StoreQuery::wait, keys)));
  }
  PeakMemory peak;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int c = 0; c < 3; ++c) {
    clients.push_back(std::make_unique<RawClient>(server.port()));
    send_all(*clients.back(), io, stalled);
  }
  for (const auto& wait : waits) {
    clients.push_back(std::make_unique<RawClient>(server.port()));
    send_all(*clients.back(), io, wait);
  }
  for (int i = 0; i < 500; ++i) {
    io.restart();
    io.run_for(std::chrono::milliseconds(1));
  }
  CHECK(peak.grown_mib() <= 64 + kSlackMiB);
  CHECK(server.data().budget().used() <= 64 * kMiB);
  CHECK(server.connections() < clients.size());
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("more than its bound of 67108864 bytes"));
  // Once the clients are gone, the store holds nothing of theirs.
  clients.clear();
  run_until(io, [&] { return server.connections() == 0; });
  CHECK(server.data().budget().used() == 0);
  CHECK(server.data().wait_bytes() == 0);
  // And the memory is the system's again, not kept by the allocator.
  if (kRssIsTheStores) CHECK(status_kib("VmRSS") <= peak.base_kib + 8 * 1024);
}

TEST_CASE("a store out of descriptors waits for them without spinning, and says so once") {
  asio::io_context io;
  std::vector<std::string> said;
  StoreServer server(io, [&](const std::string& line, Level) { said.push_back(line); });
  server.open(0);
  // Connected, but not accepted yet: the server's loop has not run.
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<RawClient>(server.port()));
  rlimit original{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &original) == 0);
  std::vector<int> filler;
  rlimit low = original;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
  REQUIRE(errno == EMFILE);
  // A second of an accept that fails: each try is a handler run.
  std::size_t handlers = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    io.restart();
    handlers += io.run_for(std::chrono::milliseconds(10));
  }
  const std::size_t connections = server.connections();
  for (int fd : filler) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &original) == 0);
  CHECK(connections == 0);
  CHECK(handlers < 100);
  REQUIRE(said.size() == 1);
  CHECK_THAT(said[0], Catch::Contains("c10d store: cannot accept a connection: Too many open "
                                      "files (the agent has its limit of 256 open files"));
  // Descriptors free again: the waiting clients are accepted and served.
  run_until(io, [&] { return server.connections() == 3; });
  clients[2]->send(hello() + encode_request(req(StoreQuery::add, {"n"}, {}, 5)));
  CHECK(read_exactly(*clients[2], io, 8) == i64_reply(5));
  CHECK(said.size() == 1);
}

TEST_CASE("the store's agent says at start where the accept queue cannot hold every rank's connect") {
  CHECK_FALSE(trainrun::launch::store_backlog_shortfall(4096, 4096));
  CHECK_FALSE(trainrun::launch::store_backlog_shortfall(16384, 0));  // unknown: nothing said
  const auto line = trainrun::launch::store_backlog_shortfall(16384, 4096);
  REQUIRE(line);
  CHECK(*line ==
        "the job's c10d store takes a connection from each of its 16384 ranks, all at once at each "
        "start, and this node's accept queue holds 4096 (net.core.somaxconn): connects past it "
        "are dropped and tried again about 1 s later; `sysctl -w net.core.somaxconn=16384` on "
        "this node avoids it");
  // This machine's own value, read from /proc: said for a job larger than it, not for one rank.
  std::ifstream in("/proc/sys/net/core/somaxconn");
  std::uint64_t somaxconn = 0;
  if (!(in >> somaxconn)) return;
  CHECK_FALSE(trainrun::launch::store_backlog_shortfall(1));
  CHECK(trainrun::launch::store_backlog_shortfall(somaxconn + 1) ==
        trainrun::launch::store_backlog_shortfall(somaxconn + 1, somaxconn));
}
