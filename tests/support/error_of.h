// The message of the dpcore::Error an action throws; a test failure when it throws none.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/error.h"

namespace dpcore::testing {

template <class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no dpcore::Error was thrown";
  return "";
}

}  // namespace dpcore::testing
