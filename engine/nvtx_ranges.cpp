// Trace spans as NVTX ranges (engine/trace.h's SpanListener), compiled with the CUDA
// backend: Nsight Systems then shows dpcore's names ("forward conv(...)", "allreduce
// bucket 3") on each thread's row above the kernels they launched. NVTX costs a branch per
// call when no tool is attached; the spans are made only while --nvtx (trace::listen) is on.
#include <sys/syscall.h>
#include <unistd.h>

#include <functional>
#include <nvtx3/nvToolsExt.h>

#include "engine/trace.h"

namespace dpcore {
namespace {

class NvtxRanges : public trace::SpanListener {
 public:
  void open(const char* category, const std::string& name) override {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    // One colour per category ("step", "layer", "comm", "wait"), so that kinds of work
    // tell apart at a glance.
    attributes.colorType = NVTX_COLOR_ARGB;
    attributes.color = 0xff000000u | uint32_t(std::hash<std::string>{}(category) & 0xffffffu);
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = name.c_str();
    nvtxDomainRangePushEx(domain(), &attributes);
  }
  void close() override { nvtxDomainRangePop(domain()); }
  void lane_named(const std::string& name) override { nvtxNameOsThreadA(uint32_t(syscall(SYS_gettid)), name.c_str()); }

 private:
  // Created at the first range, not at load time: a process that never profiles never
  // calls NVTX at all.
  static nvtxDomainHandle_t domain() {
    static const nvtxDomainHandle_t handle = nvtxDomainCreateA("dpcore");
    return handle;
  }
};

NvtxRanges nvtx_ranges;
const bool installed = (trace::set_listener(&nvtx_ranges), true);

}  // namespace
}  // namespace dpcore
