#include "handshake.hpp"

#include <catch2/catch.hpp>

#include "trainrun/rendezvous/crypto.hpp"

using namespace trainrun::rendezvous;

namespace {

struct Outcome {
  HandshakeOutcome server = HandshakeOutcome::pending;
  HandshakeOutcome client = HandshakeOutcome::pending;
  std::string server_reason;
  std::string client_reason;
  std::optional<SessionKeys> server_keys;
  std::optional<SessionKeys> client_keys;
  Refusal refusal = Refusal::none;  // the kind of the server's reject, as the client read it
};

// Runs both halves against each other, passing messages through encode/decode as the wire does.
Outcome run(const std::string& server_run, std::optional<std::string> server_token,
            const std::string& client_run, std::optional<std::string> client_token) {
  ServerHandshake server(server_run, server_token, random_nonce(), Welcome{});
  ClientHandshake client(client_run, client_token, random_nonce());
  Outcome out;
  ClientMessage to_server = client.hello();
  for (int i = 0; i < 4; ++i) {
    auto s = server.on_message(decode_client_message(encode(to_server)));
    out.server = s.outcome;
    out.server_reason = s.reason;
    if (s.keys) out.server_keys = s.keys;
    if (!s.reply) break;
    const ServerMessage reply = decode_server_message(encode(*s.reply));
    if (const auto* reject = std::get_if<Reject>(&reply)) out.refusal = reject->kind;
    auto c = client.on_message(reply);
    out.client = c.outcome;
    out.client_reason = c.reason;
    if (c.keys) out.client_keys = c.keys;
    if (!c.reply) break;
    to_server = *c.reply;
  }
  return out;
}

}  // namespace

TEST_CASE("a client with the right run id and no token is welcomed", "[rendezvous]") {
  Outcome o = run("job7", std::nullopt, "job7", std::nullopt);
  CHECK(o.server == HandshakeOutcome::accepted);
  CHECK(o.client == HandshakeOutcome::accepted);
}

TEST_CASE("matching tokens are proven both ways", "[rendezvous]") {
  Outcome o = run("job7", "s3cret", "job7", "s3cret");
  CHECK(o.server == HandshakeOutcome::accepted);
  CHECK(o.client == HandshakeOutcome::accepted);
}

TEST_CASE("a handshake with a token gives both ends the same session keys", "[rendezvous]") {
  Outcome o = run("job7", "s3cret", "job7", "s3cret");
  REQUIRE(o.server_keys);
  REQUIRE(o.client_keys);
  CHECK(o.client_keys->send == o.server_keys->receive);
  CHECK(o.client_keys->receive == o.server_keys->send);
  CHECK(o.client_keys->send != o.client_keys->receive);  // one key per direction
  CHECK(o.client_keys->send.size() == 32);
  CHECK(o.client_keys->send.find("s3cret") == std::string::npos);
  // Fresh nonces: another connection of the same job has other keys.
  Outcome again = run("job7", "s3cret", "job7", "s3cret");
  REQUIRE(again.client_keys);
  CHECK(again.client_keys->send != o.client_keys->send);
  // Without a token there is nothing to key frames with.
  Outcome open = run("job7", std::nullopt, "job7", std::nullopt);
  CHECK_FALSE(open.server_keys);
  CHECK_FALSE(open.client_keys);
}

TEST_CASE("sealed frames open only with the peer's keys", "[rendezvous]") {
  const std::string cn = random_nonce(), sn = random_nonce();
  FrameAuth client(client_session_keys("s3cret", "job7", cn, sn));
  FrameAuth server(server_session_keys("s3cret", "job7", cn, sn));
  CHECK(server.open(client.seal("{\"type\":\"join\"}")) == "{\"type\":\"join\"}");
  CHECK(client.open(server.seal("{\"type\":\"welcome\"}")) == "{\"type\":\"welcome\"}");
  // A frame sealed on another connection (other nonces) does not open on this one.
  FrameAuth other(client_session_keys("s3cret", "job7", random_nonce(), sn));
  CHECK_THROWS_WITH(server.open(other.seal("{}")), Catch::Contains("authentication failed"));
  // Nor does one sealed with another token.
  FrameAuth stranger(client_session_keys("guess", "job7", cn, sn));
  FrameAuth fresh(server_session_keys("s3cret", "job7", cn, sn));
  CHECK_THROWS_WITH(fresh.open(stranger.seal("{}")), Catch::Contains("authentication failed"));
}

TEST_CASE("strangers are refused with a reason", "[rendezvous]") {
  SECTION("another run id") {
    Outcome o = run("job7", std::nullopt, "job8", std::nullopt);
    CHECK(o.server == HandshakeOutcome::rejected);
    CHECK(o.client == HandshakeOutcome::rejected);
    CHECK_THAT(o.client_reason, Catch::Contains("run id \"job8\" does not match"));
    CHECK_THAT(o.client_reason, !Catch::Contains("job7"));  // the job's id is not revealed
    // What to change is the launcher's to say (--rdzv-id), by the kind.
    CHECK(o.refusal == Refusal::run_id);
    CHECK_THAT(o.client_reason, !Catch::Contains("--"));
  }
  SECTION("a wrong token: the client refuses the server's proof first") {
    Outcome o = run("job7", "s3cret", "job7", "guess");
    CHECK(o.client == HandshakeOutcome::rejected);
    CHECK_THAT(o.client_reason, Catch::Contains("different tokens"));
  }
  SECTION("no token where one is required") {
    Outcome o = run("job7", "s3cret", "job7", std::nullopt);
    CHECK(o.server == HandshakeOutcome::rejected);
    CHECK_THAT(o.client_reason, Catch::Contains("requires a shared token"));
    CHECK(o.refusal == Refusal::token);
    CHECK_THAT(o.client_reason, !Catch::Contains("token_file"));
  }
  SECTION("a token where none is configured") {
    Outcome o = run("job7", std::nullopt, "job7", "s3cret");
    CHECK(o.server == HandshakeOutcome::rejected);
    CHECK_THAT(o.client_reason, Catch::Contains("has none"));
  }
}

TEST_CASE("the server refuses a wrong client proof, other versions and bad order", "[rendezvous]") {
  Hello hello;
  hello.run_id = "job7";
  hello.nonce = random_nonce();
  hello.auth = true;
  SECTION("wrong proof") {
    ServerHandshake server("job7", std::string("s3cret"), random_nonce(), Welcome{});
    REQUIRE(std::holds_alternative<Challenge>(*server.on_message(hello).reply));
    auto step = server.on_message(Auth{std::string(64, '0')});
    CHECK(step.outcome == HandshakeOutcome::rejected);
    CHECK_THAT(step.reason, Catch::Contains("token proof does not match"));
    // The reject is sealed, as a welcome would be: a client that holds the token opens it.
    CHECK(step.keys);
  }
  SECTION("a version 1 peer, which does not authenticate its frames") {
    ServerHandshake server("job7", std::nullopt, random_nonce(), Welcome{});
    hello.auth = false;
    hello.version = 1;
    auto step = server.on_message(hello);
    CHECK(step.outcome == HandshakeOutcome::rejected);
    CHECK_THAT(step.reason, Catch::Contains("protocol version 1 is not supported: this rendezvous "
                                            "speaks version 5; run the same trainrun version on "
                                            "every node"));
  }
  SECTION("a client that refuses the server's proof says why, and the server logs it") {
    ServerHandshake server("job7", std::string("s3cret"), random_nonce(), Welcome{});
    REQUIRE(std::holds_alternative<Challenge>(*server.on_message(hello).reply));
    auto step = server.on_message(decode_client_message(
        encode(ClientMessage{Leave{"the server's token proof does not match"}})));
    CHECK(step.outcome == HandshakeOutcome::rejected);
    CHECK(step.reason ==
          "the client refused this rendezvous: the server's token proof does not match");
  }
  SECTION("another protocol version") {
    ServerHandshake server("job7", std::nullopt, random_nonce(), Welcome{});
    hello.auth = false;
    hello.version = kProtocolVersion + 1;
    auto step = server.on_message(hello);
    CHECK(step.outcome == HandshakeOutcome::rejected);
    CHECK_THAT(step.reason,
               Catch::Contains("protocol version " + std::to_string(kProtocolVersion + 1) +
                               " is not supported"));
  }
  SECTION("another magic") {
    ServerHandshake server("job7", std::nullopt, random_nonce(), Welcome{});
    hello.auth = false;
    hello.magic = "http";
    CHECK(server.on_message(hello).outcome == HandshakeOutcome::rejected);
  }
  SECTION("join before hello") {
    ServerHandshake server("job7", std::nullopt, random_nonce(), Welcome{});
    auto step = server.on_message(Join{});
    CHECK(step.outcome == HandshakeOutcome::rejected);
    CHECK_THAT(step.reason, Catch::Contains("expected \"hello\" first"));
  }
}

TEST_CASE("a recorded handshake cannot be replayed", "[rendezvous]") {
  const std::string token = "s3cret";
  // An eavesdropper records a legitimate exchange...
  ServerHandshake first("job7", token, random_nonce(), Welcome{});
  ClientHandshake client("job7", token, random_nonce());
  Hello hello = client.hello();
  auto challenge = first.on_message(hello);
  auto auth = client.on_message(*challenge.reply);
  REQUIRE(auth.reply);
  REQUIRE(first.on_message(*auth.reply).outcome == HandshakeOutcome::accepted);
  // ...and replays hello and auth to a new connection, which has a fresh server nonce.
  ServerHandshake second("job7", token, random_nonce(), Welcome{});
  REQUIRE(std::holds_alternative<Challenge>(*second.on_message(hello).reply));
  auto replay = second.on_message(*auth.reply);
  CHECK(replay.outcome == HandshakeOutcome::rejected);
}

TEST_CASE("proofs depend on role, run id and both nonces; the token is not in them",
          "[rendezvous]") {
  std::string cn = random_nonce(), sn = random_nonce();
  std::string p = client_proof("tok", "job", cn, sn);
  CHECK(p.size() == 64);
  CHECK(p != server_proof("tok", "job", cn, sn));
  CHECK(p != client_proof("tok", "job2", cn, sn));
  CHECK(p != client_proof("tok", "job", sn, cn));
  CHECK(p != client_proof("tok2", "job", cn, sn));
  CHECK(p.find("tok") == std::string::npos);
}
