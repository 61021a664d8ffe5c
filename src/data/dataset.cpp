#include "anchor/data/dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "anchor/common/fs.hpp"
#include "anchor/common/unique_fd.hpp"
#include "anchor/error.hpp"

namespace anchor::data {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Error shard_error(const std::string& path, const std::string& why) {
  return Error(ErrorKind::kConfig, "data shard " + path + ": " + why,
               "check that data.format matches the file (llmc shards start with magic 20240520) "
               "and that model.vocab_size covers every token");
}

}  // namespace

Format parse_format(const std::string& name) {
  if (name == "text") return Format::kText;
  if (name == "llmc") return Format::kLlmc;
  throw Error(ErrorKind::kConfig, "unknown data.format '" + name + "'", "use text or llmc");
}

std::shared_ptr<const Shard> Shard::open(const std::string& path, Format format, int vocab_size) {
  std::shared_ptr<Shard> s(new Shard());
  s->path_ = path;
  if (format == Format::kText && vocab_size < 256)
    throw shard_error(
        path, "text is read as bytes and needs model.vocab_size >= 256 (found " + std::to_string(vocab_size) + ")");
  struct stat st {};
  // A FIFO or device named as a shard is refused here instead of blocking
  // the open (or reading forever); one descriptor for the check and the map.
  fs::UniqueFd file = fs::open_regular(path, &st, {"data shard", ErrorKind::kConfig, {}});
  const auto file_size = static_cast<std::size_t>(st.st_size);
  if (format == Format::kLlmc && file_size < kLlmcHeaderBytes) {
    throw shard_error(
        path, "file is " + std::to_string(file_size) + " bytes, shorter than the 1024-byte llm.c header (short file)");
  }
  if (file_size == 0) return s;  // empty text: no windows (mmap refuses length 0)
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, file.get(), 0);
  int err = errno;
  file.reset();
  if (map == MAP_FAILED) throw io_error("mmap", path, err);
  s->map_ = map;
  s->map_len_ = file_size;
  // Windows are read at random, a few KB each: no readahead or fault-around
  // (which would map 64 KB around each one). An llm.c shard is scanned once
  // first, in order, with the kernel's default readahead.
  auto random_access = [&] { (void)::madvise(map, file_size, MADV_RANDOM); };
  if (format == Format::kText) {
    random_access();
    s->bytes_ = static_cast<const std::uint8_t*>(map);
    s->n_tokens_ = file_size;
    return s;
  }
  std::int32_t header[256];
  std::memcpy(header, map, sizeof header);
  if (header[0] != kLlmcMagic)
    throw shard_error(path,
                      "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kLlmcMagic) + ")");
  if (header[1] != kLlmcVersion)
    throw shard_error(path, "unsupported version " + std::to_string(header[1]) + " (expected 1)");
  if (header[2] < 0) throw shard_error(path, "negative token count " + std::to_string(header[2]));
  const auto n = static_cast<std::size_t>(header[2]);
  const std::size_t avail = (file_size - kLlmcHeaderBytes) / 2;
  if (n > avail)
    throw shard_error(path, "header says " + std::to_string(n) + " tokens but the file holds only " +
                                std::to_string(avail) + " (token count beyond the file)");
  s->tokens_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(map) + kLlmcHeaderBytes);
  s->n_tokens_ = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (s->tokens_[i] >= vocab_size)
      throw shard_error(path, "token " + std::to_string(s->tokens_[i]) + " at index " + std::to_string(i) +
                                  " is >= model.vocab_size " + std::to_string(vocab_size));
  }
  random_access();
  return s;
}

Shard::~Shard() {
  if (map_) ::munmap(map_, map_len_);
}

void Shard::copy(std::size_t offset, std::size_t n, std::uint16_t* out) const {
  if (bytes_)
    std::copy(bytes_ + offset, bytes_ + offset + n, out);  // each byte widened, never sign-extended
  else
    std::memcpy(out, tokens_ + offset, n * sizeof(std::uint16_t));
}

void write_llmc_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::string content(reinterpret_cast<const char*>(header), sizeof header);
  content.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  fs::atomic_write_file(path, content);
}

WindowSet::WindowSet(std::vector<std::shared_ptr<const Shard>> shards, int seq_len)
    : shards_(std::move(shards)), seq_len_(seq_len) {
  const auto step = static_cast<std::size_t>(seq_len);
  std::size_t total = 0;
  for (const auto& shard : shards_) {
    first_.push_back(total);
    // Offsets 0, seq_len, 2 seq_len, ... while offset + seq_len + 1 <= size.
    if (shard->size() >= step + 1) total += (shard->size() - 1) / step;
  }
  first_.push_back(total);
  end_ = total;
}

void WindowSet::copy_window(std::size_t i, std::uint16_t* out) const {
  if (i >= size())
    throw std::out_of_range("WindowSet::copy_window: window " + std::to_string(i) + " of " + std::to_string(size()));
  const std::size_t g = begin_ + i;
  // The last shard whose first window is <= g (shards without windows share their successor's first_).
  const auto s = static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end() - 1, g) - first_.begin()) - 1;
  const auto step = static_cast<std::size_t>(seq_len_);
  shards_[s]->copy((g - first_[s]) * step, step + 1, out);
}

WindowSet WindowSet::slice(std::size_t begin, std::size_t end) const {
  if (begin > end || end > size())
    throw std::out_of_range("WindowSet::slice: [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                            std::to_string(size()) + " windows");
  WindowSet w = *this;
  w.begin_ = begin_ + begin;
  w.end_ = begin_ + end;
  return w;
}

Sampler::Sampler(std::uint64_t seed, std::size_t n_windows) : seed_(seed), n_(n_windows) {
  if (n_ == 0) throw Error(ErrorKind::kConfig, "no training windows: the data is shorter than data.seq_len + 1 tokens");
  // The permutation holds 32-bit window numbers.
  if (n_ > std::numeric_limits<std::uint32_t>::max())
    throw Error(ErrorKind::kConfig, std::to_string(n_) + " training windows: more than the sampler numbers (2^32 - 1)",
                "use a longer data.seq_len, or fewer training files per pilot");
}

const std::vector<std::uint32_t>& Sampler::permutation(std::uint64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_.resize(n_);
    for (std::size_t i = 0; i < n_; ++i) cached_[i] = static_cast<std::uint32_t>(i);
    std::uint64_t state = seed_ ^ (0x5851f42d4c957f2dull * (epoch + 1));
    for (std::size_t i = n_ - 1; i > 0; --i) {
      std::size_t j = static_cast<std::size_t>(splitmix64(state) % (i + 1));
      std::swap(cached_[i], cached_[j]);
    }
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::size_t Sampler::window(std::uint64_t g) const { return permutation(g / n_)[g % n_]; }

std::uint64_t global_sample_index(std::int64_t step, int micro, int rank, int b, int micro_batch, int grad_accum,
                                  int world_size) {
  const auto global_batch = static_cast<std::uint64_t>(micro_batch) * static_cast<std::uint64_t>(grad_accum) *
                            static_cast<std::uint64_t>(world_size);
  const auto within =
      (static_cast<std::uint64_t>(micro) * static_cast<std::uint64_t>(world_size) + static_cast<std::uint64_t>(rank)) *
          static_cast<std::uint64_t>(micro_batch) +
      static_cast<std::uint64_t>(b);
  return static_cast<std::uint64_t>(step) * global_batch + within;
}

Dataset::Dataset(const DataSpec& spec) {
  auto open_all = [&](const std::vector<std::string>& files) {
    std::vector<std::shared_ptr<const Shard>> shards;
    shards.reserve(files.size());
    for (const auto& f : files) shards.push_back(Shard::open(f, spec.format, spec.vocab_size));
    return shards;
  };
  WindowSet all(open_all(spec.train_files), spec.seq_len);
  if (spec.val_files.empty()) {
    // Rounded to nearest, halves up (val_fraction is in [0, 1): never negative).
    auto n_val = static_cast<std::size_t>(std::llround(static_cast<double>(all.size()) * spec.val_fraction));
    if (n_val == 0 || n_val >= all.size())
      throw Error(ErrorKind::kConfig,
                  "data.val_fraction " + std::to_string(spec.val_fraction) + " of " + std::to_string(all.size()) +
                      " windows leaves no train or no validation data",
                  "give data.val files, or more data, or another val_fraction");
    train_ = all.slice(0, all.size() - n_val);
    val_ = all.slice(all.size() - n_val, all.size());
  } else {
    train_ = std::move(all);
    val_ = WindowSet(open_all(spec.val_files), spec.seq_len);
    if (val_.size() == 0) throw Error(ErrorKind::kConfig, "validation data is shorter than data.seq_len + 1 tokens");
  }
  sampler_ = std::make_unique<Sampler>(spec.seed, train_.size());
}

std::uint64_t Dataset::train_tokens() const {
  return static_cast<std::uint64_t>(train_.size()) * static_cast<std::uint64_t>(train_.seq_len());
}

}  // namespace anchor::data
