#pragma once
// Token data: llm.c shards and raw text, cut into fixed windows, sampled as a
// pure function of (seed, step, rank, micro-step) -- no hidden cursor, so a
// resumed run cannot re-shuffle or restart the data.
//
// No torch here: batches are plain token buffers (see batch.hpp for tensors).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anchor::data {

enum class Format { kText, kLlmc };
Format parse_format(const std::string& name);  // "text" | "llmc"

// llm.c shard header: 256 x int32; [0]=magic, [1]=version, [2]=token count.
inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::int32_t kLlmcVersion = 1;
inline constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

// One file's tokens, memory-mapped: an llm.c shard's uint16 tokens, or a text
// file's bytes, each byte a token (0..255). Nothing is read into memory until
// a window is copied: of a worker's start on 2 GB of text, only the sampler's
// permutation (4 bytes a window) is memory of its own (docs/benchmarks.md; the
// pin stage hashes the files once). A file cut
// short while a run maps it ends that worker with SIGBUS: the pilot names
// the signal, and its manifest the file's digest.
class Shard {
 public:
  // Throws Error (kConfig) naming the file for: bad magic or version, a file
  // shorter than its header, a token count beyond the file, a token id >= vocab_size.
  static std::shared_ptr<const Shard> open(const std::string& path, Format format, int vocab_size);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  const std::string& path() const { return path_; }
  std::size_t size() const { return n_tokens_; }
  std::uint16_t operator[](std::size_t i) const { return bytes_ ? bytes_[i] : tokens_[i]; }
  // Tokens [offset, offset + n) as uint16 into out.
  void copy(std::size_t offset, std::size_t n, std::uint16_t* out) const;

 private:
  Shard() = default;
  std::string path_;
  const std::uint16_t* tokens_ = nullptr;  // llmc
  const std::uint8_t* bytes_ = nullptr;    // text
  std::size_t n_tokens_ = 0;
  void* map_ = nullptr;
  std::size_t map_len_ = 0;
};

// Writes an llm.c shard (used by tests and tools).
void write_llmc_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// A sequence of windows of seq_len + 1 tokens (inputs and shifted targets),
// non-overlapping within each shard, in file order. Window i is found from
// per-shard counts, not a table: 16 bytes a window would be 500 MB for 2 GB
// of text at seq_len 64.
class WindowSet {
 public:
  WindowSet() = default;
  WindowSet(std::vector<std::shared_ptr<const Shard>> shards, int seq_len);
  std::size_t size() const { return end_ - begin_; }
  int seq_len() const { return seq_len_; }
  // Copies window i (seq_len + 1 tokens) into out.
  void copy_window(std::size_t i, std::uint16_t* out) const;
  // Keeps windows [begin, end) only (for the validation split).
  WindowSet slice(std::size_t begin, std::size_t end) const;

 private:
  std::vector<std::shared_ptr<const Shard>> shards_;
  std::vector<std::size_t> first_;  // first_[s]: windows before shard s; first_.back(): all of them
  std::size_t begin_ = 0, end_ = 0;
  int seq_len_ = 0;
};

// The order of training windows: epoch e uses a Fisher-Yates permutation
// seeded by (seed, e); global sample g maps to window perm_{g / n}[g % n].
// Pure: the same arguments always give the same window.
class Sampler {
 public:
  Sampler(std::uint64_t seed, std::size_t n_windows);
  std::size_t window(std::uint64_t global_sample) const;
  std::uint64_t epoch_of(std::uint64_t global_sample) const { return global_sample / n_; }

 private:
  const std::vector<std::uint32_t>& permutation(std::uint64_t epoch) const;
  std::uint64_t seed_;
  std::size_t n_;
  mutable std::uint64_t cached_epoch_ = ~0ull;
  mutable std::vector<std::uint32_t> cached_;
};

// Index of sample b of micro-step `micro` of optimizer step `step` on `rank`
// in the global sample stream. Ranks interleave so that the global batch of a
// step is the same set of windows whatever the world size.
std::uint64_t global_sample_index(std::int64_t step, int micro, int rank, int b, int micro_batch, int grad_accum,
                                  int world_size);

struct DataSpec {
  Format format = Format::kText;
  std::vector<std::string> train_files;  // resolved paths, globs expanded
  std::vector<std::string> val_files;    // empty -> split off val_fraction of train windows
  double val_fraction = 0.1;
  int seq_len = 64;
  int vocab_size = 256;
  std::uint64_t seed = 0;  // data-order seed
};

// Train and validation windows plus the sampler; built once per worker.
class Dataset {
 public:
  explicit Dataset(const DataSpec& spec);
  const WindowSet& train() const { return train_; }
  const WindowSet& val() const { return val_; }
  const Sampler& sampler() const { return *sampler_; }
  std::uint64_t train_tokens() const;

 private:
  WindowSet train_, val_;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace anchor::data
