#include "engine/data/image/transform_spec.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "engine/data/image/image_resize.h"
#include "engine/random.h"
#include "kernels/error.h"

namespace dpcore::data {

namespace {

const char* const kSteps =
    "Resize, CenterCrop, RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize (docs/image-folders.md)";

// One argument: `key=` (empty key when positional) and its value, a number, a word or a tuple.
struct Arg {
  std::string key;
  std::string text;                 // the value as written, for messages
  std::vector<double> numbers;      // a number (one) or a tuple
  bool tuple = false;
  std::string word;                 // a word, when not a number or tuple
};

struct Call {
  std::string name;
  std::vector<Arg> args;
};

// The text without spaces, read left to right; errors quote the flag and the whole value.
class Reader {
 public:
  Reader(const std::string& flag, const std::string& text) : flag_(flag), text_(text) {
    for (char c : text)
      if (!std::isspace(static_cast<unsigned char>(c))) s_ += c;
  }
  template <class... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    fail(flag_, " \"", text_, "\": ", parts...);
  }
  bool done() const { return at_ == s_.size(); }
  bool take(char c) {
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c, const std::string& where) {
    if (!take(c)) error("expected '", c, "' ", where, at_ < s_.size() ? " at \"" + s_.substr(at_) + "\"" : " at the end");
  }
  std::string token() {  // letters, digits, '.', '+', '-', '_'
    const size_t from = at_;
    while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '.' ||
                               s_[at_] == '-' || s_[at_] == '+' || s_[at_] == '_'))
      ++at_;
    return s_.substr(from, at_ - from);
  }
  size_t at() const { return at_; }
  std::string since(size_t from) const { return s_.substr(from, at_ - from); }

 private:
  std::string flag_, text_, s_;
  size_t at_ = 0;
};

std::optional<double> number(const std::string& t) {
  if (t.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

Arg read_arg(Reader& r, const std::string& step) {
  Arg a;
  size_t from = r.at();
  std::string first = r.token();
  if (!first.empty() && r.take('=')) {
    a.key = first;
    from = r.at();
    first = r.token();
  }
  if (first.empty()) {
    r.expect('(', "for a value of " + step + " (a number, a word or a tuple (n,n))");
    a.tuple = true;
    do {
      const std::string t = r.token();
      const std::optional<double> v = number(t);
      if (!v) r.error(step, ": \"", t, "\" in a tuple is not a number");
      a.numbers.push_back(*v);
    } while (r.take(','));
    r.expect(')', "to close a tuple of " + step);
  } else if (const std::optional<double> v = number(first)) {
    a.numbers.push_back(*v);
  } else {
    a.word = first;
  }
  a.text = r.since(from);
  return a;
}

std::vector<Call> read_calls(Reader& r) {
  std::vector<Call> calls;
  do {
    Call c;
    c.name = r.token();
    if (c.name.empty()) r.error("expected a transform, one of ", kSteps);
    r.expect('(', "after " + c.name + " (every step takes parentheses, e.g. ToTensor())");
    if (!r.take(')')) {
      do c.args.push_back(read_arg(r, c.name));
      while (r.take(','));
      r.expect(')', "to close " + c.name + "(...)");
    }
    calls.push_back(std::move(c));
  } while (r.take(','));
  if (!r.done()) r.error("unexpected text after the last transform");
  return calls;
}

// The arguments of one call by position or key, each used once.
class Args {
 public:
  Args(const Reader& r, const Call& c, std::vector<std::string> names)
      : r_(r), c_(c), names_(std::move(names)), given_(names_.size(), nullptr) {
    for (size_t i = 0; i < c.args.size(); ++i) {
      const Arg& a = c.args[i];
      size_t slot = i;
      if (!a.key.empty()) {
        slot = 0;
        while (slot < names_.size() && names_[slot] != a.key) ++slot;
        if (slot == names_.size()) r.error(c.name, " has no argument \"", a.key, "\"", expected());
      } else if (i >= names_.size()) {
        r.error(c.name, " takes ", names_.size(), " argument", names_.size() == 1 ? "" : "s", expected(), ", got ",
                c.args.size());
      }
      if (given_[slot]) r.error(c.name, ": ", names_[slot], " is given twice");
      given_[slot] = &a;
    }
  }
  const Arg* get(size_t slot) const { return given_[slot]; }
  const Arg& required(size_t slot) const {
    if (!given_[slot]) r_.error(c_.name, " needs its ", names_[slot], " (", c_.name, "(", names_[slot], "))");
    return *given_[slot];
  }
  [[noreturn]] void bad(size_t slot, const std::string& why) const {
    r_.error(c_.name, ": ", names_[slot], " \"", given_[slot]->text, "\" ", why);
  }

 private:
  std::string expected() const {
    if (names_.empty()) return " (it takes none)";
    std::string s;
    for (const std::string& n : names_) s += (s.empty() ? " (" : ", ") + n;
    return s + ")";
  }
  const Reader& r_;
  const Call& c_;
  std::vector<std::string> names_;
  std::vector<const Arg*> given_;
};

int64_t whole(const Args& args, size_t slot, double v) {
  if (!(v >= 1 && v == std::floor(v) && v < 1e9)) args.bad(slot, "is not a whole number of pixels of at least 1");
  return int64_t(v);
}

// n (returned as {n, 0}: the caller says what one number means) or (h,w).
Extent read_size(const Args& args, size_t slot) {
  const Arg& a = args.required(slot);
  if (!a.word.empty() || a.numbers.empty() || a.numbers.size() > 2)
    args.bad(slot, "is not a size (n or (h,w))");
  if (a.numbers.size() == 1) {
    const int64_t n = whole(args, slot, a.numbers[0]);
    return {n, 0};
  }
  return {whole(args, slot, a.numbers[0]), whole(args, slot, a.numbers[1])};
}

std::pair<double, double> read_range(const Args& args, size_t slot, std::pair<double, double> fallback) {
  const Arg* a = args.get(slot);
  if (!a) return fallback;
  if (!a->tuple || a->numbers.size() != 2) args.bad(slot, "is not a range (lo,hi)");
  if (!(a->numbers[0] > 0 && a->numbers[0] <= a->numbers[1]))
    args.bad(slot, "is not a range with 0 < lo <= hi");
  return {a->numbers[0], a->numbers[1]};
}

std::array<float, 3> read_triple(const Args& args, size_t slot, bool positive) {
  const Arg& a = args.required(slot);
  if (!a.tuple || a.numbers.size() != 3) args.bad(slot, "is not three numbers (r,g,b), one per channel");
  std::array<float, 3> v{};
  for (size_t c = 0; c < 3; ++c) {
    if (positive && !(a.numbers[c] > 0)) args.bad(slot, "has a value that is not positive");
    v[c] = float(a.numbers[c]);
  }
  return v;
}

TransformStep read_step(const Reader& r, const Call& c) {
  using Kind = TransformStep::Kind;
  TransformStep s;
  if (c.name == "Resize") {
    s.kind = Kind::resize;
    const Args args(r, c, {"size"});
    const Extent e = read_size(args, 0);
    s.resize = {e.h, e.w};
  } else if (c.name == "CenterCrop") {
    s.kind = Kind::center_crop;
    const Args args(r, c, {"size"});
    s.size = read_size(args, 0);
    if (s.size.w == 0) s.size.w = s.size.h;
  } else if (c.name == "RandomResizedCrop") {
    s.kind = Kind::random_resized_crop;
    const Args args(r, c, {"size", "scale", "ratio"});
    s.size = read_size(args, 0);
    if (s.size.w == 0) s.size.w = s.size.h;
    const auto [slo, shi] = read_range(args, 1, {0.08, 1.0});
    const auto [rlo, rhi] = read_range(args, 2, {3.0 / 4.0, 4.0 / 3.0});
    s.range = {slo, shi, rlo, rhi};
  } else if (c.name == "RandomHorizontalFlip") {
    s.kind = Kind::random_horizontal_flip;
    const Args args(r, c, {"p"});
    if (const Arg* p = args.get(0)) {
      if (p->tuple || p->numbers.size() != 1 || !(p->numbers[0] >= 0 && p->numbers[0] <= 1))
        args.bad(0, "is not a probability in [0, 1]");
      s.p = p->numbers[0];
    }
  } else if (c.name == "ToTensor") {
    s.kind = Kind::to_tensor;
    const Args args(r, c, {});
  } else if (c.name == "Normalize") {
    s.kind = Kind::normalize;
    const Args args(r, c, {"mean", "std"});
    const Arg& mean = args.required(0);
    if (mean.word == "imagenet") {
      if (args.get(1)) r.error("Normalize(imagenet) takes no std: imagenet names both");
      s.mean = {0.485f, 0.456f, 0.406f};
      s.std = {0.229f, 0.224f, 0.225f};
    } else {
      if (!mean.word.empty()) args.bad(0, "is not imagenet or three numbers (r,g,b)");
      s.mean = read_triple(args, 0, false);
      s.std = read_triple(args, 1, true);
    }
  } else {
    r.error("unknown transform \"", c.name, "\"; expected one of ", kSteps);
  }
  return s;
}

}  // namespace

bool TransformSpec::random() const {
  for (const TransformStep& s : steps)
    if (s.kind == TransformStep::Kind::random_resized_crop || s.kind == TransformStep::Kind::random_horizontal_flip)
      return true;
  return false;
}

bool TransformSpec::normalizes() const {
  return !steps.empty() && steps.back().kind == TransformStep::Kind::normalize;
}

std::optional<Extent> TransformSpec::output_extent() const {
  std::optional<Extent> extent;
  for (const TransformStep& s : steps) {
    if (s.kind == TransformStep::Kind::resize)
      extent = s.resize.shorter_side() ? std::nullopt : std::optional<Extent>(Extent{s.resize.h, s.resize.w});
    else if (s.kind == TransformStep::Kind::center_crop || s.kind == TransformStep::Kind::random_resized_crop)
      extent = s.size;
  }
  return extent;
}

TransformSpec parse_transform_spec(const std::string& flag, const std::string& text) {
  using Kind = TransformStep::Kind;
  Reader r(flag, text);
  TransformSpec spec;
  spec.flag = flag;
  spec.text = text;
  const std::vector<Call> calls = read_calls(r);
  bool tensor = false, normalized = false;
  for (const Call& c : calls) {
    const TransformStep s = read_step(r, c);
    if (normalized) r.error(c.name, " after Normalize: Normalize comes last");
    if (s.kind == Kind::to_tensor) {
      if (tensor) r.error("ToTensor() is given twice");
      tensor = true;
    } else if (s.kind == Kind::normalize) {
      if (!tensor) r.error("Normalize before ToTensor(): it works on the tensor");
      normalized = true;
    } else if (tensor) {
      r.error(c.name, " after ToTensor(): the image steps come before it (they work on the 8-bit image)");
    }
    spec.steps.push_back(s);
  }
  if (!tensor) r.error("no ToTensor(): the steps must end with ToTensor() (and optionally Normalize)");
  return spec;
}

void apply_transforms(const TransformSpec& spec, const RgbImage& image, const TransformKey& key,
                      std::vector<float>& out, Extent& extent) {
  using Kind = TransformStep::Kind;
  Generator draws(sample_seed(key.seed, kTransformStream, uint64_t(key.epoch), uint64_t(key.index)));
  RgbImage im = image;
  for (const TransformStep& s : spec.steps) {
    switch (s.kind) {
      case Kind::resize:
        im = resize(im, s.resize);
        break;
      case Kind::center_crop:
        im = center_crop(im, s.size);
        break;
      case Kind::random_resized_crop:
        im = resize_bilinear(crop(im, random_resized_crop_box(im.h, im.w, s.range, draws)), s.size.h, s.size.w);
        break;
      case Kind::random_horizontal_flip:
        if (draws.uniform() < s.p) im = flip_horizontal(im);
        break;
      case Kind::to_tensor:
        extent = {im.h, im.w};
        out.resize(size_t(3 * im.h * im.w));
        to_tensor(im, out.data());
        break;
      case Kind::normalize:
        normalize_tensor(out.data(), im.h * im.w, s.mean.data(), s.std.data());
        break;
    }
  }
}

}  // namespace dpcore::data
