#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainrun::launch {

// The wire protocol of PyTorch 2.x's c10d TCPStore client (torch/csrc/distributed/c10d/
// TCPStore.cpp, TCPStoreBackend.hpp, TCPStoreLibUvBackend.cpp), which trainrun's agent serves
// when workers get TORCHELASTIC_USE_AGENT_STORE=True (docs/protocol.md, "c10d store"). Numbers are
// in the host's byte order (little-endian on every platform torch ships for); a string or a value
// is a u64 length and its bytes. Torch 1.x clients speak an older, incompatible numbering.
enum class StoreQuery : std::uint8_t {
  validate = 0,      // u32 magic; no reply. Must be a connection's first request.
  set = 1,           // key, value; no reply
  compare_set = 2,   // key, expected, desired -> value
  get = 3,           // key -> value (empty when missing)
  add = 4,           // key, i64 -> i64
  check = 5,         // u64 n, n keys -> u8 (0 ready, 1 not ready)
  wait = 6,          // u64 n, n keys -> u8 0 once every key exists
  get_num_keys = 7,  // -> i64
  delete_key = 8,    // key -> i64 deleted
  append = 9,        // key, value; no reply
  multi_get = 10,    // u64 n, n keys -> n values
  multi_set = 11,    // u64 n, n (key, value); no reply
  cancel_wait = 12,  // -> u8 1 (after a 0 if the wait ended meanwhile)
  ping = 13,         // u32 nonce -> u32 nonce
  queue_push = 14,   // key, value; no reply
  queue_pop = 15,    // key -> i64 length, then the value when it was not 0
  queue_len = 16,    // key -> i64
  list_keys = 17,    // -> i64 n, n keys
  barrier = 18,      // key, i64 world size -> u8 0 once that many have arrived
};

constexpr std::uint32_t kStoreValidationMagic = 0x3C85F7CE;
constexpr std::uint8_t kStoreReady = 0, kStoreNotReady = 1;
constexpr std::uint8_t kStoreStopWaiting = 0, kStoreWaitCanceled = 1;

// The name a log line gives a query ("MULTI_SET"), or "query 42" for a number torch 2.x never
// sends.
std::string query_name(std::uint8_t query);

// The bounds of what one agent's store accepts. The key, value and per-request key count bounds
// are those of torch's own libuv server, so a client torch serves is served here too.
struct StoreLimits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  std::size_t max_keys_per_request = 128 * 1024;
  std::size_t max_request_bytes = 64 * 1024 * 1024;  // one request, keys and values together
  // Everything the store holds, together: keys, values and queue items, waits, requests still
  // arriving and replies not yet sent.
  std::size_t max_held_bytes = 1024 * 1024 * 1024;
  // A connection with this much unsent is not served, nor read, until its client reads.
  std::size_t max_unsent_bytes = 16 * 1024 * 1024;
  // Every rank of a job of 100,000 ranks on a connection of its own, as torch's client makes
  // them (bench/store_scale.py measures that many).
  std::size_t max_connections = 128 * 1024;
};

// What a bad request breaks: a bound (said once per bound) or the protocol itself.
enum class StoreFault { malformed, key_bound, value_bound, keys_bound, request_bound, held_bound };

// A request the store cannot take: the connection that sent it is closed.
class StoreError : public std::runtime_error {
 public:
  StoreError(StoreFault fault, const std::string& what) : std::runtime_error(what), fault_(fault) {}
  StoreFault fault() const { return fault_; }

 private:
  StoreFault fault_;
};

// One decoded request. Keys and values are bytes; `number` is ADD's amount or BARRIER's world
// size, `word` VALIDATE's magic or PING's nonce.
struct StoreRequest {
  StoreQuery query = StoreQuery::validate;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // SET, APPEND, QUEUE_PUSH: one; COMPARE_SET: expected, desired
  std::int64_t number = 0;
  std::uint32_t word = 0;

  bool operator==(const StoreRequest& o) const {
    return query == o.query && keys == o.keys && values == o.values && number == o.number &&
           word == o.word;
  }
};

// A connection's byte stream in, whole requests out. The first request must be VALIDATE with
// torch's magic number. Bounds are checked as soon as a length arrives, before its bytes. A
// request is parsed as its bytes come, each byte once, so a large one costs linear time.
class StoreRequestDecoder {
 public:
  explicit StoreRequestDecoder(const StoreLimits& limits = {});

  void feed(const char* data, std::size_t size);
  // The next whole request, or nothing until more bytes come. Throws StoreError on a request
  // that breaks the protocol or a bound; the connection is then unusable.
  std::optional<StoreRequest> next();
  // Bytes fed and not yet returned in a whole request.
  std::size_t buffered() const { return request_bytes_ + (buffer_.size() - start_); }
  // The memory they take: the bytes not yet parsed and the request parsed so far, counted at the
  // lengths it announced.
  std::size_t held() const { return buffer_.capacity() + partial_bytes_; }
  // Bytes parsed since the decoder was made: the work it did.
  std::size_t parsed() const { return parsed_; }

 private:
  enum class Field { done, word, number, count, key, value };
  Field field() const;
  std::optional<StoreRequest> parse();
  bool take(void* to, std::size_t n);
  void start_body(std::uint64_t n, bool is_key);
  void fill_body();
  StoreRequest finish();

  StoreLimits limits_;
  std::string buffer_;  // bytes fed and not parsed yet, from start_
  std::size_t start_ = 0;
  StoreRequest partial_;  // the request being parsed
  bool started_ = false;  // its query is known
  bool scalar_read_ = false;
  bool count_read_ = false;
  std::uint64_t count_ = 0;
  std::string* body_ = nullptr;  // the key or value whose bytes come next
  std::size_t body_left_ = 0;
  std::size_t request_bytes_ = 0;  // of partial_, as sent
  std::size_t partial_bytes_ = 0;
  std::size_t parsed_ = 0;
  bool validated_ = false;
};

// The bytes a torch 2.x client sends for `request` (for tests and the fuzz target).
std::string encode_request(const StoreRequest& request);

// Reply pieces, appended to `out` in the wire's encoding.
void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_i64(std::string& out, std::int64_t v);
void put_bytes(std::string& out, const std::string& v);  // u64 length, then the bytes

}  // namespace trainrun::launch
