// cuFFT as programs use it: 1D, 2D and 3D complex transforms, real to
// complex and back, double precision, batched plans with an advanced
// layout, a plan bound to a stream, and a plan made with a caller-provided
// work area. Every result is compared with a discrete Fourier transform
// computed on the CPU in double precision; the program prints only whether
// each stays within tolerance, so its output is the same wherever it runs.
#include "common.h"
#include <cmath>
#include <complex>
#include <cufft.h>
#include <vector>

#define CHECK_FFT(call)                                                         \
    do {                                                                        \
        cufftResult r_ = (call);                                                \
        if (r_ != CUFFT_SUCCESS) {                                              \
            printf("cuFFT error %d at %s:%d\n", (int)r_, __FILE__, __LINE__);   \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

using cd = std::complex<double>;

// A deterministic input in [-1, 1).
static double value(size_t i, unsigned salt) {
    unsigned x = (unsigned)i * 2654435761u + salt * 40503u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (double)(x % 20000) / 10000.0 - 1.0;
}

// The DFT of a multi-dimensional array (row-major, dims[0] slowest), with
// the sign of cuFFT's forward (-1) or inverse (+1) transform.
static std::vector<cd> dft(const std::vector<cd>& in, const std::vector<int>& dims, int sign) {
    std::vector<cd> cur = in;
    size_t total = in.size();
    size_t inner = total;
    for (size_t d = 0; d < dims.size(); d++) {
        int n = dims[d];
        inner /= n;
        size_t outer = total / (inner * n);
        std::vector<cd> next(total);
        for (size_t o = 0; o < outer; o++)
            for (size_t i = 0; i < inner; i++)
                for (int k = 0; k < n; k++) {
                    cd sum = 0;
                    for (int j = 0; j < n; j++) {
                        double a = sign * 2.0 * M_PI * (double)((long)j * k % n) / n;
                        sum += cur[(o * n + j) * inner + i] * cd(cos(a), sin(a));
                    }
                    next[(o * n + k) * inner + i] = sum;
                }
        cur.swap(next);
    }
    return cur;
}

// Largest difference relative to the largest magnitude of `want`.
static double rel_err(const std::vector<cd>& got, const std::vector<cd>& want) {
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < want.size(); i++) {
        diff = fmax(diff, std::abs(got[i] - want[i]));
        scale = fmax(scale, std::abs(want[i]));
    }
    return diff / scale;
}

static void report(const char* what, double err, double tol) {
    printf("%-44s %s\n", what, err <= tol ? "ok" : "WRONG");
    if (err > tol) exit(1);
}

// A single-precision complex transform of `batch` arrays of shape `dims`,
// forward then inverse, on `stream`.
static void c2c(const char* what, const std::vector<int>& dims, int batch, cudaStream_t stream) {
    size_t n = 1;
    for (int d : dims) n *= d;
    std::vector<cufftComplex> h(n * batch);
    std::vector<cd> in(n * batch);
    for (size_t i = 0; i < h.size(); i++) {
        h[i] = make_cuComplex((float)value(i, 1), (float)value(i, 2));
        in[i] = cd(h[i].x, h[i].y);
    }
    cufftComplex* d;
    CHECK(cudaMalloc(&d, h.size() * sizeof(cufftComplex)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(cufftComplex), cudaMemcpyHostToDevice));
    cufftHandle plan;
    CHECK_FFT(cufftPlanMany(&plan, (int)dims.size(), const_cast<int*>(dims.data()), nullptr, 1, (int)n, nullptr, 1,
                            (int)n, CUFFT_C2C, batch));
    CHECK_FFT(cufftSetStream(plan, stream));
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<cufftComplex> out(h.size());
    CHECK(cudaMemcpy(out.data(), d, out.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
    double err = 0;
    for (int b = 0; b < batch; b++) {
        std::vector<cd> one(in.begin() + b * n, in.begin() + (b + 1) * n), got(n);
        for (size_t i = 0; i < n; i++) got[i] = cd(out[b * n + i].x, out[b * n + i].y);
        err = fmax(err, rel_err(got, dft(one, dims, -1)));
    }
    char line[96];
    snprintf(line, sizeof line, "%s forward", what);
    report(line, err, 1e-5);
    CHECK_FFT(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
    CHECK(cudaMemcpy(out.data(), d, out.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
    std::vector<cd> got(out.size()), want(in.size());
    for (size_t i = 0; i < out.size(); i++) {
        got[i] = cd(out[i].x, out[i].y);
        want[i] = in[i] * (double)n;
    }
    snprintf(line, sizeof line, "%s inverse of forward", what);
    report(line, rel_err(got, want), 1e-5);
    CHECK_FFT(cufftDestroy(plan));
    CHECK(cudaFree(d));
}

// Real to complex and back, out of place, with a work area the program
// allocates itself.
static void r2c(int n) {
    std::vector<float> h(n);
    std::vector<cd> in(n);
    for (int i = 0; i < n; i++) {
        h[i] = (float)value(i, 3);
        in[i] = h[i];
    }
    float* dr;
    cufftComplex* dc;
    CHECK(cudaMalloc(&dr, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, (n / 2 + 1) * sizeof(cufftComplex)));
    CHECK(cudaMemcpy(dr, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cufftHandle fwd, inv;
    size_t work_fwd = 0, work_inv = 0;
    CHECK_FFT(cufftCreate(&fwd));
    CHECK_FFT(cufftCreate(&inv));
    CHECK_FFT(cufftSetAutoAllocation(fwd, 0));
    CHECK_FFT(cufftSetAutoAllocation(inv, 0));
    CHECK_FFT(cufftMakePlan1d(fwd, n, CUFFT_R2C, 1, &work_fwd));
    CHECK_FFT(cufftMakePlan1d(inv, n, CUFFT_C2R, 1, &work_inv));
    void* work;
    CHECK(cudaMalloc(&work, std::max<size_t>(std::max(work_fwd, work_inv), 1)));
    CHECK_FFT(cufftSetWorkArea(fwd, work));
    CHECK_FFT(cufftSetWorkArea(inv, work));
    CHECK_FFT(cufftExecR2C(fwd, dr, dc));
    std::vector<cufftComplex> out(n / 2 + 1);
    CHECK(cudaMemcpy(out.data(), dc, out.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
    std::vector<cd> full = dft(in, {n}, -1), half(full.begin(), full.begin() + n / 2 + 1), got(out.size());
    for (size_t i = 0; i < out.size(); i++) got[i] = cd(out[i].x, out[i].y);
    char line[96];
    snprintf(line, sizeof line, "r2c %d", n);
    report(line, rel_err(got, half), 1e-5);
    CHECK_FFT(cufftExecC2R(inv, dc, dr));
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), dr, n * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<cd> b(n), want(n);
    for (int i = 0; i < n; i++) {
        b[i] = back[i];
        want[i] = in[i] * (double)n;
    }
    snprintf(line, sizeof line, "c2r %d of r2c", n);
    report(line, rel_err(b, want), 1e-5);
    CHECK_FFT(cufftDestroy(fwd));
    CHECK_FFT(cufftDestroy(inv));
    CHECK(cudaFree(work));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(dc));
}

// Double precision, with the plan's size query first.
static void z2z(int n) {
    std::vector<cufftDoubleComplex> h(n);
    std::vector<cd> in(n);
    for (int i = 0; i < n; i++) {
        h[i] = make_cuDoubleComplex(value(i, 4), value(i, 5));
        in[i] = cd(h[i].x, h[i].y);
    }
    size_t estimate = 0;
    CHECK_FFT(cufftEstimate1d(n, CUFFT_Z2Z, 1, &estimate));
    cufftDoubleComplex* d;
    CHECK(cudaMalloc(&d, n * sizeof(cufftDoubleComplex)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(cufftDoubleComplex), cudaMemcpyHostToDevice));
    cufftHandle plan;
    CHECK_FFT(cufftPlan1d(&plan, n, CUFFT_Z2Z, 1));
    CHECK_FFT(cufftExecZ2Z(plan, d, d, CUFFT_FORWARD));
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(cufftDoubleComplex), cudaMemcpyDeviceToHost));
    std::vector<cd> got(n);
    for (int i = 0; i < n; i++) got[i] = cd(h[i].x, h[i].y);
    char line[96];
    snprintf(line, sizeof line, "z2z %d forward (double)", n);
    report(line, rel_err(got, dft(in, {n}, -1)), 1e-11);
    CHECK_FFT(cufftDestroy(plan));
    CHECK(cudaFree(d));
}

int main() {
    int version = 0;
    CHECK_FFT(cufftGetVersion(&version));
    printf("cuFFT loaded\n");
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    c2c("c2c 1d 1024 x4 (stream)", {1024}, 4, stream);
    c2c("c2c 1d 1000 (not a power of two)", {1000}, 1, 0);
    c2c("c2c 2d 64x48", {64, 48}, 1, stream);
    c2c("c2c 3d 16x8x12 x2", {16, 8, 12}, 2, 0);
    r2c(4096);
    z2z(512);
    CHECK(cudaStreamDestroy(stream));
    printf("done\n");
    return 0;
}
