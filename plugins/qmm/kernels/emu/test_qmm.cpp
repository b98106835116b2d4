#include "emu.h"
#include "../qmm.cu"
#include "common.h"
static size_t r16(size_t v) { return (v + 15) / 16 * 16; }
int main(int argc, char** argv) {
    if (getenv("EMU_EAGER")) g_eager = true;
    int ok = 1;
    // independent smem formula (as documented)
    size_t xrowb = 2 * (BK + 8), wrow = BK * BITS / 8;
    size_t wsb = (wrow % 16) ? wrow : wrow + 16 * ((wrow / 16 + 1) % 2);
    size_t gt = BK >= GROUP ? BK / GROUP : 1, scw = gt / 2 + 1;
    size_t foldk = std::min<size_t>(std::min<size_t>(GROUP, BK / WARPS_K), 64), nf = BK / foldk;
    size_t stage = r16(BM * xrowb) + r16(BN * wsb + 16) + 2 * r16(4 * BN * scw);
    size_t pipe = STAGES * stage + 2 * BM * xrowb + 2 * 8 * nf * BN + 2 * 4 * nf * BM;
    size_t red = (WARPS_K > 1 || KSPLIT > 1) ? 4ull * WARPS_K * BM * BN : 0;
    size_t smem = std::max(pipe, red);
    if (pipe != PIPE_BYTES) { printf("smem formula mismatch %zu vs %d\n", pipe, (int)PIPE_BYTES); return 2; }
    for (int a = 1; a + 3 < argc; a += 4) {
        Problem P{BITS, GROUP, atoi(argv[a]), atoi(argv[a + 1]), atoi(argv[a + 2]), atoi(argv[a + 3]) != 0};
        make_problem(P, 99 + a);
        emu_dim3 grid{(unsigned)((P.out + BN - 1) / BN * KSPLIT), (unsigned)((P.tokens + BM - 1) / BM), 1};
        emu_launch(grid, NTHREADS, smem, KSPLIT, [&] {
            affine_qmm(P.x.data(), P.w.data(), P.scales.data(), P.biases.data(), P.has_bias ? P.bias.data() : nullptr,
                       P.y.data(), P.tokens, P.in, P.out);
        });
        ok &= check(P, "qmm");
    }
    printf("smem %zu bytes\n", smem);
    return ok ? 0 : 1;
}
