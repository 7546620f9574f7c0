// The c10d store's request decoder on an arbitrary byte stream, fed in arbitrary pieces, and every
// request it yields applied to a store with small bounds: a request either decodes to exactly the
// bytes that carried it and is answered, or is refused with a StoreError; nothing else.
#include "fuzz_util.hpp"
#include "trainrun/launch/store/store_data.hpp"
#include "trainrun/launch/store/store_protocol.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // First byte: the piece size.
  const std::size_t step = 1 + data[0] % 64;
  data += 1;
  size -= 1;
  StoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys_per_request = 16;
  limits.max_request_bytes = 2048;
  limits.max_held_bytes = 4096;
  StoreRequestDecoder decoder(limits);
  StoreData store(limits);
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string reencoded;
  try {
    for (std::size_t pos = 0; pos < size; pos += step) {
      decoder.feed(input.data() + pos, std::min(step, size - pos));
      while (auto request = decoder.next()) {
        reencoded += encode_request(*request);
        FUZZ_CHECK(request->keys.size() <= limits.max_keys_per_request);
        for (const auto& k : request->keys) FUZZ_CHECK(k.size() <= limits.max_key_bytes);
        try {
          // Two clients take turns, so that waits of one are woken by the other.
          for (const auto& reply : store.handle(1 + reencoded.size() % 2, std::move(*request)))
            FUZZ_CHECK(reply.client == 1 || reply.client == 2);
        } catch (const StoreError&) {
        }
        FUZZ_CHECK(store.stored_bytes() <= limits.max_held_bytes);
      }
    }
  } catch (const StoreError&) {
    return 0;
  }
  // Whole requests decode to exactly the bytes that carried them; the rest waits, buffered.
  FUZZ_CHECK(input.compare(0, reencoded.size(), reencoded) == 0);
  FUZZ_CHECK(reencoded.size() + decoder.buffered() == size);
  return 0;
}
