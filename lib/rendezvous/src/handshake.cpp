#include "handshake.hpp"

#include <fmt/format.h>

#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::rendezvous {
namespace {

// HMAC-SHA256 under the token of "trainrun-rdzv/VERSION LABEL\nrun_id\nclient_nonce\nserver_nonce":
// the proofs and the session keys differ only in the label.
Digest handshake_mac(const char* label, const std::string& token, const std::string& run_id,
                     const std::string& client_nonce, const std::string& server_nonce) {
  std::string message = fmt::format("{}/{} {}\n{}\n{}\n{}", kMagic, kProtocolVersion, label, run_id,
                                    client_nonce, server_nonce);
  return hmac_sha256(token, message);
}

std::string proof(const char* role, const std::string& token, const std::string& run_id,
                  const std::string& client_nonce, const std::string& server_nonce) {
  return to_hex(handshake_mac(role, token, run_id, client_nonce, server_nonce));
}

std::string session_key(const char* direction, const std::string& token, const std::string& run_id,
                        const std::string& client_nonce, const std::string& server_nonce) {
  Digest key = handshake_mac(direction, token, run_id, client_nonce, server_nonce);
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

constexpr const char* kClientToServer = "session client-to-server";
constexpr const char* kServerToClient = "session server-to-client";

}  // namespace

SessionKeys client_session_keys(const std::string& token, const std::string& run_id,
                                const std::string& client_nonce, const std::string& server_nonce) {
  return {session_key(kClientToServer, token, run_id, client_nonce, server_nonce),
          session_key(kServerToClient, token, run_id, client_nonce, server_nonce)};
}

SessionKeys server_session_keys(const std::string& token, const std::string& run_id,
                                const std::string& client_nonce, const std::string& server_nonce) {
  return {session_key(kServerToClient, token, run_id, client_nonce, server_nonce),
          session_key(kClientToServer, token, run_id, client_nonce, server_nonce)};
}

std::string client_proof(const std::string& token, const std::string& run_id,
                         const std::string& client_nonce, const std::string& server_nonce) {
  return proof("client", token, run_id, client_nonce, server_nonce);
}

std::string server_proof(const std::string& token, const std::string& run_id,
                         const std::string& client_nonce, const std::string& server_nonce) {
  return proof("server", token, run_id, client_nonce, server_nonce);
}

ServerHandshake::ServerHandshake(std::string run_id, std::optional<std::string> token,
                                 std::string nonce, Welcome welcome)
    : run_id_(std::move(run_id)),
      token_(std::move(token)),
      nonce_(std::move(nonce)),
      welcome_(welcome) {}

ServerHandshake::Step ServerHandshake::reject(std::string kind, std::string reason,
                                              Refusal refusal) {
  outcome_ = HandshakeOutcome::rejected;
  Step step;
  step.reply = Reject{reason, refusal};
  step.outcome = outcome_;
  step.reason = std::move(reason);
  step.kind = std::move(kind);
  return step;
}

ServerHandshake::Step ServerHandshake::on_message(const ClientMessage& message) {
  if (outcome_ != HandshakeOutcome::pending) {
    return reject("protocol error", "handshake already finished");
  }
  if (!challenged_) {
    const auto* hello = std::get_if<Hello>(&message);
    if (!hello) {
      return reject("protocol error",
                    fmt::format("expected \"hello\" first, got \"{}\"", type_name(message)));
    }
    if (hello->magic != kMagic) {
      return reject("not a trainrun client",
                    fmt::format("not a trainrun rendezvous client (magic \"{}\")", hello->magic));
    }
    if (hello->version != kProtocolVersion) {
      return reject("wrong protocol version",
                    fmt::format("protocol version {} is not supported: this rendezvous speaks "
                                "version {}; run the same "
                                "trainrun version on every node",
                                hello->version, kProtocolVersion));
    }
    if (hello->run_id != run_id_) {
      // The job's own run id is not echoed: a stranger learns nothing about the job.
      return reject(
          "wrong run id",
          fmt::format("run id \"{}\" does not match this rendezvous's run id", hello->run_id),
          Refusal::run_id);
    }
    if (token_ && !hello->auth) {
      return reject("no token", "this rendezvous requires a shared token", Refusal::token);
    }
    if (!token_ && hello->auth) {
      return reject(
          "token not expected",
          "the client holds a token but this rendezvous has none; give every node the same "
          "token, or none");
    }
    if (!token_) {
      outcome_ = HandshakeOutcome::accepted;
      return Step{welcome_, outcome_, {}, {}, {}};
    }
    client_nonce_ = hello->nonce;
    challenged_ = true;
    return Step{Challenge{nonce_, server_proof(*token_, run_id_, client_nonce_, nonce_)},
                HandshakeOutcome::pending,
                {},
                {},
                {}};
  }
  // A client that refused our proof says why before it goes (unsealed: it holds no keys).
  if (const auto* leave = std::get_if<Leave>(&message))
    return reject("wrong token",
                  fmt::format("the client refused this rendezvous: {}", leave->reason));
  // The answer to `auth`, welcome or reject, is sealed: the client, which checked our proof,
  // opens it with the same keys.
  Step step;
  const auto* auth = std::get_if<Auth>(&message);
  if (!auth) {
    step =
        reject("protocol error", fmt::format("expected \"auth\", got \"{}\"", type_name(message)));
  } else if (!constant_time_equal(auth->proof,
                                  client_proof(*token_, run_id_, client_nonce_, nonce_))) {
    step = reject("wrong token", "token proof does not match: the nodes hold different tokens");
  } else {
    outcome_ = HandshakeOutcome::accepted;
    step = Step{welcome_, outcome_, {}, {}, {}};
  }
  step.keys = server_session_keys(*token_, run_id_, client_nonce_, nonce_);
  return step;
}

ClientHandshake::ClientHandshake(std::string run_id, std::optional<std::string> token,
                                 std::string nonce)
    : run_id_(std::move(run_id)), token_(std::move(token)), nonce_(std::move(nonce)) {}

Hello ClientHandshake::hello() const {
  Hello h;
  h.run_id = run_id_;
  h.nonce = nonce_;
  h.auth = token_.has_value();
  return h;
}

ClientHandshake::Step ClientHandshake::on_message(const ServerMessage& message) {
  Step step;
  if (const auto* reject = std::get_if<Reject>(&message)) {
    step.outcome = HandshakeOutcome::rejected;
    step.reason = reject->reason;
    return step;
  }
  if (const auto* welcome = std::get_if<Welcome>(&message)) {
    if (token_ && !challenged_) {
      step.outcome = HandshakeOutcome::rejected;
      step.reason = "the server accepted without proving it holds the token; refusing it";
      return step;
    }
    step.outcome = HandshakeOutcome::accepted;
    step.welcome = *welcome;
    return step;
  }
  if (const auto* challenge = std::get_if<Challenge>(&message)) {
    if (!token_ || challenged_) {
      step.outcome = HandshakeOutcome::rejected;
      step.reason = "unexpected token challenge from the server";
      return step;
    }
    if (!constant_time_equal(challenge->proof,
                             server_proof(*token_, run_id_, nonce_, challenge->nonce))) {
      step.outcome = HandshakeOutcome::rejected;
      step.reason = "the server's token proof does not match: the nodes hold different tokens";
      return step;
    }
    challenged_ = true;
    step.reply = Auth{client_proof(*token_, run_id_, nonce_, challenge->nonce)};
    step.keys = client_session_keys(*token_, run_id_, nonce_, challenge->nonce);
    return step;
  }
  step.outcome = HandshakeOutcome::rejected;
  step.reason = fmt::format("unexpected \"{}\" during the handshake", type_name(message));
  return step;
}

}  // namespace trainrun::rendezvous
