#include "engine/data/loader.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <numeric>
#include <random>

#include "engine/random.h"
#include "engine/trace.h"
#include "kernels/error.h"
#include "kernels/index_check.h"

namespace dpcore::data {

static constexpr size_t kAlign = 64;

static size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

HostAllocator aligned_host_allocator() {
  return {[](size_t bytes) { return ::operator new(bytes, std::align_val_t(kAlign)); },
          [](void* ptr) { ::operator delete(ptr, std::align_val_t(kAlign)); },
          nullptr};  // copies out of plain memory are done when the call that made them returns
}

int64_t Batch::sample_numel() const {
  int64_t n = 1;
  for (int64_t d : sample) n *= d;
  return n;
}

// Rewrites `order` (already n long) in place, so that steady state allocates nothing.
static void fill_sample_order(std::vector<int64_t>& order, bool shuffle, uint64_t seed, int64_t epoch) {
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle) return;
  std::mt19937_64 rng(derive_seed(seed, uint64_t(epoch)));
  fisher_yates(order, rng);
}

std::vector<int64_t> sample_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  fill_sample_order(order, shuffle, seed, epoch);
  return order;
}

void bucket_by_length(std::vector<int64_t>& order, const Dataset& data, int64_t window) {
  DPCORE_CHECK(data.tokens(), "--bucket-by-length: ", data.name, " has no token lengths (it is not text)");
  DPCORE_CHECK(window >= 1, "--bucket-by-length: window of ", window, " samples");
  for (size_t begin = 0; begin < order.size(); begin += size_t(window)) {
    const auto end = order.begin() + std::min(order.size(), begin + size_t(window));
    std::stable_sort(order.begin() + begin, end, [&](int64_t a, int64_t b) { return data.length(a) < data.length(b); });
  }
}

// What one sample's input takes in a batch buffer: its pixels, or max_len token ids.
static size_t sample_input_bytes(const Dataset& data) {
  return data.tokens() ? size_t(data.max_len) * sizeof(int64_t) : size_t(data.sample_size()) * sizeof(float);
}

static int64_t count_batches(const Dataset& data, const LoaderOptions& o) {
  check_dataset(data);
  DPCORE_CHECK(o.batch_size > 0, "data loader for ", data.name, ": batch size must be positive, got ", o.batch_size);
  DPCORE_CHECK(o.prefetch >= 1, "data loader for ", data.name, ": prefetch must be at least 1, got ", o.prefetch);
  DPCORE_CHECK(o.allocator.allocate && o.allocator.deallocate, "data loader for ", data.name,
               ": the host allocator needs both allocate and deallocate");
  DPCORE_CHECK(!data.tokens() || o.augment.none(), "--augment ", describe(o.augment), ": ", data.name,
               " is text (token ids); augmentation is for images");
  DPCORE_CHECK(!o.bucket_by_length || data.tokens(), "--bucket-by-length: ", data.name,
               " is not text (it has no token lengths)");
  if (!data.tokens()) check_augment(o.augment, data);
  DPCORE_CHECK(!o.mlm.on() || data.tokens(), "--task mlm: ", data.name, " is not text (it has no token ids)");
  DPCORE_CHECK(!data.source || o.augment.none(), "data loader for ", data.name, ": --augment \"", o.augment.text,
               "\" and a random --transform together; use the transform's steps (RandomHorizontalFlip(), ...)");
  DPCORE_CHECK(!o.drop_last || o.batch_size <= data.n, "data loader for ", data.name, ": batch size ", o.batch_size,
               " is larger than the ", data.n, " samples and drop_last is on: no batch would ever be produced");
  return o.drop_last ? data.n / o.batch_size : (data.n + o.batch_size - 1) / o.batch_size;
}

DataLoader::DataLoader(const Dataset& data, LoaderOptions options, LoaderPosition start)
    : data_(data),
      options_(std::move(options)),
      batches_per_epoch_(count_batches(data, options_)),
      capacity_(std::min(options_.batch_size, data.n)),
      labels_capacity_(options_.mlm.on() ? capacity_ * data.max_len : capacity_),
      images_bytes_(round_up(size_t(capacity_) * sample_input_bytes(data))),
      // labels, then (token ids) the samples' lengths
      buffer_bytes_(images_bytes_ + size_t(labels_capacity_ + (data.tokens() ? capacity_ : 0)) * sizeof(int64_t)),
      pad_value_(size_t(data.c)),
      queue_(size_t(options_.prefetch)),
      buffers_(size_t(options_.prefetch) + 1, nullptr),
      order_(size_t(data.n)) {
  for (int64_t ch = 0; ch < data.c; ++ch) pad_value_[size_t(ch)] = data.zero_of_channel(ch);
  free_slots_.reserve(buffers_.size());
  seek(start);
}

DataLoader::~DataLoader() {
  stop_worker();
  for (void* buffer : buffers_)
    if (buffer) options_.allocator.deallocate(buffer);
}

void DataLoader::seek(LoaderPosition pos) {
  DPCORE_CHECK(pos.epoch >= 0 && pos.batch >= 0 && pos.batch <= batches_per_epoch_, "data loader for ", data_.name,
               ": cannot seek to epoch ", pos.epoch, " batch ", pos.batch, " (an epoch has ", batches_per_epoch_,
               " batches)");
  stop_worker();
  queue_head_ = queue_count_ = 0;
  free_slots_.clear();
  for (int slot = int(buffers_.size()) - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  worker_error_ = nullptr;
  held_slot_ = -1;
  position_ = pos;
  start_worker(pos);
}

void DataLoader::start_worker(LoaderPosition from) {
  stop_ = false;
  worker_ = std::thread([this, from] { work(from); });
}

void DataLoader::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  can_produce_.notify_all();
  worker_.join();
}

bool DataLoader::next(Batch& out) {
  // On the consumer's lane: time waiting for the loader thread (none when it is ahead).
  trace::Span span("data", "wait for data");
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (held_slot_ >= 0) {
      free_slots_.push_back(held_slot_);
      held_slot_ = -1;
      can_produce_.notify_one();
    }
    can_consume_.wait(lock, [&] { return queue_count_ > 0 || worker_error_; });
    if (queue_count_ == 0) std::rethrow_exception(worker_error_);
    item = queue_[queue_head_];
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
  }
  can_produce_.notify_one();
  if (item.epoch_end) {
    position_ = {position_.epoch + 1, 0};
    return false;
  }
  held_slot_ = item.slot;
  out = item.batch;
  position_ = {item.batch.epoch, item.batch.index + 1};
  return true;
}

void DataLoader::work(LoaderPosition pos) {
  trace::set_lane("loader", trace::kLoaderLane);
  try {
    for (;;) {
      const bool epoch_end = pos.batch == batches_per_epoch_;
      Item item;
      item.epoch_end = epoch_end;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        can_produce_.wait(
            lock, [&] { return stop_ || (queue_count_ < queue_.size() && (epoch_end || !free_slots_.empty())); });
        if (stop_) return;
        if (!epoch_end) {
          item.slot = free_slots_.back();
          free_slots_.pop_back();
        }
      }
      // The expensive part runs unlocked; only this thread touches the slot until it is queued.
      if (epoch_end) {
        pos = {pos.epoch + 1, 0};
      } else {
        trace::Span span("data", [&] {
          return trace::Label{"prepare batch", {{"epoch", pos.epoch + 1}, {"batch", pos.batch},
                                                {"augment", describe(options_.augment)}}};
        });
        item.batch = gather(item.slot, pos);
        span.add("samples", item.batch.size);
        ++pos.batch;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_[(queue_head_ + queue_count_) % queue_.size()] = item;
        ++queue_count_;
      }
      can_consume_.notify_one();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      worker_error_ = std::current_exception();
    }
    can_consume_.notify_one();
  }
}

Batch DataLoader::gather(int slot, LoaderPosition pos) {
  if (order_epoch_ != pos.epoch) {
    fill_sample_order(order_, options_.shuffle, options_.seed, pos.epoch);
    if (options_.bucket_by_length) bucket_by_length(order_, data_, options_.batch_size * kBucketBatches);
    order_epoch_ = pos.epoch;
  }
  if (!buffers_[slot]) {
    buffers_[slot] = options_.allocator.allocate(buffer_bytes_);
    DPCORE_CHECK(buffers_[slot], "data loader for ", data_.name, ": the host allocator returned null for ",
                 buffer_bytes_, " bytes");
  } else if (options_.allocator.await_reads) {
    options_.allocator.await_reads(buffers_[slot]);
  }
  auto* base = static_cast<unsigned char*>(buffers_[slot]);
  auto* images = reinterpret_cast<float*>(base);
  auto* labels = reinterpret_cast<int64_t*>(base + images_bytes_);
  const int64_t first = pos.batch * options_.batch_size;
  const int64_t size = std::min(options_.batch_size, data_.n - first);
  Batch b;
  b.size = size;
  b.labels = labels;
  b.epoch = pos.epoch;
  b.index = pos.batch;
  if (data_.tokens()) {
    auto* lengths = labels + labels_capacity_;
    for (int64_t i = 0; i < size; ++i) lengths[i] = data_.length(order_[size_t(first + i)]);
    b.lengths = lengths;
    gather_tokens(first, size, reinterpret_cast<int64_t*>(base), labels, b);
    return b;
  }
  const int64_t sample = data_.sample_size();
  const Augment& augment = options_.augment;
  // Samples made per batch (an image folder with a random --transform): decoded and
  // transformed here, on the source's own threads.
  if (data_.source) data_.source->load(&order_[size_t(first)], size, pos.epoch, options_.seed, images);
  for (int64_t i = 0; i < size; ++i) {
    const int64_t s = order_[size_t(first + i)];
    labels[i] = data_.labels[size_t(s)];
    if (data_.source) continue;
    if (augment.none()) {
      std::memcpy(images + i * sample, data_.image(s), size_t(sample) * sizeof(float));
    } else {
      const AugmentDraw draw = draw_augment(augment, options_.seed, pos.epoch, first + i);
      augment_sample(data_.image(s), images + i * sample, data_.c, data_.h, data_.w, augment.crop_pad, draw,
                     pad_value_.data());
    }
  }
  b.sample = {data_.c, data_.h, data_.w};
  b.images = images;
  return b;
}

void DataLoader::gather_tokens(int64_t first, int64_t size, int64_t* ids, int64_t* labels, Batch& b) const {
  int64_t longest = 0;
  for (int64_t i = 0; i < size; ++i) longest = std::max(longest, data_.length(order_[size_t(first + i)]));
  const MlmMasking& mlm = options_.mlm;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t s = order_[size_t(first + i)];
    int64_t* row = ids + i * longest;
    std::copy(data_.ids(s), data_.ids(s) + data_.length(s), row);
    std::fill(row + data_.length(s), row + longest, data_.pad_id);
    if (!mlm.on()) {
      labels[i] = data_.labels[size_t(s)];
      continue;
    }
    int64_t* targets = labels + i * longest;
    mask_tokens(mlm, b.epoch, s, row, data_.length(s), targets);
    std::fill(targets + data_.length(s), targets + longest, kernels::kDefaultIgnoreIndex);
  }
  b.sample = {longest};
  b.ids = ids;
  b.labels_per_sample = mlm.on() ? longest : 1;
}

}  // namespace dpcore::data
