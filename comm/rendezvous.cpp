#include "comm/rendezvous.h"

#include <sstream>

#include "comm/communicator.h"

namespace dpcore::comm {

Rendezvous::Rendezvous(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), arrived_(size_t(size), false) {
  slots_[0].resize(size_t(size));
  slots_[1].resize(size_t(size));
}

void Rendezvous::check_not_aborted() const {
  if (!abort_reason_.empty()) throw GroupAborted(abort_reason_);
}

std::vector<Slot> Rendezvous::exchange(int rank, Slot mine, const std::string& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  check_not_aborted();
  const uint64_t generation = generation_;
  std::vector<Slot>& slots = slots_[generation % 2];
  slots[size_t(rank)] = std::move(mine);
  arrived_[size_t(rank)] = true;
  if (++arrived_count_ == size_) {
    arrived_count_ = 0;
    arrived_.assign(size_t(size_), false);
    // Everyone has finished with the previous generation's slots: drop them, so that no
    // buffer stays referenced after the collective that published it.
    for (Slot& old : slots_[(generation + 1) % 2]) old = Slot{};
    ++generation_;
    next_generation_.notify_all();
    return slots;
  }
  bool woke = next_generation_.wait_for(lock, timeout_, [&] {
    return generation_ != generation || !abort_reason_.empty();
  });
  if (!woke) fail_timeout(op);
  // A generation that completed before an abort still counts: its slots are valid.
  if (generation_ == generation) throw GroupAborted(abort_reason_);
  return slots;
}

// Called with the mutex held, by a replica that has waited `timeout_` in vain.
void Rendezvous::fail_timeout(const std::string& op) {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!arrived_[size_t(r)]) missing.push_back(r);
  }
  std::ostringstream os;
  os << op << ": replica" << (missing.size() > 1 ? "s " : " ");
  for (size_t i = 0; i < missing.size(); ++i) {
    os << (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") << missing[i];
  }
  os << " did not arrive within " << double(timeout_.count()) / 1000.0 << " s";
  abort_reason_ = os.str();
  next_generation_.notify_all();
  mail_arrived_.notify_all();
  throw ReplicasMissing(abort_reason_, missing);
}

void Rendezvous::post(int src, int dst, int tag, Slot message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_not_aborted();
    mailboxes_[{src, dst, tag}].push_back(std::move(message));
  }
  mail_arrived_.notify_all();
}

Slot Rendezvous::take(int src, int dst, int tag, const std::string& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(src, dst, tag);
  std::deque<Slot>& box = mailboxes_[key];
  bool woke = mail_arrived_.wait_for(lock, timeout_, [&] { return !box.empty() || !abort_reason_.empty(); });
  check_not_aborted();
  if (!woke) {
    std::ostringstream os;
    os << op << ": replica " << src << " sent nothing to replica " << dst << " (tag " << tag << ") within "
       << double(timeout_.count()) / 1000.0 << " s";
    abort_reason_ = os.str();
    next_generation_.notify_all();
    mail_arrived_.notify_all();
    throw ReplicasMissing(abort_reason_, {src});
  }
  Slot message = std::move(box.front());
  box.pop_front();
  if (box.empty()) mailboxes_.erase(key);
  return message;
}

std::shared_ptr<Rendezvous> Rendezvous::subgroup(uint64_t split, int color, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = subgroups_.find({split, color});
  if (found == subgroups_.end()) {
    found = subgroups_.emplace(std::make_pair(split, color),
                               Subgroup{std::make_shared<Rendezvous>(size, timeout_), size}).first;
  }
  std::shared_ptr<Rendezvous> rendezvous = found->second.rendezvous;
  if (--found->second.members_to_come == 0) subgroups_.erase(found);
  return rendezvous;
}

void Rendezvous::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!abort_reason_.empty()) return;
    abort_reason_ = reason.empty() ? "local group aborted" : reason;
  }
  next_generation_.notify_all();
  mail_arrived_.notify_all();
}

bool Rendezvous::aborted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !abort_reason_.empty();
}

}  // namespace dpcore::comm
