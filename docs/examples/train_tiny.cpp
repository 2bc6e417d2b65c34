// Embedding dpcore in a program: build a model, train a few steps, save the weights.
//   train_tiny OUT.safetensors
#include <cstdio>
#include <vector>

#include <dpcore/dpcore.h>

int main(int argc, char** argv) {
  using namespace dpcore;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
    return 2;
  }
  // A model from a layer spec; reference_model("simplenet") would do as well.
  auto net = layers::parse_layer_spec("conv(8,3,p1) relu pool(2) flatten linear(3)", {1, 8, 8});
  layers::Model model(std::move(net), {1, 8, 8}, Device::cpu(), DType::Float32, /*seed=*/1);
  Sgd sgd(model.parameters(), SgdConfig{0.1, 0.9, 0.0, 0.0, false});

  // Three classes told apart by which third of the image is bright.
  const int64_t n = 12;
  std::vector<float> images(size_t(n * 64), 0.0f);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[size_t(i)] = i % 3;
    for (int64_t p = 0; p < 64; ++p) images[size_t(i * 64 + p)] = (p % 8) / 3 == i % 3 ? 1.0f : 0.0f;
  }
  Tensor x = Tensor::from_vector(images, {n, 1, 8, 8});
  Tensor y = Tensor::from_vector(labels, {n});

  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    last = train::train_step(model, sgd, x, y, /*accum=*/2);
    if (step == 0) first = last;
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  layers::save_weights(model, argv[1]);
  return last < first ? 0 : 1;
}
