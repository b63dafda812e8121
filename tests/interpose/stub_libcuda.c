/* A stand-in for libcuda.so.1 on machines without a driver, for the LD_PRELOAD tests: it
 * exports the entry points the tests look up, and every one of them reports that there is
 * no device. If cudalloc's hooks work, none of these allocation functions is ever reached
 * while cudalloc serves memory. */
#include <stddef.h>
#include <string.h>

#define NO_DEVICE 100
#define NOT_FOUND 500

int cuInit(unsigned flags) { (void)flags; return NO_DEVICE; }
int cuDriverGetVersion(int* version) { *version = 13000; return 0; }
int cuMemAlloc_v2(unsigned long long* p, size_t n) { (void)p; (void)n; return NO_DEVICE; }
int cuMemFree_v2(unsigned long long p) { (void)p; return NO_DEVICE; }
/* The other entry points cudalloc hooks: dlsym answers with cudalloc's only for a symbol the
 * real library has. */
int cuMemAllocAsync(unsigned long long* p, size_t n, void* s) {
  (void)p;
  (void)n;
  return s == (void*)0xca97 ? 801 : NO_DEVICE;
}
int cuMemAllocAsync_ptsz(unsigned long long* p, size_t n, void* s) { return cuMemAllocAsync(p, n, s); }
int cuMemFreeAsync(unsigned long long p, void* s) { (void)p; return s == (void*)0xca97 ? 801 : NO_DEVICE; }
int cuMemFreeAsync_ptsz(unsigned long long p, void* s) { return cuMemFreeAsync(p, s); }
int cuMemAllocPitch_v2(unsigned long long* p, size_t* pitch, size_t w, size_t h, unsigned e) {
  (void)p; (void)pitch; (void)w; (void)h; (void)e;
  return NO_DEVICE;
}
int cuMemGetInfo_v2(size_t* f, size_t* t) { (void)f; (void)t; return NO_DEVICE; }
int cuGetErrorName(int e, const char** s) { (void)e; *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
/* Stream capture: the stream whose handle is STUB_CAPTURING_STREAM is "being captured"
 * (preload_test capture); stub allocations on it answer STUB_GRAPH_NODE, so a test sees that
 * cudalloc passed the call to the driver. */
#define STUB_CAPTURING_STREAM ((void*)0xca97)
#define STUB_GRAPH_NODE 801
int cuStreamIsCapturing(void* stream, int* status) {
  *status = stream == STUB_CAPTURING_STREAM ? 1 : 0;
  return 0;
}

/* Streams and capture, for preload_test capture: a created stream is 0x5000, captures begin
 * and end without complaint. */
int cuStreamCreate(void** stream, unsigned flags) { (void)flags; *stream = (void*)0x5000; return 0; }
int cuStreamDestroy_v2(void* stream) { (void)stream; return 0; }
int cuStreamBeginCapture_v2(void* stream, int mode) { (void)stream; (void)mode; return 0; }
int cuStreamEndCapture(void* stream, void** graph) { (void)stream; *graph = NULL; return 0; }
int cuStreamBeginCaptureToGraph(void* stream, void* graph, const void* deps, const void* data,
                                unsigned long count, int mode) {
  (void)stream; (void)graph; (void)deps; (void)data; (void)count; (void)mode;
  return 0;
}

/* The private interface every CUDA runtime asks for (preload_test hidden_runtime looks it
 * up from the test program, as a runtime linked into it would). */
int cuGetExportTable(const void** table, const void* id) {
  (void)id;
  *table = NULL;
  return 1;
}

static void* lookup(const char* symbol) {
  if (strcmp(symbol, "cuInit") == 0) return (void*)&cuInit;
  if (strcmp(symbol, "cuDriverGetVersion") == 0) return (void*)&cuDriverGetVersion;
  if (strcmp(symbol, "cuMemAlloc") == 0) return (void*)&cuMemAlloc_v2;
  if (strcmp(symbol, "cuMemFree") == 0) return (void*)&cuMemFree_v2;
  if (strcmp(symbol, "cuMemAllocAsync") == 0) return (void*)&cuMemAllocAsync;
  if (strcmp(symbol, "cuMemFreeAsync") == 0) return (void*)&cuMemFreeAsync;
  if (strcmp(symbol, "cuMemAllocPitch") == 0) return (void*)&cuMemAllocPitch_v2;
  if (strcmp(symbol, "cuMemGetInfo") == 0) return (void*)&cuMemGetInfo_v2;
  if (strcmp(symbol, "cuGetErrorName") == 0) return (void*)&cuGetErrorName;
  if (strcmp(symbol, "cuStreamIsCapturing") == 0) return (void*)&cuStreamIsCapturing;
  if (strcmp(symbol, "cuStreamCreate") == 0) return (void*)&cuStreamCreate;
  if (strcmp(symbol, "cuStreamDestroy") == 0) return (void*)&cuStreamDestroy_v2;
  if (strcmp(symbol, "cuStreamBeginCapture") == 0) return (void*)&cuStreamBeginCapture_v2;
  if (strcmp(symbol, "cuStreamEndCapture") == 0) return (void*)&cuStreamEndCapture;
  if (strcmp(symbol, "cuStreamBeginCaptureToGraph") == 0) return (void*)&cuStreamBeginCaptureToGraph;
  return NULL;
}

int cuGetProcAddress_v2(const char* symbol, void** fn, int version, unsigned long long flags,
                        int* status) {
  (void)version;
  (void)flags;
  *fn = lookup(symbol);
  if (status) *status = *fn ? 0 : 1;
  return *fn ? 0 : NOT_FOUND;
}

int cuGetProcAddress(const char* symbol, void** fn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, fn, version, flags, NULL);
}
