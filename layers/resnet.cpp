#include "layers/resnet.h"

namespace dpcore::layers {

namespace {

std::unique_ptr<Module> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return std::make_unique<Conv2d>(in, out, kernel, stride, kernel / 2, /*bias=*/false,
                                  Conv2d::Init::KaimingNormalFanOut);
}

}  // namespace

// ---------------------------------------------------------------- ResidualBlock
ResidualBlock::ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  DPCORE_CHECK(in_ > 0 && out_ > 0 && stride_ > 0, "residual block: invalid configuration (", in_, " -> ", out_,
               " channels, stride ", stride_, ")");
  if (stride_ != 1 || in_ != out_) {
    downsample_ = std::make_unique<Sequential>();
    downsample_->add(conv(in_, out_, 1, stride_)).add(std::make_unique<BatchNorm2d>(out_));
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  Tensor residual = body_.forward(x);
  return ops::relu(ops::add(residual, downsample_ ? downsample_->forward(x) : x));
}

Shape ResidualBlock::output_shape(const Shape& input) const {
  Shape out = body_.output_shape(input);
  if (downsample_) {
    Shape shortcut = downsample_->output_shape(input);
    DPCORE_CHECK(shortcut == out, "the shortcut gives ", shape_str(shortcut), " but the block ", shape_str(out));
  } else {
    DPCORE_CHECK(input == out, "the identity shortcut keeps ", shape_str(input), " but the block gives ",
                 shape_str(out));
  }
  return out;
}

void ResidualBlock::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  body_.collect_parameters(prefix, out);
  if (downsample_) downsample_->collect_parameters(qualified_name(prefix, "downsample"), out);
}

void ResidualBlock::collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) {
  body_.collect_buffers(prefix, out);
  if (downsample_) downsample_->collect_buffers(qualified_name(prefix, "downsample"), out);
}

void ResidualBlock::apply(const std::function<void(Module&)>& f) {
  f(*this);
  body_.apply(f);
  if (downsample_) downsample_->apply(f);
}

// ---------------------------------------------------------------- BasicBlock, Bottleneck
BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : ResidualBlock(in_channels, out_channels, stride) {
  body_.add("conv1", conv(in_, out_, 3, stride_)).add("bn1", std::make_unique<BatchNorm2d>(out_));
  body_.add("relu", std::make_unique<ReLU>());
  body_.add("conv2", conv(out_, out_, 3, 1)).add("bn2", std::make_unique<BatchNorm2d>(out_));
}

std::string BasicBlock::describe() const {
  return "res(" + std::to_string(in_) + "->" + std::to_string(out_) + ", s" + std::to_string(stride_) +
         shortcut_text() + ")";
}

std::unique_ptr<Module> BasicBlock::clone() const { return std::make_unique<BasicBlock>(in_, out_, stride_); }

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int64_t stride)
    : ResidualBlock(in_channels, width * kExpansion, stride), width_(width) {
  body_.add("conv1", conv(in_, width_, 1, 1)).add("bn1", std::make_unique<BatchNorm2d>(width_));
  body_.add("relu1", std::make_unique<ReLU>());
  body_.add("conv2", conv(width_, width_, 3, stride_)).add("bn2", std::make_unique<BatchNorm2d>(width_));
  body_.add("relu2", std::make_unique<ReLU>());
  body_.add("conv3", conv(width_, out_, 1, 1)).add("bn3", std::make_unique<BatchNorm2d>(out_));
}

std::string Bottleneck::describe() const {
  return "bottleneck(" + std::to_string(in_) + "->" + std::to_string(width_) + "->" + std::to_string(out_) + ", s" +
         std::to_string(stride_) + shortcut_text() + ")";
}

std::unique_ptr<Module> Bottleneck::clone() const { return std::make_unique<Bottleneck>(in_, width_, stride_); }

// ---------------------------------------------------------------- the networks
std::unique_ptr<Sequential> cifar_resnet(int64_t blocks, int64_t in_channels, int64_t classes) {
  DPCORE_CHECK(blocks >= 1 && in_channels >= 1 && classes >= 1, "resnet: invalid configuration (", blocks,
               " blocks per stage, ", in_channels, " input channels, ", classes, " classes)");
  auto net = std::make_unique<Sequential>();
  net->add("conv1", conv(in_channels, 16, 3, 1)).add("bn1", std::make_unique<BatchNorm2d>(16));
  net->add("relu", std::make_unique<ReLU>());
  int64_t channels = 16;
  for (int64_t stage = 1; stage <= 3; ++stage) {
    const int64_t width = 16 << (stage - 1);
    auto layer = std::make_unique<Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      layer->add(std::make_unique<BasicBlock>(channels, width, b == 0 && stage > 1 ? 2 : 1));
      channels = width;
    }
    net->add("layer" + std::to_string(stage), std::move(layer));
  }
  net->add("avgpool", std::make_unique<GlobalAvgPool2d>()).add("flatten", std::make_unique<Flatten>());
  net->add("fc", std::make_unique<Linear>(64, classes)).add("log_softmax", std::make_unique<LogSoftmax>());
  return net;
}

std::unique_ptr<Sequential> torchvision_resnet(int depth, int64_t in_channels, int64_t classes) {
  DPCORE_CHECK(depth == 18 || depth == 34 || depth == 50, "resnet: depth ", depth,
               " is not one of torchvision's resnet18, resnet34, resnet50");
  DPCORE_CHECK(in_channels >= 1 && classes >= 1, "resnet", depth, ": invalid configuration (", in_channels,
               " input channels, ", classes, " classes)");
  const bool bottleneck = depth == 50;
  const int64_t blocks[4] = {depth == 18 ? 2 : 3, depth == 18 ? 2 : 4, depth == 18 ? 2 : 6, depth == 18 ? 2 : 3};
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : 1;
  auto net = std::make_unique<Sequential>();
  net->add("conv1", std::make_unique<Conv2d>(in_channels, 64, 7, 2, 3, /*bias=*/false, Conv2d::Init::KaimingNormalFanOut));
  net->add("bn1", std::make_unique<BatchNorm2d>(64)).add("relu", std::make_unique<ReLU>());
  net->add("maxpool", std::make_unique<MaxPool2d>(3, 2, 1));
  int64_t channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = int64_t(64) << stage;
    auto layer = std::make_unique<Sequential>();
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      const int64_t stride = b == 0 && stage > 0 ? 2 : 1;
      if (bottleneck) {
        layer->add(std::make_unique<Bottleneck>(channels, width, stride));
      } else {
        layer->add(std::make_unique<BasicBlock>(channels, width, stride));
      }
      channels = width * expansion;
    }
    net->add("layer" + std::to_string(stage + 1), std::move(layer));
  }
  net->add("avgpool", std::make_unique<GlobalAvgPool2d>()).add("flatten", std::make_unique<Flatten>());
  net->add("fc", std::make_unique<Linear>(channels, classes)).add("log_softmax", std::make_unique<LogSoftmax>());
  return net;
}

}  // namespace dpcore::layers
