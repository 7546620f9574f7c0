#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <cstring>

#include "parse_helpers.hpp"
#include "trainrun/launch/agent/agent_store.hpp"
#include "trainrun/launch/store/store_data.hpp"
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
  limits.max_stored_bytes = 10;
  StoreData s(limits);
  CHECK(s.handle(1, req(StoreQuery::set, {"k"}, {"12345"})).empty());
  CHECK(s.stored_bytes() == 6);
  try {
    s.handle(1, req(StoreQuery::set, {"j"}, {"12345"}));
    FAIL("stored past the bound");
  } catch (const StoreError& e) {
    CHECK(e.fault() == StoreFault::stored_bound);
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
  job.torch_major = 2;
  CHECK(uses_agent_store(config, job, {}));
  job.torch_major = 1;
  CHECK_FALSE(uses_agent_store(config, job, {}));
  job.torch_major.reset();
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
  explicit RawClient(int port) {
    socket.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
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
