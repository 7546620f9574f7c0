#pragma once

#include <string>

#include "trainrun/rendezvous/preflight_offer.hpp"

namespace trainrun::testing {

// A well-formed preflight offer (every field within its bounds) for tests to vary.
inline rendezvous::PreflightOffer sample_offer(int port = 40001) {
  rendezvous::PreflightOffer o;
  o.id = "0123456789abcdef";
  o.port = port;
  o.trainrun = "0.9.0";
  o.entrypoint = "train.py";
  o.sha256 = std::string(64, 'a');
  o.python = "3.11.2";
  o.torch = "2.1.0";
  o.network = "1111111111111111";
  return o;
}

}  // namespace trainrun::testing
