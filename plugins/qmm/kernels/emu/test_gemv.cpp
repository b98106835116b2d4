#include "emu.h"
#include "../../../gemv/kernels/gemv.cu"
#include "common.h"
int main(int argc, char** argv) {
    if (getenv("EMU_EAGER")) g_eager = true;
    int ok = 1;
    for (int a = 1; a + 3 < argc; a += 4) {
        Problem P{BITS, GROUP, atoi(argv[a]), atoi(argv[a + 1]), atoi(argv[a + 2]), atoi(argv[a + 3]) != 0};
        make_problem(P, 1234 + a);
        int in = P.in, out = P.out;
        int SUBv = VALS < GROUP ? VALS : GROUP;
        size_t smem = 4 * (((size_t)TOKENS * (in / SUBv) + 3) / 4 * 4) + (XSMEM ? 4ull * TOKENS * (in / VALS) * (VALS + 4) : 0);
        unsigned gx = (unsigned)(((out + ROWS - 1) / ROWS + WARPS - 1) / WARPS);
        if (getenv("GRIDX")) gx = std::min<unsigned>(gx, atoi(getenv("GRIDX")));
        emu_dim3 grid{gx, (unsigned)((P.tokens + TOKENS - 1) / TOKENS), 1};
        emu_launch(grid, WARPS * 32, smem, 1, [&] {
            affine_gemv(P.x.data(), P.w.data(), P.scales.data(), P.biases.data(), P.has_bias ? P.bias.data() : nullptr,
                        P.y.data(), P.tokens, in, out);
        });
        ok &= check(P, "gemv");
    }
    return ok ? 0 : 1;
}
