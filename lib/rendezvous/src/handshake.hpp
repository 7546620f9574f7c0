#pragma once

#include <optional>
#include <string>

#include "frame.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// Token proofs: HMAC-SHA256 under the shared token over the run id and both sides' fresh nonces,
// with the role in the message so a server proof cannot be replayed as a client proof. The token
// itself never crosses the wire, and a recorded proof is useless against a fresh server nonce.
std::string client_proof(const std::string& token, const std::string& run_id,
                         const std::string& client_nonce, const std::string& server_nonce);
std::string server_proof(const std::string& token, const std::string& run_id,
                         const std::string& client_nonce, const std::string& server_nonce);

// Each connection's session keys, one per direction, derived the same way from the token, the run
// id and both nonces (only the label differs), so both ends know them and nobody without the
// token does. Every frame after the handshake is sealed with them (FrameAuth).
SessionKeys client_session_keys(const std::string& token, const std::string& run_id,
                                const std::string& client_nonce, const std::string& server_nonce);
SessionKeys server_session_keys(const std::string& token, const std::string& run_id,
                                const std::string& client_nonce, const std::string& server_nonce);

enum class HandshakeOutcome { pending, accepted, rejected };

// The server's half of the handshake, one per connection: hello → [challenge → auth] → welcome.
// Pure: the caller sends `reply` (if any) and closes the connection on `rejected`.
class ServerHandshake {
 public:
  struct Step {
    std::optional<ServerMessage> reply;
    HandshakeOutcome outcome = HandshakeOutcome::pending;
    std::string reason;  // for the server's log when rejected
    std::string kind;    // a short name of the refusal ("wrong token"), for the server's counts
    // With a token, set in the answer to `auth`: seal `reply` and every frame after it, and open
    // every frame received from now on, with these.
    std::optional<SessionKeys> keys;
  };

  // `nonce` must be fresh per connection (random_nonce()); `welcome` is sent on success.
  ServerHandshake(std::string run_id, std::optional<std::string> token, std::string nonce,
                  Welcome welcome);

  Step on_message(const ClientMessage& message);
  HandshakeOutcome outcome() const { return outcome_; }

 private:
  Step reject(std::string kind, std::string reason, Refusal refusal = Refusal::none);

  std::string run_id_;
  std::optional<std::string> token_;
  std::string nonce_;
  Welcome welcome_;
  std::string client_nonce_;
  bool challenged_ = false;
  HandshakeOutcome outcome_ = HandshakeOutcome::pending;
};

// The client's half: send hello(), then feed each server message until accepted or rejected.
class ClientHandshake {
 public:
  struct Step {
    std::optional<ClientMessage> reply;
    HandshakeOutcome outcome = HandshakeOutcome::pending;
    std::string reason;  // why the server refused us, or why we refuse the server
    Welcome welcome;     // valid when accepted
    // With a token, set with the `auth` reply: send `reply` as it is, then seal every frame sent
    // and open every frame received with these.
    std::optional<SessionKeys> keys;
  };

  ClientHandshake(std::string run_id, std::optional<std::string> token, std::string nonce);

  Hello hello() const;
  Step on_message(const ServerMessage& message);

 private:
  std::string run_id_;
  std::optional<std::string> token_;
  std::string nonce_;
  bool challenged_ = false;
};

}  // namespace trainrun::rendezvous
