#include "layers/resnet.h"

namespace dpcore::layers {

namespace {

std::unique_ptr<Module> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return std::make_unique<Conv2d>(in, out, kernel, stride, kernel / 2, /*bias=*/false,
                                  Conv2d::Init::KaimingNormalFanOut);
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  DPCORE_CHECK(in_ > 0 && out_ > 0 && stride_ > 0, "res: invalid configuration ", describe());
  body_.add("conv1", conv(in_, out_, 3, stride_)).add("bn1", std::make_unique<BatchNorm2d>(out_));
  body_.add("relu", std::make_unique<ReLU>());
  body_.add("conv2", conv(out_, out_, 3, 1)).add("bn2", std::make_unique<BatchNorm2d>(out_));
  if (stride_ != 1 || in_ != out_) {
    downsample_ = std::make_unique<Sequential>();
    downsample_->add(conv(in_, out_, 1, stride_)).add(std::make_unique<BatchNorm2d>(out_));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor residual = body_.forward(x);
  return ops::relu(ops::add(residual, downsample_ ? downsample_->forward(x) : x));
}

Shape BasicBlock::output_shape(const Shape& input) const {
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

std::string BasicBlock::describe() const {
  return "res(" + std::to_string(in_) + "->" + std::to_string(out_) + ", s" + std::to_string(stride_) +
         (downsample_ ? ", projection" : "") + ")";
}

std::unique_ptr<Module> BasicBlock::clone() const { return std::make_unique<BasicBlock>(in_, out_, stride_); }

void BasicBlock::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  body_.collect_parameters(prefix, out);
  if (downsample_) downsample_->collect_parameters(qualified_name(prefix, "downsample"), out);
}

void BasicBlock::collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) {
  body_.collect_buffers(prefix, out);
  if (downsample_) downsample_->collect_buffers(qualified_name(prefix, "downsample"), out);
}

void BasicBlock::apply(const std::function<void(Module&)>& f) {
  f(*this);
  body_.apply(f);
  if (downsample_) downsample_->apply(f);
}

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

}  // namespace dpcore::layers
