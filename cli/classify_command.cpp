#include "cli/classify_command.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>

#include "engine/autograd.h"
#include "engine/data/text/wordpiece.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "train/checkpoints/class_to_idx.h"

namespace dpcore::cli {

namespace {

// The model's probabilities of each class for one text's ids.
std::vector<double> class_probabilities(layers::Model& model, const std::vector<int64_t>& ids) {
  autograd::NoGradGuard no_grad;
  const Tensor x = Tensor::from_host(ids.data(), {1, int64_t(ids.size())}, DType::Int64, model.device());
  const std::vector<float> logp = model.forward(x).to(Device::cpu()).to_vector<float>();
  std::vector<double> p(logp.size());
  for (size_t c = 0; c < p.size(); ++c) p[c] = std::exp(double(logp[c]));
  return p;
}

}  // namespace

void classify(const ClassifyOptions& o, std::istream& in, std::ostream& out) {
  DPCORE_CHECK(!o.weights.empty(), "classify: --weights FILE.safetensors is required");
  DPCORE_CHECK(o.top >= 1, "--top ", o.top, ": must be at least 1");
  const std::vector<std::string> classes = train::load_class_to_idx(train::class_to_idx_path(o.weights));
  const data::text::WordPieceTokenizer tokenizer(
      data::text::Vocab::read(o.text.vocab.empty() ? data::kDefaultVocab : o.text.vocab));
  layers::ModelDef def =
      layers::model_from_flag(o.model, {o.text.max_len}, int64_t(classes.size()), tokenizer.vocab().size());
  layers::Model model(std::move(def.net), def.input_shape, Device::parse(o.device), DType::Float32, 0);
  DPCORE_CHECK(model.takes_token_ids(), "classify: --model ", o.model, " does not take token ids (a text model: ",
               "bert-tiny, bert-mini or bert(...))");
  DPCORE_CHECK(model.num_classes() == int64_t(classes.size()), "classify: --model ", o.model, " has ",
               model.num_classes(), " outputs but ", train::class_to_idx_path(o.weights), " names ", classes.size(),
               " classes");
  layers::load_weights(model, o.weights);
  model.train(false);
  std::vector<std::string> texts = o.texts;
  if (texts.empty()) {
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) texts.push_back(line);
    }
  }
  DPCORE_CHECK(!texts.empty(), "classify: no text given (as arguments or lines on stdin)");
  const size_t width = std::max_element(classes.begin(), classes.end(), [](const auto& a, const auto& b) {
                         return a.size() < b.size();
                       })->size();
  for (const std::string& text : texts) {
    const std::vector<double> p = class_probabilities(model, tokenizer.encode(text, o.text.max_len, o.text.truncate));
    std::vector<size_t> order(p.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    out << text << "\n";
    for (size_t k = 0; k < std::min(order.size(), size_t(o.top)); ++k) {
      out << "  " << std::left << std::setw(int(width)) << classes[order[k]] << std::right << "  " << std::fixed
          << std::setprecision(4) << p[order[k]] << "\n";
    }
  }
}

}  // namespace dpcore::cli
