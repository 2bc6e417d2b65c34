// Residual networks with torchvision's parameter names, so that weights move both ways
// between dpcore and the equivalent PyTorch module: torchvision's BasicBlock and Bottleneck,
// the CIFAR-style ResNet of He et al. 2016 (section 4.2) and torchvision's ImageNet ResNets
// (torchvision.models.resnet18, resnet34, resnet50).
#pragma once

#include <memory>

#include "layers/module.h"

namespace dpcore::layers {

// What BasicBlock and Bottleneck share: out = relu(body(x) + shortcut(x)). The shortcut is
// the identity when the block keeps the shape, else `downsample`: a 1x1 convolution with
// the block's stride, then batch norm (He et al.'s option B), named downsample.0 and
// downsample.1 as in torchvision.
class ResidualBlock : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) override;
  void apply(const std::function<void(Module&)>& f) override;

 protected:
  // A projection shortcut when stride != 1 or in_channels != out_channels; the derived
  // block adds its layers to body_.
  ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  std::string shortcut_text() const { return downsample_ ? ", projection" : ""; }

  int64_t in_, out_, stride_;
  Sequential body_;

 private:
  std::unique_ptr<Sequential> downsample_;  // null: identity
};

// torchvision's BasicBlock (expansion 1): body conv1 bn1 relu conv2 bn2, the convolutions
// 3x3 without bias, conv1 with the block's stride.
class BasicBlock : public ResidualBlock {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
};

// torchvision's Bottleneck (expansion 4, ResNet v1.5): body conv1 (1x1, in -> width) bn1
// relu conv2 (3x3 with the block's stride, width -> width) bn2 relu conv3 (1x1,
// width -> 4 * width) bn3, no biases. The stride sits on the 3x3 convolution as in
// torchvision, not on the first 1x1 as in He et al.'s paper (v1).
class Bottleneck : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_channels, int64_t width, int64_t stride = 1);
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;

 private:
  int64_t width_;
};

// The CIFAR ResNet with `blocks` BasicBlocks per stage (6n+2 layers: n = 1 is resnet8,
// n = 3 resnet20): conv1 (3x3, 16) bn1 relu, layer1 (16 channels), layer2 (32, stride 2),
// layer3 (64, stride 2), global average pooling, flatten, fc (64 -> classes), log-softmax.
// Works for any input size (the pooling is global). Convolutions are initialised as
// torchvision's ResNet does (kaiming_normal_, fan_out), batch norm with weight 1, bias 0.
std::unique_ptr<Sequential> cifar_resnet(int64_t blocks, int64_t in_channels, int64_t classes = 10);

// torchvision.models.resnet18 / resnet34 / resnet50 (`depth` 18, 34 or 50), for images of
// `in_channels` channels (torchvision's: 3): conv1 (7x7, 64, stride 2, padding 3, no bias)
// bn1 relu maxpool (3x3, stride 2, padding 1), layer1-4 at widths 64, 128, 256, 512 (the
// first block of layer2-4 with stride 2), BasicBlocks [2, 2, 2, 2] (18) or [3, 4, 6, 3]
// (34), Bottlenecks [3, 4, 6, 3] (50); avgpool (global), flatten, fc (512 * expansion ->
// classes), then log-softmax (dpcore's models end in log-probabilities; torchvision's in
// the logits fc gives). Names are torchvision's state_dict names; the initialisation is
// torchvision's (zero_init_residual False): kaiming_normal_(fan_out, relu) for the
// convolutions, batch norm weight 1 and bias 0, nn.Linear's default for fc. Any input
// size works (the paddings keep every layer at least 1x1, the pooling is global).
std::unique_ptr<Sequential> torchvision_resnet(int depth, int64_t in_channels = 3, int64_t classes = 1000);

}  // namespace dpcore::layers
