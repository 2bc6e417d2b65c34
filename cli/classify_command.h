// `dpcore classify --weights W [--model M] [--vocab V] [--max-len L] [--truncate] [--top K]
// [TEXT...]`: the top classes of each text (or of each line of stdin when no text is given)
// with their probabilities, by weights `dpcore train --save W` wrote on a text dataset; the
// class names come from the class list saved beside them (W.class_to_idx.json).
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "engine/data/spec.h"

namespace dpcore::cli {

struct ClassifyOptions {
  std::string weights, model = "bert-tiny", device = "cpu";
  data::TextOptions text;  // the tokenizer's settings, as in training
  int64_t top = 3;
  std::vector<std::string> texts;  // empty: the lines of `in`
};

// For each text, a line "TEXT" then one line per class of the top: "  NAME  0.9123".
// dpcore::Error naming the file or the text on bad input (a text too long without
// --truncate, weights of another model, a missing class list).
void classify(const ClassifyOptions& options, std::istream& in, std::ostream& out);

}  // namespace dpcore::cli
