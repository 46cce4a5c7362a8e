"""The FP16 update's fragment addressing checked on the CPU (development aid): cuda/blocked/update_fp16.cu's index
expressions, transcribed, driven through a lane-by-lane model of ldmatrix .x4 and .x4.trans (16-bit elements) and of
mma.m16n8k16.row.col (PTX ISA fragment layouts), for one 32-row chunk: the first product (W = V^T C) and the second
(C^T += W'^T V^T) against numpy, and every ldmatrix matrix's eight row addresses in eight different 16-byte bank
groups. Re-run it after changing the kernel's layouts (and mirror the change here first).

    python tools/fp16_update_lanes.py
"""
import numpy as np

KC, WV, NT = 32, 64, 64
rng = np.random.default_rng(1)

def plane_at(c, r):
    return c * KC + ((((r >> 3) ^ (c >> 1)) & 3) << 3) + (r & 7)

def ldsm4(plane, addrs):
    """addrs[l]: lane l's row address (in halves). Returns regs[l][i] = (lo, hi) halves of matrix i."""
    out = [[None] * 4 for _ in range(32)]
    for l in range(32):
        for i in range(4):
            row = l // 4
            a = addrs[8 * i + row]
            out[l][i] = (plane[a + 2 * (l % 4)], plane[a + 2 * (l % 4) + 1])
    return out

def ldsm4t(plane, addrs):
    out = [[None] * 4 for _ in range(32)]
    for l in range(32):
        for i in range(4):
            r0, col = 2 * (l % 4), l // 4
            out[l][i] = (plane[addrs[8 * i + r0] + col], plane[addrs[8 * i + r0 + 1] + col])
    return out

def mma(D, A, B):
    """D[l] (4 floats), A[l] (4 regs of 2 halves), B[l] (2 regs): D += A B for m16n8k16 row.col."""
    Am = np.full((16, 16), np.nan); Bm = np.full((16, 8), np.nan)
    for l in range(32):
        g, q = l // 4, l % 4
        for r in range(4):
            row, col = g + 8 * (r % 2), 2 * q + 8 * (r // 2)
            Am[row, col], Am[row, col + 1] = A[l][r]
        for r in range(2):
            k = 2 * q + 8 * r
            Bm[k, g], Bm[k + 1, g] = B[l][r]
    assert not np.isnan(Am).any() and not np.isnan(Bm).any()
    P = Am @ Bm
    for l in range(32):
        g, q = l // 4, l % 4
        for i in range(4):
            D[l][i] += P[g + 8 * (i // 2), 2 * q + (i % 2)]

# one chunk: V (KC x WV), C (KC x NT), values as the planes hold them (no split: exact index check)
V = rng.standard_normal((KC, WV)); C = rng.standard_normal((KC, NT))
vplane = np.zeros(WV * KC); cplane = np.zeros(NT * KC)
for c in range(WV):
    for r in range(KC): vplane[plane_at(c, r)] = V[r, c]
for c in range(NT):
    for r in range(KC): cplane[plane_at(c, r)] = C[r, c]

# ---- P1: W = V^T C
W = np.zeros((WV, NT))
for warp in range(4):
    wm, wn = warp & 1, warp >> 1
    acc = [[[[0.0] * 4 for _ in range(32)] for _ in range(4)] for _ in range(2)]  # [mt][nt][lane][4]
    for k16 in range(KC // 16):
        a_regs, b_regs = [], []
        for mt in range(2):
            addrs = []
            for l in range(32):
                mi = l >> 3; ra = (l & 7) + 8 * (mi & 1); ka = 8 * (mi >> 1)
                addrs.append(plane_at(32 * wm + 16 * mt + ra, 16 * k16 + ka))
            a_regs.append(ldsm4(vplane, addrs))
        for np_ in range(2):
            addrs = []
            for l in range(32):
                mi = l >> 3; rb = (l & 7) + 8 * (mi >> 1); kb = 8 * (mi & 1)
                addrs.append(plane_at(32 * wn + 16 * np_ + rb, 16 * k16 + kb))
            b_regs.append(ldsm4(cplane, addrs))
        for mt in range(2):
            for nt in range(4):
                h = b_regs[nt >> 1]; o = 2 * (nt & 1)
                B = [[h[l][o], h[l][o + 1]] for l in range(32)]
                mma(acc[mt][nt], a_regs[mt], B)
    for mt in range(2):
        for nt in range(4):
            for l in range(32):
                g, q = l // 4, l % 4
                for e in range(4):
                    i = 32 * wm + 16 * mt + g + (8 if e & 2 else 0); j = 32 * wn + 8 * nt + 2 * q + (e & 1)
                    W[i, j] = acc[mt][nt][l][e]
p1 = np.abs(W - V.T @ C).max()

# ---- P2: C^T += W'^T V^T with W' (WV x NT) from shared memory
Wp = rng.standard_normal((WV, NT))
LDW = WV + 4
ws = np.zeros(NT * LDW)
for j in range(NT):
    for k in range(WV): ws[j * LDW + k] = Wp[k, j]
U = np.zeros((KC, NT))  # U[i, j] = (V W')[i, j]
for warp in range(4):
    j3 = 16 * warp
    wregs = []  # [k16][lane][r] = (lo, hi)
    for k16 in range(WV // 16):
        regs = []
        for l in range(32):
            g, q = l // 4, l % 4
            rr = []
            for r in range(4):
                j = j3 + g + 8 * (r & 1); k = 16 * k16 + 2 * q + 8 * (r >> 1)
                rr.append((ws[j * LDW + k], ws[j * LDW + k + 1]))
            regs.append(rr)
        wregs.append(regs)
    up = [[[0.0] * 4 for _ in range(32)] for _ in range(4)]
    for k16 in range(WV // 16):
        for np_ in range(2):
            addrs = []
            for l in range(32):
                mi = l >> 3; kt = (l & 7) + 8 * (mi & 1); it = 8 * (mi >> 1)
                addrs.append(plane_at(16 * k16 + kt, 16 * np_ + it))
            bh = ldsm4t(vplane, addrs)
            for h in range(2):
                n = 2 * np_ + h
                B = [[bh[l][2 * h], bh[l][2 * h + 1]] for l in range(32)]
                mma(up[n], wregs[k16], B)
    for n in range(4):
        for l in range(32):
            g, q = l // 4, l % 4
            for h in range(2):
                j = j3 + g + 8 * h; i = 8 * n + 2 * q
                U[i, j] = up[n][l][2 * h]; U[i + 1, j] = up[n][l][2 * h + 1]
p2 = np.abs(U - V @ Wp).max()
print(f"first product: max |error| {p1:.3g}; second product: max |error| {p2:.3g} (rounding only: < 1e-12)")
assert p1 < 1e-12 and p2 < 1e-12



# every ldmatrix matrix: 8 row addresses (halves) -> 16-byte units mod 8 must be distinct
def check(addr_fn, name):
    bad = 0
    for args in addr_fn():
        units = [(a * 2 // 16) % 8 for a in args]
        if len(set(units)) != 8: bad += 1
    print(f"{name}: {bad} matrices with a bank conflict")
    assert bad == 0
def p1a():
    for wm in range(2):
        for mt in range(2):
            for k16 in range(2):
                for mi in range(4):
                    yield [plane_at(32 * wm + 16 * mt + (r + 8 * (mi & 1)), 16 * k16 + 8 * (mi >> 1)) for r in range(8)]
def p1b():
    for wn in range(2):
        for np_ in range(2):
            for k16 in range(2):
                for mi in range(4):
                    yield [plane_at(32 * wn + 16 * np_ + r + 8 * (mi >> 1), 16 * k16 + 8 * (mi & 1)) for r in range(8)]
def p2():
    for k16 in range(4):
        for np_ in range(2):
            for mi in range(4):
                yield [plane_at(16 * k16 + r + 8 * (mi & 1), 16 * np_ + 8 * (mi >> 1)) for r in range(8)]
check(p1a, "first product, V^T"); check(p1b, "first product, C"); check(p2, "second product, V^T (.trans)")
