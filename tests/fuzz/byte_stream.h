// Reading fuzz input as a stream of small decisions. Past the end every read gives 0, so any
// input, however short, decodes to something; done() says when the input is used up.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudalloc::fuzz {

class ByteStream {
 public:
  ByteStream(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool done() const { return at_ >= size_; }
  std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u16() | (std::uint32_t(u16()) << 16)); }
  // A value in [0, n) for n > 0.
  std::size_t below(std::size_t n) { return n <= 256 ? u8() % n : u32() % n; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace cudalloc::fuzz
