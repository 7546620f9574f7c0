#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dataset_files.hpp"
#include "options.hpp"
#include "test_support.hpp"

using namespace fashion_mnist;
using trainrun::test::make_temp_dir;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

void put_be32(Bytes& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(value >> shift));
}

Bytes idx_images(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28,
                 std::uint32_t magic = 0x803) {
  Bytes out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  for (std::size_t i = 0; i < std::size_t{count} * rows * cols; ++i) {
    out.push_back(static_cast<std::uint8_t>(i % 251));
  }
  return out;
}

Bytes idx_labels(const Bytes& labels, std::uint32_t magic = 0x801) {
  Bytes out;
  put_be32(out, magic);
  put_be32(out, static_cast<std::uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

Bytes gzip(const Bytes& data) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                       Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&stream, static_cast<uLong>(data.size())) + 32);
  stream.next_in = const_cast<Bytef*>(data.data());
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

void write(const fs::path& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// A data directory holding a complete small split in the gzip layout Debian ships.
void write_split(const fs::path& dir, const std::string& prefix, const Bytes& labels) {
  write(dir / (prefix + "-images-idx3-ubyte.gz"),
        gzip(idx_images(static_cast<std::uint32_t>(labels.size()))));
  write(dir / (prefix + "-labels-idx1-ubyte.gz"), gzip(idx_labels(labels)));
}

std::string load_error(const fs::path& dir) {
  try {
    load_split(dir, SplitKind::train);
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("load_split accepted a bad data directory");
  return "";
}

Options parse(std::vector<std::string> args) {
  auto parsed = parse_command_line(args);
  REQUIRE_FALSE(parsed.help_text);
  return parsed.options;
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse_command_line(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("parse_command_line accepted a bad command line");
  return "";
}

}  // namespace

TEST_CASE("IDX images and labels parse") {
  const Images images = parse_idx_images(idx_images(3), "x");
  CHECK(images.count == 3);
  CHECK(images.rows == 28);
  CHECK(images.cols == 28);
  REQUIRE(images.pixels.size() == 3 * 28 * 28);
  CHECK(images.pixels[0] == 0);
  CHECK(images.pixels[300] == 300 % 251);
  CHECK(parse_idx_labels(idx_labels({0, 9, 4}), "y") == Bytes{0, 9, 4});
}

TEST_CASE("malformed IDX files are refused with the file name and the reason") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_idx_images(Bytes(10), "imgs"), Contains("imgs") && Contains("too short"));
  CHECK_THROWS_WITH(parse_idx_images(idx_images(2, 28, 28, 0x801), "imgs"),
                    Contains("not an IDX image file") && Contains("0x00000801"));
  CHECK_THROWS_WITH(parse_idx_images(idx_images(2, 32, 32), "imgs"), Contains("32x32"));
  Bytes truncated = idx_images(2);
  truncated.pop_back();
  CHECK_THROWS_WITH(parse_idx_images(truncated, "imgs"), Contains("truncated"));
  Bytes longer = idx_images(2);
  longer.push_back(0);
  CHECK_THROWS_WITH(parse_idx_images(longer, "imgs"), Contains("expected 1584"));
  CHECK_THROWS_WITH(parse_idx_labels(idx_labels({1, 2}, 0x803), "lbls"),
                    Contains("not an IDX label file"));
  CHECK_THROWS_WITH(parse_idx_labels(idx_labels({1, 10, 2}), "lbls"),
                    Contains("label 10 at index 1"));
  Bytes short_labels = idx_labels({1, 2, 3});
  short_labels.pop_back();
  CHECK_THROWS_WITH(parse_idx_labels(short_labels, "lbls"), Contains("truncated"));
}

TEST_CASE("gunzip round-trips and refuses what is not a whole gzip stream") {
  using Catch::Matchers::Contains;
  const Bytes data = idx_images(5);
  CHECK(gunzip(gzip(data), "f") == data);
  CHECK(gunzip(gzip(Bytes{}), "f").empty());
  CHECK_THROWS_WITH(gunzip(data, "f.gz"), Contains("f.gz: not a gzip file"));
  Bytes cut = gzip(data);
  cut.resize(cut.size() / 2);
  CHECK_THROWS_WITH(gunzip(cut, "f.gz"), Contains("truncated"));
  Bytes corrupt = gzip(data);
  for (std::size_t i = 12; i < corrupt.size() - 8; ++i) corrupt[i] ^= 0x5a;
  CHECK_THROWS_WITH(gunzip(corrupt, "f.gz"),
                    Contains("f.gz: corrupt gzip data") || Contains("f.gz: truncated"));
}

TEST_CASE("load_split reads a data directory") {
  const fs::path dir = make_temp_dir("fashion_mnist");
  write_split(dir, "train", {3, 1, 4, 1, 5});
  const Split split = load_split(dir, SplitKind::train);
  CHECK(split.images.count == 5);
  CHECK(split.labels == Bytes{3, 1, 4, 1, 5});

  const Split first = load_split(dir, SplitKind::train, 2);
  CHECK(first.images.count == 2);
  CHECK(first.images.pixels.size() == 2 * 28 * 28);
  CHECK(first.labels == Bytes{3, 1});
  CHECK(load_split(dir, SplitKind::train, 50).images.count == 5);

  SECTION("the uncompressed files work too") {
    const fs::path raw = make_temp_dir("fashion_mnist_raw");
    write(raw / "t10k-images-idx3-ubyte", idx_images(2));
    write(raw / "t10k-labels-idx1-ubyte", idx_labels({7, 8}));
    CHECK(load_split(raw, SplitKind::test).labels == Bytes{7, 8});
  }
}

TEST_CASE("a bad data directory is one clear error") {
  using Catch::Matchers::Contains;
  const fs::path dir = make_temp_dir("fashion_mnist");
  CHECK_THAT(load_error(dir / "nowhere"), Contains("train-images-idx3-ubyte.gz: no such file") &&
                                              Contains("does not exist") && Contains("--data-dir"));
  CHECK_THAT(load_error(dir), Contains("no such file") && Contains("dataset-fashion-mnist"));

  write_split(dir, "train", {1, 2, 3});
  fs::remove(dir / "train-labels-idx1-ubyte.gz");
  CHECK_THAT(load_error(dir), Contains("train-labels-idx1-ubyte.gz: no such file"));

  write(dir / "train-labels-idx1-ubyte.gz", gzip(idx_labels({1, 2})));
  CHECK_THAT(load_error(dir), Contains("3 images, but") && Contains("has 2 labels"));

  write(dir / "train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3}));
  CHECK_THAT(load_error(dir), Contains("train-labels-idx1-ubyte.gz: not a gzip file"));

  write_split(dir, "train", {});
  CHECK_THAT(load_error(dir), Contains("holds no images"));
}

TEST_CASE("command line: defaults and values") {
  const Options defaults = parse({});
  CHECK(defaults.epochs == 2);
  CHECK(defaults.batch_size == 128);
  CHECK(defaults.lr == Approx(1e-3));
  CHECK_FALSE(defaults.subset);
  CHECK_FALSE(defaults.max_steps);
  CHECK_FALSE(defaults.crash_once_at_epoch);
  CHECK(defaults.num_workers == 0);
  CHECK(defaults.data_dir == default_data_dir);

  const Options o = parse({"--epochs", "3", "--subset=512", "--max-steps", "4", "--num-workers=2",
                           "--max-failures", "1", "--data-dir", "/d", "--crash-once-at-epoch", "2",
                           "--threads", "1", "--seed", "7", "--name", "n"});
  CHECK(o.epochs == 3);
  CHECK(o.subset == std::size_t{512});
  CHECK(o.max_steps == std::size_t{4});
  CHECK(o.num_workers == 2);
  CHECK(o.max_failures == 1);
  CHECK(o.data_dir == "/d");
  CHECK(o.crash_once_at_epoch == 2);
  CHECK(o.threads == 1);
  CHECK(o.seed == 7);
  CHECK(o.name == "n");
  CHECK(parse_command_line({"--help"}).help_text->find("--crash-once-at-epoch") !=
        std::string::npos);
}

TEST_CASE("command line: bad values are usage errors") {
  using Catch::Matchers::Contains;
  CHECK_THAT(usage_error({"--epochs", "0"}), Contains("--epochs"));
  CHECK_THAT(usage_error({"--epochs", "two"}), Contains("--epochs"));
  CHECK_THAT(usage_error({"--subset", "0"}), Contains("--subset"));
  CHECK_THAT(usage_error({"--batch-size", "-1"}), Contains("--batch-size"));
  CHECK_THAT(usage_error({"--unknown"}), Contains("--unknown"));
  CHECK_THAT(usage_error({"--epochs", "2", "--crash-once-at-epoch", "3"}),
             Contains("after the last epoch"));
  CHECK_THAT(usage_error({"--max-failures", "1"}), Contains("--num-workers"));
  CHECK_THAT(usage_error({"--data-dir="}), Contains("--data-dir"));
}
