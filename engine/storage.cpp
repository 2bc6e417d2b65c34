#include "engine/storage.h"

namespace dpcore {

Storage::Storage(size_t bytes, Device device, Allocator* allocator)
    : bytes_(bytes), device_(device), allocator_(allocator) {
  data_ = bytes ? allocator_->allocate(bytes) : nullptr;
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, bytes_);
}

}  // namespace dpcore
