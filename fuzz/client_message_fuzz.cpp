// What the rendezvous server parses from an agent (or a stranger): one frame body.
#include "message_fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainrun::fuzz::check_message(trainrun::fuzz::as_view(data, size),
                                trainrun::rendezvous::decode_client_message);
  return 0;
}
