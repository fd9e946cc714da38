// CUDA arrays, textures and surfaces, as the runtime API makes them: a 2D
// float array filled from the host (cudaMemcpy2DToArray) and read by a
// kernel through a texture object; the same through pitched memory
// (cudaMallocPitch, a pitch-2D resource); a surface array scaled in place
// by a kernel (surf2Dread/surf2Dwrite) and read back
// (cudaMemcpy2DFromArray); a layered 3D array and a mipmapped array's
// level filled and read back with cudaMemcpy3D; array-to-array and
// array-to-device copies; descriptors read back (cudaArrayGetInfo,
// cudaGetTextureObjectResourceDesc, ...). Every result is checked against
// the CPU; the output is compared line by line with the native run
// (textures.expected); the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernels are ones pvgpu's host
// test double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

extern "C" __global__ void pvgpu_tex_read(cudaTextureObject_t tex, float *out,
                                          int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void pvgpu_surf_scale(cudaSurfaceObject_t surf, int w,
                                            int h, float k) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) {
        float v;
        surf2Dread(&v, surf, x * (int)sizeof(float), y);
        surf2Dwrite(v * k, surf, x * (int)sizeof(float), y);
    }
}

static bool all_ok = true;

static void verdict(const char *what, bool ok) {
    all_ok = all_ok && ok;
    printf("%-52s %s\n", what, ok ? "ok" : "MISMATCH");
}

static const int W = 37, H = 23;

static std::vector<float> image(int seed) {
    std::vector<float> v(W * H);
    for (int i = 0; i < W * H; i++) v[i] = (float)((i * 13 + seed) % 101) - 50.0f;
    return v;
}

static cudaTextureObject_t point_texture(const cudaResourceDesc &res) {
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    return t;
}

static std::vector<float> read_texture(cudaTextureObject_t t) {
    float *out;
    CHECK(cudaMalloc(&out, W * H * sizeof(float)));
    dim3 block(16, 16), grid((W + 15) / 16, (H + 15) / 16);
    pvgpu_tex_read<<<grid, block>>>(t, out, W, H);
    CHECK(cudaGetLastError());
    std::vector<float> v(W * H);
    CHECK(cudaMemcpy(v.data(), out, v.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(out));
    return v;
}

static void texture_of_array() {
    std::vector<float> img = image(3);
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &ch, W, H));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    printf("array info: %d bits, kind %d, %zu x %zu x %zu, flags %u\n", got.x, (int)got.f, ext.width, ext.height, ext.depth, flags);
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaTextureObject_t t = point_texture(res);
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, t));
    verdict("texture's resource desc names the array", back.resType == cudaResourceTypeArray && back.res.array.array == a);
    cudaTextureDesc tdb;
    CHECK(cudaGetTextureObjectTextureDesc(&tdb, t));
    verdict("texture desc read back", tdb.filterMode == cudaFilterModePoint && tdb.addressMode[1] == cudaAddressModeClamp);
    verdict("kernel reads the array through a texture", read_texture(t) == img);
    // Array to array (a rectangle), then array to device memory.
    cudaArray_t b;
    CHECK(cudaMallocArray(&b, &ch, W, H));
    CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
    float *d;
    size_t pitch;
    CHECK(cudaMallocPitch(&d, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2DFromArray(d, pitch, b, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
    std::vector<float> via(W * H);
    CHECK(cudaMemcpy2D(via.data(), W * sizeof(float), d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    verdict("array to array to pitched memory", via == img);
    // A texture over the pitched memory itself.
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypePitch2D;
    res.res.pitch2D.devPtr = d;
    res.res.pitch2D.desc = ch;
    res.res.pitch2D.width = W;
    res.res.pitch2D.height = H;
    res.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t tp = point_texture(res);
    verdict("kernel reads pitched memory through a texture", read_texture(tp) == img);
    CHECK(cudaDestroyTextureObject(tp));
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(b));
    CHECK(cudaFreeArray(a));
}

static void surface_of_array() {
    std::vector<float> img = image(11);
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &ch, W, H, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaSurfaceObject_t s;
    CHECK(cudaCreateSurfaceObject(&s, &res));
    dim3 block(16, 16), grid((W + 15) / 16, (H + 15) / 16);
    pvgpu_surf_scale<<<grid, block>>>(s, W, H, -2.0f);
    CHECK(cudaGetLastError());
    std::vector<float> back(W * H);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < W * H; i++) ok = ok && back[i] == img[i] * -2.0f;
    verdict("kernel scales the array through a surface", ok);
    CHECK(cudaDestroySurfaceObject(s));
    CHECK(cudaFreeArray(a));
}

static void layered_and_mipmapped() {
    // Four layers of 16 x 8 uchar4 texels.
    const int w = 16, h = 8, layers = 4;
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<uchar4>();
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &ch, make_cudaExtent(w, h, layers), cudaArrayLayered));
    std::vector<unsigned char> in(w * h * layers * 4), out(in.size());
    for (size_t i = 0; i < in.size(); i++) in[i] = (unsigned char)(i * 7 + 1);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(in.data(), w * 4, w, h);
    p.dstArray = a;
    p.extent = make_cudaExtent(w, h, layers);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof p);
    p.srcArray = a;
    p.dstPtr = make_cudaPitchedPtr(out.data(), w * 4, w, h);
    p.extent = make_cudaExtent(w, h, layers);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    verdict("layered array there and back (cudaMemcpy3D)", in == out);
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    printf("layered info: %d %d %d %d bits, %zu x %zu x %zu, flags %u\n", got.x, got.y, got.z, got.w, ext.width, ext.height, ext.depth, flags);
    CHECK(cudaFreeArray(a));

    // A mipmapped 2D float array of 4 levels: 64 x 32 down to 8 x 4.
    cudaChannelFormatDesc fch = cudaCreateChannelDesc<float>();
    cudaMipmappedArray_t m;
    CHECK(cudaMallocMipmappedArray(&m, &fch, make_cudaExtent(64, 32, 0), 4));
    cudaArray_t l3;
    CHECK(cudaGetMipmappedArrayLevel(&l3, m, 3));
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, l3));
    printf("level 3: %zu x %zu\n", ext.width, ext.height);
    std::vector<float> lv(8 * 4), lb(8 * 4);
    for (int i = 0; i < 32; i++) lv[i] = i * 0.25f;
    CHECK(cudaMemcpy2DToArray(l3, 0, 0, lv.data(), 8 * sizeof(float), 8 * sizeof(float), 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(lb.data(), 8 * sizeof(float), l3, 0, 0, 8 * sizeof(float), 4, cudaMemcpyDeviceToHost));
    verdict("mipmap level there and back", lv == lb);
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeMipmappedArray;
    res.res.mipmap.mipmap = m;
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.normalizedCoords = 1;
    td.filterMode = cudaFilterModeLinear;
    td.mipmapFilterMode = cudaFilterModeLinear;
    td.maxMipmapLevelClamp = 3;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    verdict("texture over a mipmapped array", t != 0);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeMipmappedArray(m));
}

static void refusals() {
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &ch, 8, 8));
    std::vector<float> v(128);
    cudaError_t e = cudaMemcpy2DToArray(a, 0, 4, v.data(), 32, 32, 8, cudaMemcpyHostToDevice);
    printf("rows past the array: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaSurfaceObject_t s;
    e = cudaCreateSurfaceObject(&s, &res);
    printf("surface of an array without surface load/store: %s\n", e == cudaSuccess ? "cudaSuccess" : "refused");
    cudaGetLastError();
    CHECK(cudaFreeArray(a));
}

int main() {
    texture_of_array();
    surface_of_array();
    layered_and_mipmapped();
    refusals();
    CHECK(cudaDeviceSynchronize());
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
