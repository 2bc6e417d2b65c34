#include "engine/storage.h"

namespace dpcore {

Storage::Storage(size_t bytes, Device device, Allocator* allocator)
    : bytes_(bytes), device_(device), allocator_(allocator), account_(MemoryAccount::current()) {
  data_ = bytes ? allocator_->allocate(bytes) : nullptr;
  if (account_) account_->add(bytes_);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, bytes_);
  if (account_) account_->remove(bytes_);
}

}  // namespace dpcore
