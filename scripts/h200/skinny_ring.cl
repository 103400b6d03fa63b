// skinny_lab.py --async only (appended to the library source, built with -DSDGPU_NV_PTX=1): gemm_s16x<CW> with
// its B rows streamed by cp.async into a per-work-item ring in local memory. Measured on an H100 (BENCHMARKS
// session 16): no faster than gemm_s16x128 at any ring depth or with U laid out work-group-major (LY 1), and
// without its FMAs (NOMATH 1) still 94% of its own time, so the delegate does not use it; kept as the lab's record
// of that experiment. Needs gv_finish and sd_act from the library's gemm_tiled.kern.
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX
// ---- skinny GEMM with B streamed by cp.async (NVIDIA only: inline PTX, sm_80+) -------------------------------
// gemm_a16x<CW>: gemm_s16x<CW>'s parameters, layout and launch shape (TM = 16, RS = 1), but each work-item's next B
// rows travel by cp.async into its own ring of D = PD * NG float4 slots in local memory instead of PF registers:
// NG - 1 groups of PD rows stay in flight while it computes on the current group. Why: gemm_s16x128 reads U at
// ~2.4 TB/s of the ~4 a plain read reaches, because registers cap its bytes in flight per SM (PF = 4 rows at 128
// registers; PF = 8 took 187 registers and ran slower, BENCHMARKS session 10); an asynchronous copy holds no
// register until its row is read back. A work-item reads back only the slots it filled, so the per-thread
// cp.async.wait_group is the only synchronisation the ring needs (no barrier). Rows past kend and columns past N
// are zero-filled (source size 0, the source address then being B itself). Local memory: the A chunk (KC x 16
// floats) + the ring (D x NT float4), reused for the lanes' partials at the end (gv_finish).
// Trade-offs: NVIDIA only (elsewhere the planner keeps gemm_s16x128); the ring costs local memory (40 KB at
// D = 16, NT = 128), which caps resident work-groups at 5 per SM -- more than the 360-work-group grids need.
inline void ga_copy(__local float4* dst, __global const uchar* src, int half_b, int valid) {
  const uint d = (uint)(size_t)dst;
  if (half_b) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(valid ? 8 : 0) : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
  }
}
inline void ga_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
// cp.async.wait_group takes an immediate: n is a compile-time constant at every call, so one case survives.
inline void ga_wait(const int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

inline void ga_skinny(__local float4* lds, const int CW, const int KL, const int KC, const int PD, const int NG,
                      const int LY, const int NOMATH,
                      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab,
                      int sam, int sak, __global const float* B, int bo, int sbb, int b_half,
                      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act,
                      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {
  const int TM = 16, NCG = CW / 4, NT = NCG * KL, KPL = KC / KL, D = PD * NG;
  const int lid = get_local_id(1) * 16 + get_local_id(0);
  const int c = lid % NCG, lane = lid / NCG;
  const int n0 = get_group_id(0) * CW, m0 = get_group_id(1) * TM;
  const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;
  const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);
  const int abase = ao + bz * sab;
  const int n = n0 + 4 * c;
  const int half_b = b_half & 1;
  const int esize = half_b ? 2 : 4;
  // tile-major B: [batch][ceil(N/64)][K][64]; this work-item's 4 columns of row k at bp + k * 64 (elements)
  // LY 0: the library's tile-major U, [batch][N/64][K][64]: one step of a work-group reads 2 x KL pieces of 256
  // bytes (two 64-column slabs, KL k-rows KPL apart). LY 1 (lab layout): work-group-major, [batch][N/CW][Kp][CW]
  // (Kp = K rounded up to KC, zero rows) with each KC chunk's rows ordered (j, lane), so one step of a work-group
  // reads KL * CW contiguous floats; needs k_split % KC == 0.
  const int Kp = (K + KC - 1) / KC * KC;
  const int bp = LY ? bo + bz * sbb + (n0 / CW) * Kp * CW + 4 * c : bo + bz * sbb + (n >> 6) * K * 64 + (n & 63);
  const int rstride = LY ? CW : 64;  // elements between consecutive rows of this work-item's B
  __global const uchar* b8 = (__global const uchar*)B + (size_t)bp * esize;
  const int a_vec = sak == 1 && ((ao | sab | sam) & 3) == 0;
  __local float4* ring = lds + KC * TM / 4;  // slot s of this work-item: ring[s * NT + lid]
  float4 acc[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) acc[r] = (float4)(0.0f);
  const int nchunks = (kend - kbeg + KC - 1) / KC;
  const int total = nchunks * KPL;  // B rows this work-item consumes (masked ones included)
#define GA_K(j) (kbeg + ((j) / KPL) * KC + lane * KPL + (j) % KPL)
#define GA_ISSUE(j)                                                                                   \
  {                                                                                                   \
    const int k_ = GA_K(j);                                                                           \
    const int ok_ = (j) < total && k_ < kend && n < N;                                                \
    const int r_ = LY ? kbeg + ((j) / KPL) * KC + ((j) % KPL) * KL + lane : k_;                       \
    ga_copy(ring + ((j) % D) * NT + lid, ok_ ? b8 + (size_t)r_ * rstride * esize : (__global const uchar*)B, \
            half_b, ok_);                                                                             \
  }
  for (int g = 0; g < NG - 1; ++g) {
#pragma unroll
    for (int p = 0; p < PD; ++p) GA_ISSUE(g * PD + p);
    ga_commit();
  }
  for (int ch = 0; ch < nchunks; ++ch) {
    const int kc = kbeg + ch * KC;
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous chunk is consumed
    gv_stage_a(lds, TM, KC, NT, lid, kc, kend, m0, M, A, abase, sam, sak, a_vec);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int jj = 0; jj < KPL; jj += PD) {
      const int j = ch * KPL + jj;
#pragma unroll
      for (int p = 0; p < PD; ++p) GA_ISSUE(j + (NG - 1) * PD + p);  // into the slots of the group consumed last
      ga_commit();
      ga_wait(NG - 1);  // this work-item's group j / PD has landed
#pragma unroll
      for (int p = 0; p < PD; ++p) {
        __local float4* slot = ring + ((j + p) % D) * NT + lid;
        const float4 b = half_b ? vload_half4(0, (__local half*)slot) : *slot;
        __local const float4* ak = lds + (lane * KPL + jj + p) * (TM / 4);
        if (NOMATH) {  // diagnosis: the loads and the A reads without the FMAs (kept alive by one add)
          acc[p & 15] += b + ak[p & 3];
          continue;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 a = ak[q];
          acc[4 * q + 0] = mad((float4)(a.x), b, acc[4 * q + 0]);
          acc[4 * q + 1] = mad((float4)(a.y), b, acc[4 * q + 1]);
          acc[4 * q + 2] = mad((float4)(a.z), b, acc[4 * q + 2]);
          acc[4 * q + 3] = mad((float4)(a.w), b, acc[4 * q + 3]);
        }
      }
    }
  }
#undef GA_ISSUE
#undef GA_K
  ga_wait(0);  // the ring's last (masked) copies land before gv_finish reuses its memory
  gv_finish(lds, acc, CW, KL, 1, TM, lid, c, 0, lane, n0, m0, bz, sz, C, co, scb, scs, scm, bias, biaso, has_bias,
            M, N, alpha, act, R, ro, rrows, rsm);
}

// Local memory: max(A chunk + ring, partials), in float4.
#define GA_LDS4(CW, KL, KC, PD, NG)                                                                        \
  ((KC) * 4 + (PD) * (NG) * (CW) / 4 * (KL) > (KL) * 4 * (CW) ? (KC) * 4 + (PD) * (NG) * (CW) / 4 * (KL) \
                                                              : (KL) * 4 * (CW))
#define SD_GEMM_SKINNY4A(NAME, CW, KL, KC, PD, NG, LY, NOMATH)                                                                \
  __kernel __attribute__((reqd_work_group_size(16, (CW) / 4 * (KL) / 16, 1))) void NAME(                             \
      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab, int sam, \
      int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half,                         \
      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act,         \
      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {                         \
    __local float4 lds[GA_LDS4(CW, KL, KC, PD, NG)];                                                          \
    ga_skinny(lds, CW, KL, KC, PD, NG, LY, NOMATH, C, co, scb, scs, scm, A, ao, sab, sam, sak, B, bo, sbb, b_half, bias, biaso, \
              has_bias, M, N, K, alpha, act, splits, k_split, R, ro, rrows, rsm);                             \
  }
#endif  // SDGPU_NV_PTX
