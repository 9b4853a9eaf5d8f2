/* An NVTX injection library of our own (Nsight Systems may be missing where the tests run): NVTX loads it
 * from NVTX_INJECTION64_PATH at a process's first NVTX call, and it appends one line per range event to the
 * file named by NVTX_LOG_FILE (stderr without it):
 *     <push|pop|start|end> <pid> <domain> <range id> <int64 payload or -> <message>
 * Lines are written whole with O_APPEND, so ranks and threads may share one file. Built by
 * tests/infra/nvtx_log.py; read by tests/infra/test_nvtx_ranges.py. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

static int log_fd = -1;
static atomic_ullong next_id = 1;

static void emit(const char* kind, const char* domain, unsigned long long id, const nvtxEventAttributes_t* a) {
  char line[1024], payload[32] = "-";
  const char* msg = "";
  if (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii) msg = a->message.ascii;
  if (a && (a->payloadType == NVTX_PAYLOAD_TYPE_INT64 || a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64))
    snprintf(payload, sizeof payload, "%lld", (long long)a->payload.llValue);
  int n = snprintf(line, sizeof line, "%s %d %s %llu %s %s\n", kind, (int)getpid(), domain ? domain : "-", id,
                   payload, msg);
  if (n > (int)sizeof line - 1) {
    n = (int)sizeof line;
    line[n - 1] = '\n';
  }
  if (log_fd >= 0 && write(log_fd, line, (size_t)n) < 0) return;
}

/* A domain handle is its name, so that each line can say which domain the range belongs to. */
static nvtxDomainHandle_t domain_create(const char* name) { return (nvtxDomainHandle_t)strdup(name ? name : "?"); }
static int domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  emit("push", (const char*)d, 0, a);
  return 0;
}
static int domain_pop(nvtxDomainHandle_t d) {
  emit("pop", (const char*)d, 0, NULL);
  return 0;
}
static nvtxRangeId_t domain_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  unsigned long long id = atomic_fetch_add(&next_id, 1);
  emit("start", (const char*)d, id, a);
  return id;
}
static void domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) { emit("end", (const char*)d, id, NULL); }
/* The default domain (nvtxRangePushA and friends). */
static int push_ex(const nvtxEventAttributes_t* a) { return domain_push(NULL, a); }
static int push_a(const char* message) {
  nvtxEventAttributes_t a = {0};
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  return domain_push(NULL, &a);
}
static int pop(void) { return domain_pop(NULL); }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t* a) { return domain_start(NULL, a); }
static void end(nvtxRangeId_t id) { domain_end(NULL, id); }

#define SET(table, size, index, fn) \
  if ((unsigned)(index) < (size) && (table)[index]) *(table)[index] = (NvtxFunctionPointer)(fn)

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  /* called once per library that uses NVTX (each has its own copy of NVTX's state): open the log once */
  if (log_fd < 0) {
    const char* path = getenv("NVTX_LOG_FILE");
    log_fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : dup(2);
  }
  const NvtxExportTableCallbacks* cb = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable core = NULL, core2 = NULL;
  unsigned int n_core = 0, n_core2 = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n_core) ||
      !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n_core2))
    return 0;
  SET(core, n_core, NVTX_CBID_CORE_RangePushEx, push_ex);
  SET(core, n_core, NVTX_CBID_CORE_RangePushA, push_a);
  SET(core, n_core, NVTX_CBID_CORE_RangePop, pop);
  SET(core, n_core, NVTX_CBID_CORE_RangeStartEx, start_ex);
  SET(core, n_core, NVTX_CBID_CORE_RangeEnd, end);
  SET(core2, n_core2, NVTX_CBID_CORE2_DomainCreateA, domain_create);
  SET(core2, n_core2, NVTX_CBID_CORE2_DomainRangePushEx, domain_push);
  SET(core2, n_core2, NVTX_CBID_CORE2_DomainRangePop, domain_pop);
  SET(core2, n_core2, NVTX_CBID_CORE2_DomainRangeStartEx, domain_start);
  SET(core2, n_core2, NVTX_CBID_CORE2_DomainRangeEnd, domain_end);
  return 1;
}
