// Residual networks: torchvision's BasicBlock and the CIFAR-style ResNet of He et al. 2016
// (section 4.2), with torchvision's parameter names so that weights move both ways between
// dpcore and the equivalent PyTorch module.
#pragma once

#include <memory>

#include "layers/module.h"

namespace dpcore::layers {

// out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the convolutions 3x3 without
// bias, conv1 with the block's stride. The shortcut is the identity when the shape is kept,
// else `downsample`: a 1x1 convolution with the stride, then batch norm (He et al.'s
// option B), named downsample.0 and downsample.1 as in torchvision.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) override;
  void apply(const std::function<void(Module&)>& f) override;

 private:
  int64_t in_, out_, stride_;
  Sequential body_;                         // conv1 bn1 relu conv2 bn2
  std::unique_ptr<Sequential> downsample_;  // null: identity
};

// The CIFAR ResNet with `blocks` BasicBlocks per stage (6n+2 layers: n = 1 is resnet8,
// n = 3 resnet20): conv1 (3x3, 16) bn1 relu, layer1 (16 channels), layer2 (32, stride 2),
// layer3 (64, stride 2), global average pooling, flatten, fc (64 -> classes), log-softmax.
// Works for any input size (the pooling is global). Convolutions are initialised as
// torchvision's ResNet does (kaiming_normal_, fan_out), batch norm with weight 1, bias 0.
std::unique_ptr<Sequential> cifar_resnet(int64_t blocks, int64_t in_channels, int64_t classes = 10);

}  // namespace dpcore::layers
