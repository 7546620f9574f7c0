#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

// A data file that is missing, unreadable, not gzip, truncated or not the IDX layout expected.
// The message names the file and says what is wrong with it.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Images of one split, row-major uint8 pixels: count x rows x cols.
struct Images {
  std::size_t count = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::uint8_t> pixels;
};

// One split: images and their labels (0..9), as many of each.
struct Split {
  Images images;
  std::vector<std::uint8_t> labels;
};

enum class SplitKind { train, test };

// Where FashionMNIST's files are on Debian (package dataset-fashion-mnist).
inline const char* const default_data_dir = "/usr/share/datasets/fashion-mnist";

// Decompresses a whole gzip stream held in memory; `name` goes into the error messages.
std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& compressed,
                                 const std::string& name);

// Parses an IDX3 image file (magic 0x00000803) whose pixels must be 28x28. Pure.
Images parse_idx_images(const std::vector<std::uint8_t>& bytes, const std::string& name);

// Parses an IDX1 label file (magic 0x00000801); every label must be below 10. Pure.
std::vector<std::uint8_t> parse_idx_labels(const std::vector<std::uint8_t>& bytes,
                                           const std::string& name);

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `...-labels-idx1-ubyte.gz` (prefix "train" or
// "t10k"; the uncompressed file is used when only it exists) and checks they agree. With
// `limit`, keeps the first `limit` examples.
Split load_split(const std::filesystem::path& dir, SplitKind kind,
                 std::optional<std::size_t> limit = std::nullopt);

}  // namespace fashion_mnist
