#pragma once
#include <random>
struct Problem {
    int bits, group, in, out, tokens; bool has_bias;
    std::vector<u16> x, scales, biases, bias, y;
    std::vector<u32> w;
    std::vector<uint8_t> q;
    std::vector<double> ref;
};
static u16 f2bf_host(float f) { return emu_f2bf(f); }
static void make_problem(Problem& P, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> U(-1.f, 1.f);
    int in = P.in, out = P.out, G = in / P.group;
    P.q.resize((size_t)out * in);
    for (auto& v : P.q) v = (uint8_t)(rng() & ((1u << P.bits) - 1));
    size_t row_bytes = (size_t)in * P.bits / 8;
    std::vector<uint8_t> packed((size_t)out * row_bytes, 0);
    for (int o = 0; o < out; ++o) {
        uint8_t* row = &packed[(size_t)o * row_bytes];
        for (int i = 0; i < in; ++i) {
            int bit = i * P.bits, b = bit >> 3, sh = bit & 7;
            uint16_t wv = (uint16_t)P.q[(size_t)o * in + i] << sh;
            row[b] |= (uint8_t)wv;
            if (sh + P.bits > 8) row[b + 1] |= (uint8_t)(wv >> 8);
        }
    }
    P.w.resize(packed.size() / 4);
    memcpy(P.w.data(), packed.data(), packed.size());
    P.scales.resize((size_t)out * G); P.biases.resize((size_t)out * G);
    for (auto& s : P.scales) s = f2bf_host((U(rng) * 0.5f + 0.6f) / (float)((1 << P.bits) - 1));
    for (auto& b : P.biases) b = f2bf_host(U(rng));
    P.x.resize((size_t)P.tokens * in);
    for (auto& v : P.x) v = f2bf_host(U(rng));
    P.bias.resize(out);
    for (auto& v : P.bias) v = f2bf_host(U(rng));
    P.y.assign((size_t)P.tokens * out, 0xFFFF);
    P.ref.assign((size_t)P.tokens * out, 0.0);
    for (int o = 0; o < out; ++o) {
        std::vector<double> wr(in);
        for (int i = 0; i < in; ++i)
            wr[i] = (double)kc_bf16(P.scales[(size_t)o * G + i / P.group]) * P.q[(size_t)o * in + i] +
                    (double)kc_bf16(P.biases[(size_t)o * G + i / P.group]);
        for (int t = 0; t < P.tokens; ++t) {
            double s = 0;
            for (int i = 0; i < in; ++i) s += (double)kc_bf16(P.x[(size_t)t * in + i]) * wr[i];
            if (P.has_bias) s += kc_bf16(P.bias[o]);
            P.ref[(size_t)t * out + o] = s;
        }
    }
}
static bool check(const Problem& P, const char* name) {
    double num = 0, den = 0, worst = 0; long bad = 0; size_t wi = 0;
    for (size_t i = 0; i < P.ref.size(); ++i) {
        double g = kc_bf16(P.y[i]), r = P.ref[i];
        double tol = std::max(0.125, 0.01 * std::fabs(r));
        double ex = std::fabs(g - r) / tol;
        if (!std::isfinite(g) || !std::isfinite(ex)) ex = INFINITY;
        if (ex > 1) bad++;
        if (ex > worst) { worst = ex; wi = i; }
        num += (g - r) * (g - r); den += r * r;
    }
    double rel = std::sqrt(num / std::max(den, 1e-30));
    bool ok = bad == 0 && rel <= 1e-2;
    printf("%s %s bits=%d g=%d %d->%d t=%d bias=%d rel=%.2e worst=%.3f (idx %zu got %g want %g) bad=%ld\n",
           ok ? "PASS" : "FAIL", name, P.bits, P.group, P.in, P.out, P.tokens, (int)P.has_bias, rel, worst, wi,
           (double)kc_bf16(P.y[wi]), P.ref[wi], bad);
    return ok;
}
