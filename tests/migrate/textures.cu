// A program holding CUDA arrays and texture and surface objects, for
// tests/migrate/run.sh: a 2D array read through a texture and changed
// through a surface at every step, a layered array, a mipmapped array read
// at level 1, a texture over pitched memory, and a gap in the objects'
// numbering (an object destroyed). Each step prints a checksum of what
// the kernels read, so a session that moved shows whether its arrays'
// elements and its objects' values came along.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("FAIL %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(e_));             \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static const int W = 64, H = 32, LAYERS = 3;

__global__ void look(cudaTextureObject_t plain, cudaTextureObject_t pitched, cudaTextureObject_t layered,
                     cudaTextureObject_t mip, float *out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= W || y >= H) return;
  float v = tex2D<float>(plain, x + 0.5f, y + 0.5f) + 2.0f * tex2D<float>(pitched, x + 0.5f, y + 0.5f);
  for (int l = 0; l < LAYERS; l++) v += (l + 3) * tex2DLayered<float>(layered, x + 0.5f, y + 0.5f, l);
  v += 5.0f * tex2DLod<float>(mip, (x / 2 + 0.5f) / (W / 2), (y / 2 + 0.5f) / (H / 2), 1.0f);
  out[y * W + x] = v;
}

__global__ void bump(cudaSurfaceObject_t s, int step) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= W || y >= H) return;
  float v;
  surf2Dread(&v, s, x * 4, y);
  surf2Dwrite(v + (float)((x + y + step) % 7), s, x * 4, y);
}

static cudaTextureObject_t texture(const cudaResourceDesc &r, bool normalized, bool mip) {
  cudaTextureDesc t;
  memset(&t, 0, sizeof t);
  t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = cudaAddressModeClamp;
  t.filterMode = cudaFilterModePoint;
  t.readMode = cudaReadModeElementType;
  t.normalizedCoords = normalized;
  if (mip) { t.mipmapFilterMode = cudaFilterModePoint; t.maxMipmapLevelClamp = 2; }
  cudaTextureObject_t o;
  CK(cudaCreateTextureObject(&o, &r, &t, nullptr));
  return o;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  float host[W * H * LAYERS];
  for (int i = 0; i < W * H * LAYERS; i++) host[i] = (float)((i * 37) % 101) - 50.0f;

  cudaArray_t plain;
  CK(cudaMallocArray(&plain, &f, W, H, cudaArraySurfaceLoadStore));
  CK(cudaMemcpy2DToArray(plain, 0, 0, host, W * 4, W * 4, H, cudaMemcpyHostToDevice));
  cudaResourceDesc r;
  memset(&r, 0, sizeof r);
  r.resType = cudaResourceTypeArray;
  r.res.array.array = plain;
  cudaTextureObject_t gone = texture(r, false, false);  // destroyed below: a gap
  cudaTextureObject_t tplain = texture(r, false, false);
  cudaSurfaceObject_t surf;
  CK(cudaCreateSurfaceObject(&surf, &r));
  CK(cudaDestroyTextureObject(gone));

  float *pitched; size_t pitch;
  CK(cudaMallocPitch(&pitched, &pitch, W * 4, H));
  CK(cudaMemcpy2D(pitched, pitch, host + 7, W * 4, W * 4, H, cudaMemcpyHostToDevice));
  cudaResourceDesc rp;
  memset(&rp, 0, sizeof rp);
  rp.resType = cudaResourceTypePitch2D;
  rp.res.pitch2D.devPtr = pitched; rp.res.pitch2D.desc = f;
  rp.res.pitch2D.width = W; rp.res.pitch2D.height = H; rp.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t tpitched = texture(rp, false, false);

  cudaArray_t layered;
  CK(cudaMalloc3DArray(&layered, &f, make_cudaExtent(W, H, LAYERS), cudaArrayLayered));
  cudaMemcpy3DParms p;
  memset(&p, 0, sizeof p);
  p.srcPtr = make_cudaPitchedPtr(host, W * 4, W, H);
  p.dstArray = layered; p.extent = make_cudaExtent(W, H, LAYERS); p.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p));
  r.res.array.array = layered;
  cudaTextureObject_t tlayered = texture(r, false, false);

  cudaMipmappedArray_t mip;
  CK(cudaMallocMipmappedArray(&mip, &f, make_cudaExtent(W, H, 0), 3));
  cudaArray_t level1;
  CK(cudaGetMipmappedArrayLevel(&level1, mip, 1));
  CK(cudaMemcpy2DToArray(level1, 0, 0, host + 100, (W / 2) * 4, (W / 2) * 4, H / 2, cudaMemcpyHostToDevice));
  cudaResourceDesc rm;
  memset(&rm, 0, sizeof rm);
  rm.resType = cudaResourceTypeMipmappedArray;
  rm.res.mipmap.mipmap = mip;
  cudaTextureObject_t tmip = texture(rm, true, true);

  float *out, *res = new float[W * H];
  CK(cudaMalloc(&out, W * H * 4));
  dim3 block(16, 16), grid(W / 16, H / 16);
  for (int s = 0; s < steps; s++) {
    look<<<grid, block>>>(tplain, tpitched, tlayered, tmip, out);
    bump<<<grid, block>>>(surf, s);
    CK(cudaMemcpy(res, out, W * H * 4, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < W * H; i++) sum += res[i] * (1 + i % 5);
    printf("%d %.1f %s\n", s, sum, cudaGetErrorString(cudaGetLastError()));
    fflush(stdout);
    usleep(50000);
  }
  CK(cudaDestroyTextureObject(tplain)); CK(cudaDestroySurfaceObject(surf)); CK(cudaDestroyTextureObject(tpitched));
  CK(cudaDestroyTextureObject(tlayered)); CK(cudaDestroyTextureObject(tmip));
  CK(cudaFreeArray(plain)); CK(cudaFreeArray(layered)); CK(cudaFreeMipmappedArray(mip));
  CK(cudaFree(pitched)); CK(cudaFree(out));
  printf("done\n");
  return 0;
}
