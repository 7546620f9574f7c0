#include "trainrun/launch/store/store_protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
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

}  // namespace

std::string query_name(std::uint8_t query) {
  if (query <= kLastQuery) return kQueryNames[query];
  return fmt::format("query {}", query);
}

StoreRequestDecoder::StoreRequestDecoder(const StoreLimits& limits) : limits_(limits) {}

void StoreRequestDecoder::feed(const char* data, std::size_t size) {
  buffer_.erase(0, start_);
  start_ = 0;
  buffer_.append(data, size);
}

// What comes next in the request being parsed, from what it has so far.
StoreRequestDecoder::Field StoreRequestDecoder::field() const {
  const StoreRequest& r = partial_;
  switch (r.query) {
    case StoreQuery::validate:
    case StoreQuery::ping:
      return scalar_read_ ? Field::done : Field::word;
    case StoreQuery::set:
    case StoreQuery::append:
    case StoreQuery::queue_push:
      return r.keys.empty() ? Field::key : r.values.empty() ? Field::value : Field::done;
    case StoreQuery::compare_set:
      return r.keys.empty() ? Field::key : r.values.size() < 2 ? Field::value : Field::done;
    case StoreQuery::get:
    case StoreQuery::delete_key:
    case StoreQuery::queue_pop:
    case StoreQuery::queue_len:
      return r.keys.empty() ? Field::key : Field::done;
    case StoreQuery::add:
    case StoreQuery::barrier:
      return r.keys.empty() ? Field::key : scalar_read_ ? Field::done : Field::number;
    case StoreQuery::check:
    case StoreQuery::wait:
    case StoreQuery::multi_get:
      return !count_read_ ? Field::count : r.keys.size() < count_ ? Field::key : Field::done;
    case StoreQuery::multi_set:
      if (!count_read_) return Field::count;
      if (r.values.size() < r.keys.size()) return Field::value;
      return r.keys.size() < count_ ? Field::key : Field::done;
    case StoreQuery::get_num_keys:
    case StoreQuery::cancel_wait:
    case StoreQuery::list_keys:
      break;
  }
  return Field::done;
}

// A number of `n` bytes into `to`, or false (nothing taken) until they have all come.
bool StoreRequestDecoder::take(void* to, std::size_t n) {
  if (buffer_.size() - start_ < n) return false;
  std::memcpy(to, buffer_.data() + start_, n);
  start_ += n;
  request_bytes_ += n;
  parsed_ += n;
  return true;
}

void StoreRequestDecoder::start_body(std::uint64_t n, bool is_key) {
  const StoreQuery q = partial_.query;
  const std::size_t bound = is_key ? limits_.max_key_bytes : limits_.max_value_bytes;
  if (n > bound)
    throw StoreError(
        is_key ? StoreFault::key_bound : StoreFault::value_bound,
        fmt::format("{} with a {} of {} bytes: more than the store's bound of {} bytes",
                    query_name(static_cast<std::uint8_t>(q)), is_key ? "key" : "value", n, bound));
  if (request_bytes_ + n > limits_.max_request_bytes)
    throw StoreError(
        StoreFault::request_bound,
        fmt::format("{} of more than {} bytes: more than the store's bound for one "
                    "request",
                    query_name(static_cast<std::uint8_t>(q)), limits_.max_request_bytes));
  auto& list = is_key ? partial_.keys : partial_.values;
  list.emplace_back();
  body_ = &list.back();
  body_->reserve(static_cast<std::size_t>(n));
  body_left_ = static_cast<std::size_t>(n);
  partial_bytes_ += sizeof(std::string) + body_left_;
}

// The bytes of the key or value being read, straight into the request, as far as they have come.
void StoreRequestDecoder::fill_body() {
  const std::size_t n = std::min(body_left_, buffer_.size() - start_);
  body_->append(buffer_.data() + start_, n);
  start_ += n;
  request_bytes_ += n;
  parsed_ += n;
  body_left_ -= n;
  if (body_left_ == 0) body_ = nullptr;
}

std::optional<StoreRequest> StoreRequestDecoder::next() {
  std::optional<StoreRequest> r = parse();
  // Every byte fed is parsed: a connection that waits (a rank after its init) holds no buffer
  // sized for the largest read it ever had.
  if (start_ == buffer_.size()) {
    std::string().swap(buffer_);
    start_ = 0;
  }
  return r;
}

std::optional<StoreRequest> StoreRequestDecoder::parse() {
  if (!started_) {
    std::uint8_t raw = 0;
    if (!take(&raw, 1)) return std::nullopt;
    if (raw > kLastQuery)
      throw StoreError(StoreFault::malformed,
                       fmt::format("unknown request {} (torch 2.x sends 0..{})", raw, kLastQuery));
    if (!validated_ && raw != static_cast<std::uint8_t>(StoreQuery::validate))
      throw StoreError(StoreFault::malformed,
                       fmt::format("{} before VALIDATE: not a torch 2.x TCPStore client (torch "
                                   "1.x speaks another protocol)",
                                   query_name(raw)));
    partial_.query = static_cast<StoreQuery>(raw);
    started_ = true;
  }
  for (;;) {
    if (body_) {
      fill_body();
      if (body_) return std::nullopt;
      continue;
    }
    std::uint64_t n = 0;
    const Field f = field();
    switch (f) {
      case Field::done:
        return finish();
      case Field::word:
        if (!take(&partial_.word, sizeof partial_.word)) return std::nullopt;
        scalar_read_ = true;
        break;
      case Field::number:
        if (!take(&partial_.number, sizeof partial_.number)) return std::nullopt;
        scalar_read_ = true;
        break;
      case Field::count:
        if (!take(&n, sizeof n)) return std::nullopt;
        if (n > limits_.max_keys_per_request)
          throw StoreError(StoreFault::keys_bound,
                           fmt::format("{} of {} keys: more than the store's bound of {} keys a "
                                       "request",
                                       query_name(static_cast<std::uint8_t>(partial_.query)), n,
                                       limits_.max_keys_per_request));
        count_ = n;
        count_read_ = true;
        break;
      case Field::key:
      case Field::value:
        if (!take(&n, sizeof n)) return std::nullopt;
        start_body(n, f == Field::key);
        break;
    }
  }
}

StoreRequest StoreRequestDecoder::finish() {
  if (partial_.query == StoreQuery::validate) {
    if (partial_.word != kStoreValidationMagic)
      throw StoreError(StoreFault::malformed,
                       fmt::format("VALIDATE with magic {:#x}, not torch's {:#x}", partial_.word,
                                   kStoreValidationMagic));
    validated_ = true;
  }
  StoreRequest r = std::move(partial_);
  partial_ = StoreRequest();
  started_ = scalar_read_ = count_read_ = false;
  count_ = 0;
  request_bytes_ = partial_bytes_ = 0;
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
