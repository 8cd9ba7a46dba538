// The GPT sample's corpus and batches: the plain-text fortune files of
// Debian's `fortunes` package (/usr/share/games/fortunes; the binary .dat
// indexes and the .u8 symlinks skipped) concatenated in name order, about
// 2.5 MB. A "character" is a byte: the vocabulary is the bytes that occur,
// sorted (the files are mostly ASCII; the few UTF-8 letters are 2 tokens).
// The first 90% is the training split, the last 10% validation.
//
//   gpt::Corpus text = gpt::load_corpus();
//   gpt::Batch b = gpt::get_batch(text.train, 16, 128, /*seed=*/0, /*step=*/7);   // b.x, b.y [16, 128]
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "dsl/tessel.h"

namespace gpt {

/// Where the fortune files are: $TESSEL_FORTUNES_DIR, else Debian's folder.
inline std::filesystem::path fortunes_dir() {
  if (const char* d = std::getenv("TESSEL_FORTUNES_DIR"); d && *d) return d;
  return "/usr/share/games/fortunes";
}

struct Corpus {
  std::vector<unsigned char> chars;        // the vocabulary: token i is byte chars[i]
  std::vector<int64_t> train, val;         // the text as tokens, 90/10
  std::vector<std::string> files;          // what was read, in order
  int64_t vocab_size() const { return static_cast<int64_t>(chars.size()); }

  std::vector<int64_t> encode(const std::string& s) const {
    std::array<int64_t, 256> index;
    index.fill(-1);
    for (size_t i = 0; i < chars.size(); ++i) index[chars[i]] = static_cast<int64_t>(i);
    std::vector<int64_t> out;
    for (unsigned char c : s) {
      if (index[c] < 0)
        throw tessel::ValueError(fmt::format("GPT corpus: the character {:?} (byte {}) is not in the vocabulary",
                                             std::string(1, static_cast<char>(c)), c));
      out.push_back(index[c]);
    }
    return out;
  }
  std::string decode(const std::vector<int64_t>& tokens) const {
    std::string out;
    for (int64_t t : tokens) out += static_cast<char>(chars.at(static_cast<size_t>(t)));
    return out;
  }
};

/// Reads the corpus (ValueError naming the folder and the package when it is missing).
inline Corpus load_corpus(const std::filesystem::path& dir = fortunes_dir()) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw tessel::ValueError(fmt::format("GPT corpus: no folder {}; install Debian's `fortunes` package "
                                         "(scripts/setup-deps.sh does) or set TESSEL_FORTUNES_DIR",
                                         dir.string()));
  Corpus c;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    c.files.push_back(e.path().filename().string());
  }
  std::sort(c.files.begin(), c.files.end());
  std::string text;
  for (const auto& f : c.files) {
    std::ifstream in(dir / f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (text.size() < 10000)
    throw tessel::ValueError(fmt::format("GPT corpus: {} holds only {} bytes of text", dir.string(), text.size()));
  std::array<bool, 256> seen{};
  for (unsigned char ch : text) seen[ch] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) c.chars.push_back(static_cast<unsigned char>(b));
  std::vector<int64_t> all = c.encode(text);
  const auto n_train = static_cast<std::ptrdiff_t>(all.size() * 9 / 10);
  c.train.assign(all.begin(), all.begin() + n_train);
  c.val.assign(all.begin() + n_train, all.end());
  return c;
}

/// A batch of B random context windows of `data`: x [B, T] the windows, y
/// [B, T] the same shifted by one (the next character at each position).
/// The offsets are a function of (seed, step) only, so a run resumed at a
/// step draws the batches the uninterrupted run drew.
struct Batch {
  tessel::Tensor x, y;
};
inline Batch get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, uint64_t seed, int64_t step) {
  if (static_cast<int64_t>(data.size()) <= T + 1)
    throw tessel::ValueError(fmt::format("GPT batch: {} tokens are too few for windows of {}", data.size(), T));
  const auto s = static_cast<uint64_t>(step);
  std::seed_seq seq{seed & 0xffffffffu, seed >> 32, s & 0xffffffffu, s >> 32, uint64_t{0x67707462}};
  std::mt19937_64 rng(seq);
  std::uniform_int_distribution<int64_t> offset(0, static_cast<int64_t>(data.size()) - T - 1);
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const auto o = static_cast<size_t>(offset(rng));
    std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(o), T, x.begin() + b * T);
    std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(o + 1), T, y.begin() + b * T);
  }
  return {tessel::from_vector<int64_t>(x, {B, T}), tessel::from_vector<int64_t>(y, {B, T})};
}

}  // namespace gpt
