#include "trainrun/launch/store/store_protocol.hpp"

#include <fmt/format.h>

#include <cstring>

namespace trainrun::launch {

namespace {

constexpr const char* kQueryNames[] = {
    "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
    "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
    "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER"};
constexpr std::uint8_t kLastQuery = static_cast<std::uint8_t>(StoreQuery::barrier);

template <typename T>
void put(std::string& out, T v) {
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  out.append(raw, sizeof(T));
}

// Reads one request from the front of a buffer. Each read returns false when the buffer ends
// first; `wanted` then says how many bytes (from the request's start) it needs at least.
class Cursor {
 public:
  Cursor(const char* data, std::size_t size, const StoreLimits& limits)
      : data_(data), size_(size), limits_(limits) {}

  template <typename T>
  bool value(T& v) {
    if (!need(sizeof(T))) return false;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool key(std::string& s, StoreQuery q) {
    return sized(s, limits_.max_key_bytes, StoreFault::key_bound, "key", q);
  }
  bool payload(std::string& s, StoreQuery q) {
    return sized(s, limits_.max_value_bytes, StoreFault::value_bound, "value", q);
  }

  bool count(std::uint64_t& n, StoreQuery q) {
    if (!value(n)) return false;
    if (n > limits_.max_keys_per_request)
      throw StoreError(
          StoreFault::keys_bound,
          fmt::format("{} of {} keys: more than the store's bound of {} keys a "
                      "request",
                      query_name(static_cast<std::uint8_t>(q)), n, limits_.max_keys_per_request));
    return true;
  }

  std::size_t used() const { return pos_; }
  std::size_t wanted() const { return wanted_; }

 private:
  bool need(std::size_t n) {
    if (size_ - pos_ >= n) return true;
    wanted_ = pos_ + n;
    return false;
  }

  bool sized(std::string& s, std::size_t bound, StoreFault fault, const char* what, StoreQuery q) {
    std::uint64_t n = 0;
    if (!value(n)) return false;
    if (n > bound)
      throw StoreError(fault,
                       fmt::format("{} with a {} of {} bytes: more than the store's bound "
                                   "of {} bytes",
                                   query_name(static_cast<std::uint8_t>(q)), what, n, bound));
    if (pos_ + n > limits_.max_request_bytes)
      throw StoreError(
          StoreFault::request_bound,
          fmt::format("{} of more than {} bytes: more than the store's bound for one "
                      "request",
                      query_name(static_cast<std::uint8_t>(q)), limits_.max_request_bytes));
    if (!need(static_cast<std::size_t>(n))) return false;
    s.assign(data_ + pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }

  const char* data_;
  std::size_t size_;
  const StoreLimits& limits_;
  std::size_t pos_ = 0;
  std::size_t wanted_ = 0;
};

}  // namespace

std::string query_name(std::uint8_t query) {
  if (query <= kLastQuery) return kQueryNames[query];
  return fmt::format("query {}", query);
}

StoreRequestDecoder::StoreRequestDecoder(const StoreLimits& limits) : limits_(limits) {}

void StoreRequestDecoder::feed(const char* data, std::size_t size) {
  // Drop what earlier requests used before the buffer grows.
  if (start_ > 0 && start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ > 64 * 1024 && start_ > buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(data, size);
}

std::optional<StoreRequest> StoreRequestDecoder::next() {
  if (buffered() == 0 || buffered() < wanted_) return std::nullopt;
  std::optional<StoreRequest> r = parse();
  if (r) wanted_ = 0;
  return r;
}

std::optional<StoreRequest> StoreRequestDecoder::parse() {
  Cursor c(buffer_.data() + start_, buffered(), limits_);
  StoreRequest r;
  std::uint8_t raw = 0;
  c.value(raw);
  if (raw > kLastQuery)
    throw StoreError(StoreFault::malformed,
                     fmt::format("unknown request {} (torch 2.x sends 0..{})", raw, kLastQuery));
  r.query = static_cast<StoreQuery>(raw);
  if (!validated_ && r.query != StoreQuery::validate)
    throw StoreError(StoreFault::malformed,
                     fmt::format("{} before VALIDATE: not a torch 2.x TCPStore client (torch 1.x "
                                 "speaks another protocol)",
                                 query_name(raw)));
  const StoreQuery q = r.query;
  bool whole = true;
  auto keys = [&](bool with_values) {
    std::uint64_t n = 0;
    if (!c.count(n, q)) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
      std::string key, value;
      if (!c.key(key, q)) return false;
      r.keys.push_back(std::move(key));
      if (!with_values) continue;
      if (!c.payload(value, q)) return false;
      r.values.push_back(std::move(value));
    }
    return true;
  };
  auto key_and_values = [&](int values) {
    std::string key;
    if (!c.key(key, q)) return false;
    r.keys.push_back(std::move(key));
    for (int i = 0; i < values; ++i) {
      std::string value;
      if (!c.payload(value, q)) return false;
      r.values.push_back(std::move(value));
    }
    return true;
  };
  switch (q) {
    case StoreQuery::validate:
    case StoreQuery::ping:
      whole = c.value(r.word);
      break;
    case StoreQuery::set:
    case StoreQuery::append:
    case StoreQuery::queue_push:
      whole = key_and_values(1);
      break;
    case StoreQuery::compare_set:
      whole = key_and_values(2);
      break;
    case StoreQuery::get:
    case StoreQuery::delete_key:
    case StoreQuery::queue_pop:
    case StoreQuery::queue_len:
      whole = key_and_values(0);
      break;
    case StoreQuery::add:
    case StoreQuery::barrier:
      whole = key_and_values(0) && c.value(r.number);
      break;
    case StoreQuery::check:
    case StoreQuery::wait:
    case StoreQuery::multi_get:
      whole = keys(false);
      break;
    case StoreQuery::multi_set:
      whole = keys(true);
      break;
    case StoreQuery::get_num_keys:
    case StoreQuery::cancel_wait:
    case StoreQuery::list_keys:
      break;
  }
  if (!whole) {
    wanted_ = c.wanted();
    return std::nullopt;
  }
  if (q == StoreQuery::validate) {
    if (r.word != kStoreValidationMagic)
      throw StoreError(StoreFault::malformed,
                       fmt::format("VALIDATE with magic {:#x}, not torch's {:#x}", r.word,
                                   kStoreValidationMagic));
    validated_ = true;
  }
  start_ += c.used();
  return r;
}

std::string encode_request(const StoreRequest& r) {
  std::string out;
  put_u8(out, static_cast<std::uint8_t>(r.query));
  auto key_count = [&] { put(out, static_cast<std::uint64_t>(r.keys.size())); };
  switch (r.query) {
    case StoreQuery::validate:
    case StoreQuery::ping:
      put_u32(out, r.word);
      break;
    case StoreQuery::set:
    case StoreQuery::append:
    case StoreQuery::queue_push:
    case StoreQuery::compare_set:
    case StoreQuery::get:
    case StoreQuery::delete_key:
    case StoreQuery::queue_pop:
    case StoreQuery::queue_len:
    case StoreQuery::add:
    case StoreQuery::barrier:
      put_bytes(out, r.keys.empty() ? std::string() : r.keys[0]);
      for (const auto& v : r.values) put_bytes(out, v);
      if (r.query == StoreQuery::add || r.query == StoreQuery::barrier) put_i64(out, r.number);
      break;
    case StoreQuery::check:
    case StoreQuery::wait:
    case StoreQuery::multi_get:
      key_count();
      for (const auto& k : r.keys) put_bytes(out, k);
      break;
    case StoreQuery::multi_set:
      key_count();
      for (std::size_t i = 0; i < r.keys.size(); ++i) {
        put_bytes(out, r.keys[i]);
        put_bytes(out, i < r.values.size() ? r.values[i] : std::string());
      }
      break;
    case StoreQuery::get_num_keys:
    case StoreQuery::cancel_wait:
    case StoreQuery::list_keys:
      break;
  }
  return out;
}

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u32(std::string& out, std::uint32_t v) { put(out, v); }
void put_i64(std::string& out, std::int64_t v) { put(out, v); }
void put_bytes(std::string& out, const std::string& v) {
  put(out, static_cast<std::uint64_t>(v.size()));
  out += v;
}

}  // namespace trainrun::launch
