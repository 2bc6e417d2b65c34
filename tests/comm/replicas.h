// Runs one thread per replica of an in-process group, as the data-parallel trainer does.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace dpcore::testing {

// body(comm) on one thread per communicator; rethrows the lowest rank's exception, if any.
inline void run_replicas(const std::vector<std::unique_ptr<comm::Communicator>>& group,
                         const std::function<void(comm::Communicator&)>& body) {
  std::vector<std::exception_ptr> errors(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dpcore::testing
