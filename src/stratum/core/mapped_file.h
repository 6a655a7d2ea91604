#pragma once
// A whole file mapped read-only (MAP_PRIVATE): nothing is read until touched,
// and the processes of a node share the page cache. Move-only. Torch-free.
#include <cstdint>
#include <string>

namespace stratum {

class MappedFile {
 public:
  // Throws stratum::Error naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;  // null for an empty file
  uint64_t size_ = 0;
};

}  // namespace stratum
