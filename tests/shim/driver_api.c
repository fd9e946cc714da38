/*
 * A CUDA driver-API program, written against NVIDIA's cuda.h and linked
 * with -lcuda. pvgpu runs it unchanged against its drop-in libcuda.so.1;
 * the same source runs natively on a GPU machine for comparison.
 *
 *   cc -I<cuda include> driver_api.c -o driver_api -lcuda
 *   ./driver_api kernels.ptx
 *   ./driver_api kernels.ptx --lost-backend
 *
 * With --lost-second-backend (PVGPU_BACKEND listing two backends) it does
 * the same on a device of each, and then checks that the second's calls
 * fail and the first's go on.
 * With --lost-backend it sets up a context, prints READY, waits for a line
 * on stdin (the test kills the backend meanwhile) and checks that calls then
 * fail with CUDA_ERROR_DEVICE_UNAVAILABLE instead of hanging.
 *
 * Prints one line per check and "PASS" at the end; exits 1 at the first
 * failure.
 */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(call)                                                                  \
    do {                                                                             \
        CUresult r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) {                                                    \
            const char *n_ = NULL;                                                   \
            cuGetErrorName(r_, &n_);                                                 \
            printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #call, (int)r_,   \
                   n_ ? n_ : "?");                                                   \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define EXPECT(cond, what)                                                           \
    do {                                                                             \
        if (!(cond)) {                                                               \
            printf("FAIL %s:%d %s\n", __FILE__, __LINE__, what);                     \
            exit(1);                                                                 \
        }                                                                            \
        printf("ok   %s\n", what);                                                   \
    } while (0)

static size_t no_smem(int block_size) { (void)block_size; return 0; }

/* The driver's private table cuFFT finds the kernels of its modules with:
 * slot 7 visits each kernel of a module (function and name) and returns
 * their number. */
static const CUuuid MODULE_KERNELS = {{(char)0x6e, 0x16, 0x3f, (char)0xbe, (char)0xb9, 0x58, 0x44, 0x4d,
                                       (char)0x83, 0x5c, (char)0xe1, (char)0x82, (char)0xaf, (char)0xf1, (char)0x99, 0x1e}};
typedef void (*visit_fn)(void *user, CUfunction f, const char *name);
typedef int (*each_kernel_fn)(CUcontext ctx, CUmodule m, visit_fn visit, void *user);

struct visited { int n; CUfunction f[16]; const char *name[16]; };

static void visit(void *user, CUfunction f, const char *name) {
    struct visited *v = user;
    if (v->n < 16) { v->f[v->n] = f; v->name[v->n] = name; }
    v->n++;
}

/* cuLinkCreate .. cuLinkDestroy with log buffers: the linked image loads
 * and holds the input's kernels and globals; a bad input fails with an
 * error log. */
static void check_link(const char *ptx) {
    char info[2048] = {0}, error[2048] = {0};
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME, CU_JIT_OPTIMIZATION_LEVEL};
    void *vals[] = {info, (void *)sizeof info, error, (void *)sizeof error, NULL, (void *)3};
    CUlinkState st;
    CHECK(cuLinkCreate(6, opts, vals, &st));
    CHECK(cuLinkAddData(st, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, "kernels.ptx", 0, NULL, NULL));
    void *image = NULL;
    size_t size = 0;
    CHECK(cuLinkComplete(st, &image, &size));
    EXPECT(image != NULL && size > 0, "cuLinkComplete gives an image");
    EXPECT((size_t)vals[1] >= 1 && (size_t)vals[1] <= sizeof info && (size_t)vals[3] >= 1, "log sizes written back");
    CUmodule linked;
    CHECK(cuModuleLoadData(&linked, image));
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, linked, "saxpy"));
    CUdeviceptr scale;
    size_t bytes = 0;
    float s = 0;
    CHECK(cuModuleGetGlobal(&scale, &bytes, linked, "pvgpu_scale"));
    CHECK(cuMemcpyDtoH(&s, scale, sizeof s));
    EXPECT(s == 3.0f, "the linked module holds the input's kernels and initialised globals");
    CHECK(cuModuleUnload(linked));
    CHECK(cuLinkDestroy(st));
    EXPECT(cuLinkDestroy(st) == CUDA_ERROR_INVALID_HANDLE, "a destroyed link state is refused");

    error[0] = 0;
    vals[3] = (void *)sizeof error;
    CHECK(cuLinkCreate(4, opts, vals, &st));
    const char bad[] = "this is not PTX";
    CHECK(cuLinkAddData(st, CU_JIT_INPUT_PTX, (void *)bad, sizeof bad, "bad.ptx", 0, NULL, NULL));
    EXPECT(cuLinkComplete(st, &image, &size) != CUDA_SUCCESS && error[0] != 0, "a bad input fails to link, with an error log");
    CHECK(cuLinkDestroy(st));
}

/* Slot 7 answers what cuModuleEnumerateFunctions and cuFuncGetName do. */
static void check_module_kernels(CUcontext ctx, CUmodule mod) {
    const void *table = NULL;
    CHECK(cuGetExportTable(&table, &MODULE_KERNELS));
    EXPECT(((const size_t *)table)[0] >= 8 * 8, "module-kernels table: size");
    each_kernel_fn each = (each_kernel_fn)((void *const *)table)[7];
    unsigned count = 0;
    CHECK(cuModuleGetFunctionCount(&count, mod));
    CUfunction fs[16];
    EXPECT(count > 1 && count <= 16, "cuModuleGetFunctionCount");
    CHECK(cuModuleEnumerateFunctions(fs, count, mod));
    EXPECT(each(ctx, mod, NULL, NULL) == (int)count, "module-kernels table: count without a visitor");
    struct visited v = {0};
    EXPECT(each(ctx, mod, visit, &v) == (int)count && v.n == (int)count, "module-kernels table: count with a visitor");
    int same = 1;
    for (unsigned i = 0; i < count; i++) {
        const char *name = NULL;
        CHECK(cuFuncGetName(&name, fs[i]));
        same &= v.f[i] == fs[i] && v.name[i] == name && strlen(name) > 0;
    }
    EXPECT(same, "module-kernels table: the functions and names of cuModuleEnumerateFunctions, in its order");
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { printf("FAIL cannot open %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n + 1);
    if (fread(buf, 1, n, f) != (size_t)n) { printf("FAIL short read\n"); exit(1); }
    buf[n] = 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 2) { printf("usage: %s kernels.ptx\n", argv[0]); return 2; }
    char *ptx = read_file(argv[1]);

    int version = 0;
    CHECK(cuDriverGetVersion(&version));
    EXPECT(version >= 12000, "cuDriverGetVersion");
    EXPECT(cuDeviceGetCount(&version) == CUDA_ERROR_NOT_INITIALIZED, "calls before cuInit fail");
    CHECK(cuInit(0));

    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    EXPECT(count >= 1, "cuDeviceGetCount");
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    char name[256];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    printf("     device 0: %s\n", name);
    size_t total = 0;
    CHECK(cuDeviceTotalMem(&total, dev));
    int warp = 0, major = 0;
    CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    EXPECT(total > 0 && warp == 32 && major >= 7, "device name, memory and attributes");
    CUuuid uuid;
    CHECK(cuDeviceGetUuid(&uuid, dev));

    if (argc > 2 && strcmp(argv[2], "--lost-second-backend") == 0) {
        /* Two backends, a device each; the test kills the second. */
        int n = 0;
        CHECK(cuDeviceGetCount(&n));
        EXPECT(n == 2, "two backends, a device each");
        CUdevice d1;
        CHECK(cuDeviceGet(&d1, 1));
        CUcontext c0, c1;
        CUdeviceptr p0, p1;
        CHECK(cuCtxCreate(&c0, NULL, 0, dev));
        CHECK(cuMemAlloc(&p0, 4096));
        CHECK(cuCtxCreate(&c1, NULL, 0, d1));
        CHECK(cuMemAlloc(&p1, 4096));
        printf("READY\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        EXPECT(cuMemAlloc(&p1, 4096) == CUDA_ERROR_DEVICE_UNAVAILABLE, "the lost backend's device is unavailable");
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemsetD32(p0, 7, 1024));
        unsigned int back[1024];
        CHECK(cuMemcpyDtoH(back, p0, sizeof back));
        EXPECT(back[0] == 7 && back[1023] == 7, "the other backend's device goes on");
        printf("PASS\n");
        return 0;
    }
    CUcontext ctx, cur;
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    if (argc > 2 && strcmp(argv[2], "--lost-backend") == 0) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 4096));
        printf("READY\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 2;
        EXPECT(cuMemAlloc(&p, 4096) == CUDA_ERROR_DEVICE_UNAVAILABLE, "a lost backend is CUDA_ERROR_DEVICE_UNAVAILABLE");
        EXPECT(cuCtxSynchronize() == CUDA_ERROR_DEVICE_UNAVAILABLE, "and stays so");
        printf("PASS\n");
        return 0;
    }
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx, "cuCtxCreate makes the context current");
    CHECK(cuCtxPushCurrent(ctx));
    CHECK(cuCtxPopCurrent(&cur));
    EXPECT(cur == ctx, "context stack push/pop");
    CUdevice cdev;
    CHECK(cuCtxGetDevice(&cdev));
    EXPECT(cdev == dev, "cuCtxGetDevice");

    CUmodule mod;
    CHECK(cuModuleLoadData(&mod, ptx));
    CUfunction matsum, saxpy;
    CHECK(cuModuleGetFunction(&matsum, mod, "mat_sum"));
    CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
    check_module_kernels(ctx, mod);
    check_link(ptx);
    size_t off = 0, sz = 0;
    CHECK(cuFuncGetParamInfo(matsum, 3, &off, &sz));
    EXPECT(off == 24 && sz == 4, "cuFuncGetParamInfo");
    CUdeviceptr scale;
    size_t scale_bytes = 0;
    CHECK(cuModuleGetGlobal(&scale, &scale_bytes, mod, "pvgpu_scale"));
    float s = 0;
    CHECK(cuMemcpyDtoH(&s, scale, sizeof s));
    EXPECT(scale_bytes == 4 && s == 3.0f, "cuModuleGetGlobal reads a __device__ global");

    const int n = 100000;
    size_t bytes = n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int i = 0; i < n; i++) { a[i] = (float)i; b[i] = 2.0f * i; }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, bytes));
    CHECK(cuMemAlloc(&db, bytes));
    CHECK(cuMemAlloc(&dc, bytes));
    CHECK(cuMemcpyHtoD(da, a, bytes));
    CHECK(cuMemcpyHtoD(db, b, bytes));
    void *args[] = {&da, &db, &dc, (void *)&n};
    CHECK(cuLaunchKernel(matsum, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= c[i] == 3.0f * i;
    EXPECT(ok, "MatSum through cuLaunchKernel(kernelParams)");

    /* saxpy with the extra (packed buffer) form: float a; float *x; float *y; int n */
    struct { float a; int pad; CUdeviceptr x, y; int n; } packed = {0.5f, 0, da, dc, n};
    size_t packed_size = 28; /* the kernel's parameter bytes: offsetof(n) + 4 */
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size, CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    ok = 1;
    for (int i = 0; i < n; i++) ok &= c[i] == 3.5f * i;
    EXPECT(ok, "saxpy through cuLaunchKernel(extra)");

    int min_grid = 0, block = 0, active = 0;
    CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, matsum, no_smem, 0, 0));
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&active, matsum, block, 0));
    EXPECT(block > 0 && block <= 1024 && active > 0 && min_grid > 0, "occupancy calculator (with a shared-memory callback)");

    CUstream st;
    CUevent e0, e1;
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    float *pinned = NULL;
    CHECK(cuMemAllocHost((void **)&pinned, bytes));
    for (int i = 0; i < n; i++) pinned[i] = 1.0f;
    CHECK(cuEventRecord(e0, st));
    CHECK(cuMemcpyHtoDAsync(db, pinned, bytes, st));
    CHECK(cuLaunchKernel(matsum, (n + 255) / 256, 1, 1, 256, 1, 1, 0, st, args, NULL));
    CHECK(cuStreamSynchronize(st));
    memset(pinned, 0, bytes);
    CHECK(cuMemcpyDtoHAsync(pinned, dc, bytes, st));
    CHECK(cuEventRecord(e1, st));
    CHECK(cuEventSynchronize(e1));
    float ms = -1;
    CHECK(cuEventElapsedTime(&ms, e0, e1));
    ok = 1;
    for (int i = 0; i < n; i++) ok &= pinned[i] == (float)i + 1.0f;
    EXPECT(ok && ms >= 0, "streams, events, async copies through cuMemAllocHost memory");
    CHECK(cuStreamQuery(st));

    EXPECT(cuMemcpyDtoH(c, dc + bytes, 16) == CUDA_ERROR_INVALID_VALUE, "out-of-range copy is refused");
    /* CUDA arrays are not remoted by pvgpu: the call must say so with a
       CUresult (and works natively). */
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR desc = {16, 16, CU_AD_FORMAT_FLOAT, 1};
    CUresult ar = cuArrayCreate(&arr, &desc);
    if (ar == CUDA_SUCCESS) CHECK(cuArrayDestroy(arr));
    EXPECT(ar == CUDA_SUCCESS || ar == CUDA_ERROR_NOT_SUPPORTED, "calls pvgpu does not implement return CUDA_ERROR_NOT_SUPPORTED");
    const char *ename = NULL;
    CHECK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &ename));
    EXPECT(strcmp(ename, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0, "cuGetErrorName");

    void *fp = NULL;
    CUdriverProcAddressQueryResult qr;
    CHECK(cuGetProcAddress("cuMemAlloc", &fp, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &qr));
    CUdeviceptr dx;
    CHECK(((CUresult(*)(CUdeviceptr *, size_t))fp)(&dx, 64));
    EXPECT(qr == CU_GET_PROC_ADDRESS_SUCCESS && dx != 0, "cuGetProcAddress entry point works");
    /* As the driver does: success, a null entry point, the reason in qr. */
    EXPECT(cuGetProcAddress("cuNoSuchThing", &fp, 13000, 0, &qr) == CUDA_SUCCESS && qr == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fp == NULL,
           "cuGetProcAddress reports unknown symbols");
    EXPECT(cuGetProcAddress("cuMemAlloc", &fp, 1000, 0, &qr) == CUDA_SUCCESS && qr == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fp == NULL,
           "cuGetProcAddress reports versions too old for a symbol");

    /* Virtual memory management, as vectorAddMMAP does it: a reservation
       with two physical allocations mapped side by side. */
    int vmm = 0;
    CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(vmm == 1 && gran > 0 && (gran & (gran - 1)) == 0, "virtual memory management supported, granularity a power of two");
    CUdeviceptr va;
    CUmemGenericAllocationHandle h0, h1;
    CHECK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    CHECK(cuMemCreate(&h0, gran, &prop, 0));
    CHECK(cuMemCreate(&h1, gran, &prop, 0));
    CHECK(cuMemMap(va, gran, 0, h0, 0));
    CHECK(cuMemMap(va + gran, gran, 0, h1, 0));
    CHECK(cuMemRelease(h0));
    CHECK(cuMemRelease(h1));
    CUmemAccessDesc access;
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(va, 2 * gran, &access, 1));
    unsigned long long got = 0;
    CHECK(cuMemGetAccess(&got, &prop.location, va + gran));
    EXPECT(got == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess");
    CUdeviceptr va_a = va + 256, va_c = va + gran + 512;
    for (int i = 0; i < n; i++) c[i] = (float)(2 * i);
    CHECK(cuMemcpyHtoD(va_a, c, bytes));
    void *vargs[] = {&va_a, &db, &va_c, (void *)&n};
    CHECK(cuLaunchKernel(matsum, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, vargs, NULL));
    memset(c, 0, bytes);
    CHECK(cuMemcpy((CUdeviceptr)c, va_c, bytes));
    ok = 1;
    for (int i = 0; i < n; i++) ok &= c[i] == (float)(2 * i) + 1.0f;
    EXPECT(ok, "kernels and copies on mapped memory");
    CHECK(cuMemUnmap(va, 2 * gran));
    EXPECT(cuMemcpyDtoH(c, va_c, 16) == CUDA_ERROR_INVALID_VALUE, "unmapped memory is gone");
    CHECK(cuMemAddressFree(va, 2 * gran));

    CHECK(cuMemFreeHost(pinned));
    CHECK(cuEventDestroy(e0));
    CHECK(cuEventDestroy(e1));
    CHECK(cuStreamDestroy(st));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuMemFree(dx));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy(ctx));
    printf("PASS\n");
    return failures;
}
