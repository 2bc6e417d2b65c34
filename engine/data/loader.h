// Mini-batches for the training loop. A background thread gathers the samples of the next
// batches into contiguous buffers while the current step runs.
//
// Order. Epoch e visits the samples in file order (no shuffle) or in the order Fisher-Yates
// gives when run over 0..n-1 with std::mt19937_64 seeded by derive_seed(seed, e) (engine/random.h):
// for i = n-1 down to 1, swap element i with element uniform_below(rng, i + 1). Both the
// generator's output and this algorithm are fixed, so the order depends only on
// (n, shuffle, seed, e) and is the same on every platform and after any restart.
//
// Position. (epoch, batch) names the batch the next call to next() returns; batch runs
// from 0 to batches_per_epoch(), the last value meaning that next() returns false (end of
// the epoch) and moves on to (epoch + 1, 0). Saving position() in a checkpoint and passing it
// to seek() (or the constructor) reproduces the remaining batches exactly.
//
// Token ids (Dataset::tokens()). A batch's samples are padded with the dataset's pad id to
// the longest of them, so Batch::sample is {T} with T that batch's longest length (at most
// max_len), and changes from batch to batch. With LoaderOptions::bucket_by_length, the
// epoch's order (shuffled or not, as above) is cut into windows of kBucketBatches batches and
// each window is sorted by length (stable: equal lengths keep their order), so that a batch
// holds texts of similar lengths and little padding; the order still depends only on the data's
// lengths and (n, shuffle, seed, e).
//
// Masked-LM (LoaderOptions::mlm on, token ids only). Each sample's ids are masked as it is
// gathered, by mask_tokens() with its index in the dataset (engine/data/mlm_masking.h), and
// the batch's labels are the per-token targets instead of the class: labels_per_sample T, -100
// at the padding.
//
// Augmentation. With LoaderOptions::augment other than none, the worker writes each sample
// into its batch buffer through augment_sample() with the draws of draw_augment(augment,
// seed, epoch, position), position being the sample's index in the epoch's order
// (engine/data/augment.h); with none it copies the sample as it is.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data/augment.h"
#include "engine/data/dataset.h"
#include "engine/data/mlm_masking.h"

namespace dpcore::data {

// Where batch buffers come from. The CUDA path plugs in pinned memory here
// (cudaHostAlloc with cudaHostAllocPortable, cudaFreeHost). Called on the loader's worker
// thread, at most prefetch + 1 times over the loader's life.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* ptr)> deallocate;
  // Optional. Blocks until the device has finished copying out of the buffer `ptr`: the
  // worker calls it before refilling a buffer a consumer gave back, since copies out of
  // pinned memory run after the call that queued them has returned.
  std::function<void(const void* ptr)> await_reads;
};

// 64-byte aligned operator new / delete.
HostAllocator aligned_host_allocator();

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;  // drop the smaller last batch of an epoch instead of returning it
  uint64_t seed = 0;
  int prefetch = 2;  // batches prepared ahead of the consumer
  Augment augment;   // applied to every sample as it is gathered; default none
  bool bucket_by_length = false;  // token ids: batches of similar lengths (see the top of this file)
  MlmMasking mlm;                 // token ids: masked-LM inputs and targets (see the top of this file)
  HostAllocator allocator = aligned_host_allocator();
};

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderPosition& o) const { return epoch == o.epoch && batch == o.batch; }
};

// A batch in host memory: the loader's points into one of its buffers, valid until the next
// call to next() or seek(). The inputs are float values (images [size, C, H, W], per-token
// features [size, T, F], ...) or, for a model that takes them (Model::takes_token_ids),
// int64 token ids [size, T]: exactly one of `images` and `ids` is set. The labels are one
// class per sample (labels_per_sample 1: classification) or one per token (T: a per-token
// output such as masked-LM), where an entry may be ignore_index (kernels/index_check.h)
// and then counts for nothing.
struct Batch {
  int64_t size = 0;                 // samples; the last batch of an epoch may be smaller unless drop_last
  std::vector<int64_t> sample;      // one sample's input shape: {C, H, W}, {T, F}, {T}, ...
  const float* images = nullptr;    // float inputs, size x sample
  const int64_t* ids = nullptr;     // or int64 token ids, size x sample
  const int64_t* labels = nullptr;  // size x labels_per_sample
  const int64_t* lengths = nullptr; // token ids: each sample's tokens before its padding (else null)
  int64_t labels_per_sample = 1;
  int64_t epoch = 0, index = 0;     // which batch of which epoch this is

  int64_t sample_numel() const;     // elements of one sample's input
  bool token_ids() const { return ids != nullptr; }
};

// The order in which epoch `epoch` visits samples 0..n-1 (see the top of this file).
std::vector<int64_t> sample_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

// --bucket-by-length: batches per window sorted by length.
inline constexpr int64_t kBucketBatches = 50;
// Sorts each window of `window` consecutive entries of `order` by the samples' lengths, stably.
void bucket_by_length(std::vector<int64_t>& order, const Dataset& data, int64_t window);

// One consumer thread calls next(), seek() and position(). The dataset must outlive the
// loader and stay unchanged while it exists.
class DataLoader {
 public:
  DataLoader(const Dataset& data, LoaderOptions options, LoaderPosition start = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the current epoch, or false once the epoch is over (the call after
  // that starts the next epoch). Rethrows an exception raised on the worker thread.
  bool next(Batch& out);

  LoaderPosition position() const { return position_; }
  // Discards prepared batches and continues from `position`.
  void seek(LoaderPosition position);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  struct Item {
    bool epoch_end = false;
    int slot = -1;
    Batch batch;
  };

  void start_worker(LoaderPosition from);
  void stop_worker();
  void work(LoaderPosition pos);
  Batch gather(int slot, LoaderPosition pos);
  void gather_tokens(int64_t first, int64_t size, int64_t* ids, int64_t* labels, Batch& b) const;

  const Dataset& data_;
  const LoaderOptions options_;
  const int64_t batches_per_epoch_;
  const int64_t capacity_;                    // samples a buffer holds: min(batch size, n)
  const int64_t labels_capacity_;             // label entries a buffer holds: capacity_, or capacity_ x max_len (mlm)
  const size_t images_bytes_, buffer_bytes_;  // labels start at images_bytes_ in a buffer (ids for tokens)
  std::vector<float> pad_value_;              // per channel, what crop:PAD pads with

  // Shared between the threads, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable can_produce_, can_consume_;
  std::vector<Item> queue_;  // ring of options_.prefetch items
  size_t queue_head_ = 0, queue_count_ = 0;
  std::vector<int> free_slots_;      // buffer indices nobody holds
  std::exception_ptr worker_error_;  // delivered after the batches queued before it
  bool stop_ = false;

  std::vector<void*> buffers_;  // prefetch + 1, allocated by the worker on first use
  std::thread worker_;

  // Worker thread only.
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;

  // Consumer thread only.
  LoaderPosition position_;
  int held_slot_ = -1;
};

}  // namespace dpcore::data
