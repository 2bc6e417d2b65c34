// A stand-in for Nsight Systems: an NVTX injection library (loaded by NVTX from
// NVTX_INJECTION64_PATH at a process's first NVTX call, as profilers are) that writes every
// domain, range push and pop and thread name it is given, one line each, to the file named
// by NVTX_RECORD_FILE. cli_nvtx_test runs `dpcore train --nvtx` under it.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <nvtx3/nvToolsExt.h>

namespace {

struct Domain {
  std::string name;
};

// One write() per line, to a file opened for appending: lines of several threads never mix.
void record(const std::string& line) {
  static const int fd = open(std::getenv("NVTX_RECORD_FILE"), O_WRONLY | O_CREAT | O_APPEND, 0644);
  const std::string text = line + "\n";
  if (fd >= 0 && write(fd, text.data(), text.size()) < 0) std::abort();
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  record(std::string("domain ") + name);
  return reinterpret_cast<nvtxDomainHandle_t>(new Domain{name});
}

int NVTX_API range_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  const std::string in = domain ? reinterpret_cast<Domain*>(domain)->name : "(none)";
  record("push " + in + " " + (attributes->messageType == NVTX_MESSAGE_TYPE_ASCII ? attributes->message.ascii : "?"));
  return 0;
}

int NVTX_API range_pop(nvtxDomainHandle_t domain) {
  record("pop " + (domain ? reinterpret_cast<Domain*>(domain)->name : std::string("(none)")));
  return 0;
}

void NVTX_API name_thread(uint32_t, const char* name) { record(std::string("thread ") + name); }

// Puts `fn` at `id` of NVTX's table for `module`; false when the table has no such entry.
template <class Fn>
bool install(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module, unsigned id, Fn fn) {
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(module, &table, &size) || id >= size) return false;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  return true;
}

}  // namespace

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  return callbacks && install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, &domain_create) &&
         install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, &range_push) &&
         install(callbacks, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, &range_pop) &&
         install(callbacks, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_NameOsThreadA, &name_thread);
}
