// A memory pool shared between two processes, as NVIDIA's
// streamOrderedAllocationIPC sample shares one: the parent makes a pool
// with a POSIX file descriptor handle type, allocates from it on a stream,
// exports the pool (cudaMemPoolExportToShareableHandle) and the
// allocation (cudaMemPoolExportPointer), and starts a copy of itself; the
// descriptor goes over a Unix socket (SCM_RIGHTS), the export data after
// it. The child imports the pool and the allocation, runs a kernel on it,
// frees its import and exits; the parent checks every element against the
// CPU. What must be refused is printed with the driver's status: a pool
// without a shareable handle type, and new allocations from an imported
// pool. CUDA 13's pool calls by location are checked against the
// device's. The output is compared line by line with the native run
// (pool_ipc.expected); the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static const int N = 1 << 20;

// Sends `fd` and `len` bytes over the socket `s`.
static void send_fd(int s, int fd, const void *bytes, size_t len) {
    struct msghdr m = {};
    struct iovec iov = {const_cast<void *>(bytes), len};
    char ctl[CMSG_SPACE(sizeof(int))] = {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(s, &m, 0) != (ssize_t)len) {
        printf("FAIL: sendmsg\n");
        exit(1);
    }
}

// Receives a descriptor and `len` bytes from the socket `s`.
static int recv_fd(int s, void *bytes, size_t len) {
    struct msghdr m = {};
    struct iovec iov = {bytes, len};
    char ctl[CMSG_SPACE(sizeof(int))] = {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    if (recvmsg(s, &m, MSG_WAITALL) != (ssize_t)len) {
        printf("FAIL: recvmsg\n");
        exit(1);
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

// The child: imports the pool and the allocation, y = 2 * x + y with x
// its own copy of the pattern, frees its import.
static int child(int s) {
    cudaMemPoolPtrExportData data;
    int fd = recv_fd(s, &data, sizeof(data));
    CHECK(cudaSetDevice(0));
    cudaMemPool_t pool;
    CHECK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd, cudaMemHandleTypePosixFileDescriptor, 0));
    close(fd);
    float *y = nullptr;
    CHECK(cudaMemPoolImportPointer((void **)&y, pool, &data));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *more = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&more, 4096, pool, st);
    printf("child: allocating from the imported pool: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    std::vector<float> hx(N);
    for (int i = 0; i < N; i++) hx[i] = (float)(i % 1000);
    float *x;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMemcpy(x, hx.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    saxpy<<<(N + 255) / 256, 256, 0, st>>>(2.0f, x, y, N);
    CHECK(cudaGetLastError());
    CHECK(cudaFreeAsync(y, st));
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaFree(x));
    char done = 1;
    if (write(s, &done, 1) != 1) return 1;
    printf("child: done\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && std::string(argv[1]) == "child") return child(atoi(argv[2]));
    CHECK(cudaSetDevice(0));
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    printf("file descriptors among the pool handle types: %s\n", (supported & cudaMemHandleTypePosixFileDescriptor) ? "yes" : "no");
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t plain;
    CHECK(cudaMemPoolCreate(&plain, &props));
    int refused = -1;
    cudaError_t e = cudaMemPoolExportToShareableHandle(&refused, plain, cudaMemHandleTypePosixFileDescriptor, 0);
    printf("exporting a pool made without a handle type: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaMemPoolDestroy(plain));

    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    float *y = nullptr;
    CHECK(cudaMallocFromPoolAsync((void **)&y, N * sizeof(float), pool, st));
    std::vector<float> hy(N);
    for (int i = 0; i < N; i++) hy[i] = 1.0f + (float)(i % 7);
    CHECK(cudaMemcpyAsync(y, hy.data(), N * sizeof(float), cudaMemcpyHostToDevice, st));
    CHECK(cudaStreamSynchronize(st));
    // CUDA 13's calls by location name the same pools as the device's.
    cudaMemLocation loc = {};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 0;
    cudaMemPool_t byloc, dflt, cur;
    CHECK(cudaMemGetDefaultMemPool(&byloc, &loc, cudaMemAllocationTypePinned));
    CHECK(cudaDeviceGetDefaultMemPool(&dflt, 0));
    CHECK(cudaMemSetMemPool(&loc, cudaMemAllocationTypePinned, pool));
    CHECK(cudaMemGetMemPool(&cur, &loc, cudaMemAllocationTypePinned));
    printf("by location: the default pool is the device's: %s; the current pool is the shareable one: %s\n",
           byloc == dflt ? "yes" : "no", cur == pool ? "yes" : "no");
    CHECK(cudaMemSetMemPool(&loc, cudaMemAllocationTypePinned, dflt));
    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    cudaMemPoolPtrExportData data;
    CHECK(cudaMemPoolExportPointer(&data, y));
    printf("pool and allocation exported\n");
    fflush(stdout);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        printf("FAIL: socketpair\n");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        std::string s = std::to_string(sv[1]);
        execl("/proc/self/exe", argv[0], "child", s.c_str(), (char *)nullptr);
        _exit(127);
    }
    close(sv[1]);
    send_fd(sv[0], fd, &data, sizeof(data));
    close(fd);
    char done = 0;
    if (read(sv[0], &done, 1) != 1 || done != 1) {
        printf("FAIL: the child did not finish\n");
        return 1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL: child exit status %d\n", status);
        return 1;
    }

    std::vector<float> got(N);
    CHECK(cudaMemcpy(got.data(), y, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        float want = 2.0f * (float)(i % 1000) + 1.0f + (float)(i % 7);
        if (got[i] != want) {
            printf("FAIL: y[%d] = %g, want %g\n", i, got[i], want);
            return 1;
        }
    }
    printf("the child's kernel wrote every element of the parent's allocation\n");
    CHECK(cudaFreeAsync(y, st));
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(st));
    printf("PASS\n");
    return 0;
}
