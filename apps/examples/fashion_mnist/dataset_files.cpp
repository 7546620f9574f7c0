#include "dataset_files.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

namespace fashion_mnist {

namespace {

constexpr std::uint32_t images_magic = 0x00000803;
constexpr std::uint32_t labels_magic = 0x00000801;
constexpr std::size_t image_side = 28;
constexpr std::size_t num_classes = 10;
// Larger than any FashionMNIST file uncompressed (47 MB), small enough to refuse a gzip bomb.
constexpr std::size_t max_uncompressed_bytes = std::size_t{1} << 30;

std::uint32_t read_be32(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

std::string hex(std::uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08x", value);
  return buffer;
}

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(path.string() + ": cannot open: " + std::strerror(errno));
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) throw DataError(path.string() + ": read error: " + std::strerror(errno));
  return bytes;
}

struct FileBytes {
  std::string name;
  std::vector<std::uint8_t> bytes;
};

// The gzip file, else the uncompressed one next to it (torchvision's raw/ directory has both).
FileBytes read_idx_file(const std::filesystem::path& dir, const std::string& base) {
  const std::filesystem::path gz = dir / (base + ".gz");
  const std::filesystem::path plain = dir / base;
  std::error_code ec;
  if (std::filesystem::is_regular_file(gz, ec))
    return {gz.string(), gunzip(read_file(gz), gz.string())};
  if (std::filesystem::is_regular_file(plain, ec)) return {plain.string(), read_file(plain)};
  std::string hint = std::filesystem::is_directory(dir, ec)
                         ? ""
                         : " (the directory " + dir.string() + " does not exist)";
  throw DataError(gz.string() + ": no such file" + hint +
                  "; install Debian's dataset-fashion-mnist or point --data-dir at a directory "
                  "with the four FashionMNIST files");
}

// The header of an IDX file: at least `header_bytes` long and starting with `magic`.
void check_idx_header(const std::vector<std::uint8_t>& bytes, const std::string& name,
                      std::size_t header_bytes, std::uint32_t magic, const std::string& kind) {
  if (bytes.size() < header_bytes) {
    throw DataError(name + ": too short for an IDX " + kind + " header (" +
                    std::to_string(bytes.size()) + " bytes, need " +
                    std::to_string(header_bytes) + ")");
  }
  const std::uint32_t found = read_be32(bytes, 0);
  if (found != magic) {
    throw DataError(name + ": not an IDX " + kind + " file (magic " + hex(found) + ", expected " +
                    hex(magic) + ")");
  }
}

// The whole file is `expected` bytes: the header and `what` (e.g. "10 labels").
void check_idx_size(const std::vector<std::uint8_t>& bytes, const std::string& name,
                    std::size_t expected, const std::string& what) {
  if (bytes.size() != expected) {
    throw DataError(name + ": " + std::to_string(bytes.size()) + " bytes for " + what +
                    "; expected " + std::to_string(expected) +
                    (bytes.size() < expected ? " (truncated)" : ""));
  }
}

}  // namespace

std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& compressed,
                                 const std::string& name) {
  if (compressed.size() < 2 || compressed[0] != 0x1f || compressed[1] != 0x8b) {
    throw DataError(name + ": not a gzip file");
  }
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip header and trailer, not a raw zlib stream.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw DataError(name + ": cannot start decompression: out of memory");
  }
  std::vector<std::uint8_t> out(std::max<std::size_t>(compressed.size() * 2, 1 << 16));
  stream.next_in = const_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::size_t produced = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (produced == out.size()) {
      if (out.size() >= max_uncompressed_bytes) {
        inflateEnd(&stream);
        throw DataError(name + ": decompresses to more than 1 GiB; not a FashionMNIST file");
      }
      out.resize(std::min(out.size() * 2, max_uncompressed_bytes));
    }
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out.size() - produced);
    status = inflate(&stream, Z_NO_FLUSH);
    produced = out.size() - stream.avail_out;
    if (status == Z_BUF_ERROR && stream.avail_in == 0) {
      inflateEnd(&stream);
      throw DataError(name + ": truncated gzip file (the compressed data ends early)");
    }
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
      std::string reason = stream.msg ? stream.msg : "error " + std::to_string(status);
      inflateEnd(&stream);
      throw DataError(name + ": corrupt gzip data: " + reason);
    }
  }
  inflateEnd(&stream);
  out.resize(produced);
  return out;
}

Images parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& name) {
  check_idx_header(bytes, name, 16, images_magic, "image");
  Images images;
  images.count = read_be32(bytes, 4);
  images.rows = read_be32(bytes, 8);
  images.cols = read_be32(bytes, 12);
  if (images.rows != image_side || images.cols != image_side) {
    throw DataError(name + ": images are " + std::to_string(images.rows) + "x" +
                    std::to_string(images.cols) + ", expected 28x28");
  }
  check_idx_size(bytes, name, 16 + images.count * images.rows * images.cols,
                 std::to_string(images.count) + " images of 28x28");
  images.pixels.assign(bytes.begin() + 16, bytes.end());
  return images;
}

std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes,
                                           const std::string& name) {
  check_idx_header(bytes, name, 8, labels_magic, "label");
  const std::size_t count = read_be32(bytes, 4);
  check_idx_size(bytes, name, 8 + count, std::to_string(count) + " labels");
  std::vector<std::uint8_t> labels(bytes.begin() + 8, bytes.end());
  const auto bad = std::find_if(labels.begin(), labels.end(),
                                [](std::uint8_t label) { return label >= num_classes; });
  if (bad != labels.end()) {
    throw DataError(name + ": label " + std::to_string(*bad) + " at index " +
                    std::to_string(bad - labels.begin()) + " is not a class (0..9)");
  }
  return labels;
}

Split load_split(const std::filesystem::path& dir, SplitKind kind,
                 std::optional<std::size_t> limit) {
  const std::string prefix = kind == SplitKind::train ? "train" : "t10k";
  const std::string images_base = prefix + "-images-idx3-ubyte";
  const std::string labels_base = prefix + "-labels-idx1-ubyte";
  const FileBytes images_file = read_idx_file(dir, images_base);
  const FileBytes labels_file = read_idx_file(dir, labels_base);
  Split split;
  split.images = parse_idx_images(images_file.bytes, images_file.name);
  split.labels = parse_idx_labels(labels_file.bytes, labels_file.name);
  if (split.labels.size() != split.images.count) {
    throw DataError(images_file.name + ": " + std::to_string(split.images.count) + " images, but " +
                    labels_file.name + " has " + std::to_string(split.labels.size()) + " labels");
  }
  if (split.images.count == 0) throw DataError(images_file.name + ": holds no images");
  if (limit && *limit < split.images.count) {
    split.images.count = *limit;
    split.images.pixels.resize(*limit * split.images.rows * split.images.cols);
    split.labels.resize(*limit);
  }
  return split;
}

}  // namespace fashion_mnist
